"""The comparison on sessions the real recorder built from Anthropic request and answer bodies
(tests/recording.py, no mitmdump): alignment of calls and turns, what counts as a change and what
does not (ids, timings), and the printer at 80 columns."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console

from assembler.diff.compare import align, compare
from assembler.diff.load import Run, load_run, strip_ids
from assembler.diff.text import as_json, render
from capsem.store.schema import connect
from tests.addons.recorder.test_conversations import send
from tests.recording import RecorderHarness

SYSTEM = "You are a careful coding agent.\nRun the tests before you answer.\nNever delete files."
TOOLS = [
    {"name": n, "description": f"the {n} tool", "input_schema": {"type": "object"}} for n in ("Bash", "Read")
]


def reply(content: list, stop: str, usage: tuple[int, int], model: str) -> bytes:
    return json.dumps({"id": f"msg_{time.time_ns()}", "type": "message", "role": "assistant", "model": model,
                       "content": content, "stop_reason": stop,
                       "usage": {"input_tokens": usage[0], "output_tokens": usage[1]}}).encode()  # fmt: skip


def session(tmp_path: Path, name: str, asks: list[str], *, system: str = SYSTEM, tools: list | None = None,
            tag: str = "a", model: str = "claude-sonnet-4-5", arguments: dict | None = None,
            result: str = "2 passed", usage: tuple[int, int] = (120, 12)) -> Run:  # fmt: skip
    """One turn per ask, each a tool loop (ask → Bash → result → answer); `tag` goes into every id."""
    folder = tmp_path / name
    folder.mkdir()
    rec = RecorderHarness(folder)
    history: list = []
    n = 0
    for turn, ask in enumerate(asks):
        use = {"type": "tool_use", "id": f"toolu_{tag}{turn}", "name": "Bash",
               "input": arguments or {"command": "pytest -q"}}  # fmt: skip
        history.append({"role": "user", "content": ask})
        body = {
            "model": model,
            "max_tokens": 500,
            "system": system,
            "tools": tools or TOOLS,
            "messages": history,
        }
        send(rec, n, body, reply([use], "tool_use", usage, model))
        answer = {"type": "tool_result", "tool_use_id": use["id"], "content": result}
        history += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [answer]}]
        body = {**body, "messages": history}
        send(rec, n + 1, body, reply([{"type": "text", "text": f"Done: {ask}"}], "end_turn", usage, model))
        history.append({"role": "assistant", "content": [{"type": "text", "text": f"Done: {ask}"}]})
        n += 2
    rec.rows("SELECT 1")
    rec.shutdown()
    conn = connect(folder / "session.db", readonly=True)
    try:
        return load_run(conn, name)
    finally:
        conn.close()


def test_the_same_run_with_other_ids_and_timings_is_no_change(tmp_path):
    a = session(tmp_path, "a", ["fix the test", "now commit"], tag="a")
    b = session(tmp_path, "b", ["fix the test", "now commit"], tag="zz9")
    diff = compare(a, b)
    assert diff.same and len(diff.calls) == 4 and not diff.changed
    ignored = {d.what for c in diff.calls for d in c.ignored}
    assert "tool call ids" in ignored and "timestamp" in ignored
    out = as_json(diff)
    assert out["same"] is True and [c["a"]["id"] for c in out["calls"]] == [1, 2, 3, 4]


def test_a_changed_system_prompt_and_tools_show_exactly_that(tmp_path):
    tools = [
        {**TOOLS[0], "description": "Run a shell command"},
        {"name": "Grep", "description": "the Grep tool", "input_schema": {"type": "object"}},
    ]
    a = session(tmp_path, "a", ["fix the test"])
    b = session(tmp_path, "b", ["fix the test"], system=SYSTEM.replace("Never delete", "Do not delete"),
                tools=tools)  # fmt: skip
    diff = compare(a, b)
    first, second = diff.calls
    assert first.system == ("@@ -1,3 +1,3 @@", " You are a careful coding agent.", " Run the tests before you answer.",
                            "-Never delete files.", "+Do not delete files.")  # fmt: skip
    assert {(t.name, t.change, t.fields) for t in first.tools} == {
        ("Read", "removed", ()), ("Grep", "added", ()), ("Bash", "changed", ("description",))}  # fmt: skip
    assert {t.name: t.diff for t in first.tools}["Grep"] == ("+the Grep tool",)  # what an added tool is for
    assert not (first.items or first.answer or first.tool_uses or first.fields)
    assert second.system == first.system and second.system_as_in == 0 and second.tools_as_in == 0
    assert not (second.items or second.answer or second.tool_uses or second.fields)


def test_an_extra_turn_is_lined_up_not_shifted(tmp_path):
    a = session(tmp_path, "a", ["fix the test", "now commit"])
    b = session(tmp_path, "b", ["fix the test", "also lint", "now commit"])
    pairs = [(x.id if x else None, y.id if y else None) for x, y in align(a.calls, b.calls)]
    assert pairs == [(1, 1), (2, 2), (None, 3), (None, 4), (3, 5), (4, 6)]
    diff = compare(a, b)
    assert [d.only for d in diff.calls] == [None, None, "b", "b", None, None]
    # the first call after the extra turn sends another answer before it (the extra turn's): that is all
    assert [(p.op, p.piece.text) for p in diff.calls[4].items] == [("removed", "Done: fix the test"),
                                                                    ("added", "Done: also lint")]  # fmt: skip
    assert not (diff.calls[4].system or diff.calls[4].tools or diff.calls[4].answer or diff.calls[4].fields)
    assert dict((d.what, (d.a, d.b)) for d in diff.totals)["calls"] == (4, 6)
    back = compare(b, a)  # and the other way: a turn missing
    assert [d.only for d in back.calls] == [None, None, "a", "a", None, None]


def test_model_tokens_cost_and_tool_calls_are_changes(tmp_path):
    a = session(tmp_path, "a", ["fix the test"])
    b = session(tmp_path, "b", ["fix the test"], model="claude-haiku-4-5", usage=(150, 20),
                arguments={"command": "pytest -x"}, result="1 failed")  # fmt: skip
    first, second = compare(a, b).calls
    fields = {d.what: (d.a, d.b) for d in first.fields}
    assert fields["model"] == ("claude-sonnet-4-5", "claude-haiku-4-5")
    assert fields["input_tokens"] == (120, 150) and fields["output_tokens"] == (12, 20)
    assert fields["cost"][0] > 0 and fields["cost"][1] > 0 and fields["cost"][0] != fields["cost"][1]
    (use,) = first.tool_uses
    assert use.op == "changed" and (use.a.arguments, use.b.arguments) == ('{"command": "pytest -q"}',
                                                                         '{"command": "pytest -x"}')  # fmt: skip
    assert (use.a.result, use.b.result) == ("2 passed", "1 failed")
    assert not first.answer  # the tool call is compared once, with its result, not again as an answer item
    assert [(p.op, p.piece.text) for p in second.answer] == []  # "Done: fix the test" both times
    # the second call sends the other result back: a changed new item
    assert {(p.op, p.piece.kind, p.piece.text) for p in second.items} >= {
        ("removed", "tool_result", "2 passed"), ("added", "tool_result", "1 failed")}  # fmt: skip


def test_an_id_in_a_tools_arguments_is_content():
    value = {
        "type": "tool_use",
        "id": "toolu_1",
        "input": {"id": 5},
        "content": [{"tool_use_id": "x", "text": "t"}],
    }
    assert strip_ids(value) == {"type": "tool_use", "input": {"id": 5}, "content": [{"text": "t"}]}


def test_the_printer_fits_80_columns(tmp_path):
    long = SYSTEM + "\n" + "Follow the repository's contribution guide, " * 8
    a = session(tmp_path, "a", ["fix the test", "now commit"])
    b = session(tmp_path, "b", ["fix the test", "also lint", "now commit"], system=long, usage=(130, 12))
    for width in (80, 160):
        console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
        render(compare(a, b), console)
        out = console.export_text()
        assert all(len(line.rstrip()) <= width for line in out.splitlines()), out
        assert "system prompt:" in out and "only in B" in out and "changed as in call 1 ↔ 1" in out
        assert "+Follow the repository's" in out and "input tokens 120 → 130 (+10)" in out


def test_claude_codes_billing_checksum_is_an_id(tmp_path):
    """Claude Code's first system block changes on every request (`cch=`): not a change."""
    billing = "x-anthropic-billing-header: cc_version=2.1.197; cch={};"
    a = session(tmp_path, "a", ["fix the test"], system=billing.format("3f66f") + "\n" + SYSTEM)
    b = session(tmp_path, "b", ["fix the test"], system=billing.format("6ac9c") + "\n" + SYSTEM)
    assert compare(a, b).same
    c = session(
        tmp_path,
        "c",
        ["fix the test"],
        system=billing.format("6ac9c").replace("2.1.197", "2.2.0") + "\n" + SYSTEM,
    )
    (first, _second) = compare(a, c).calls
    assert first.system[1:] == ("-x-anthropic-billing-header: cc_version=2.1.197; cch=…;",
                                "+x-anthropic-billing-header: cc_version=2.2.0; cch=…;", " You are a careful coding agent.",
                                " Run the tests before you answer.")  # fmt: skip
