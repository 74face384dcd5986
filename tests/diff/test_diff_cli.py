"""`capsem diff` on sessions recorded through real mitmdump with the real SDKs (conftest.py): the
same agent run twice differs only in ids and timings; a changed system prompt and tool description
show exactly that, and nothing else; at 80 columns and wide; --json; ids by prefix; bad ids."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli.conftest import run
from tests.cli.test_widths import fits


@pytest.mark.parametrize("width", ("80", "160"))
def test_the_same_agent_run_twice_is_no_change_but_ids_and_timings(runs, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", width)
    out = run("diff", runs.base, runs.again)
    fits(out, int(width))
    assert "no change but ids and timings (4 calls lined up)" in out
    assert "calls 1–4 ↔ 1–4: the same but ids and timings" in out
    assert "changed" not in out.replace("no change", "")
    assert "no change but ids and timings" in run("diff", runs.base, runs.base)  # a session with itself
    found = json.loads(run("diff", runs.base, runs.again, "--json"))
    assert found["same"] is True and len(found["calls"]) == 4
    assert all(not c["changed"] and c["a"]["id"] == c["b"]["id"] for c in found["calls"])
    assert {k: v["a"] == v["b"] for k, v in found["totals"].items()} == dict.fromkeys(found["totals"], True)


@pytest.mark.parametrize("width", ("80", "160"))
def test_a_changed_system_prompt_and_tool_show_exactly_that(runs, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", width)
    out = run("diff", runs.base[:17], runs.changed)  # a unique prefix of the id does
    fits(out, int(width))
    lines = [line.rstrip() for line in out.splitlines()]
    assert lines[1:3] == ["4 of 4 calls changed", "changed: system prompt (4 calls), tools (4 calls)"]
    first = lines.index("call 1 ↔ 1 · turn 1 · anthropic claude-sonnet-4-5")
    assert lines[first + 1 : first + 10] == [
        "  system prompt:", "      @@ -1 +1 @@", "      -You are a terse weather assistant.",
        "      +You are a brief weather assistant.", "  tools:", "    ~ get_weather (description changed)",
        "      @@ -1 +1 @@", "      -Current weather for a city", "      +Today's weather for a city"]  # fmt: skip
    assert out.count("system prompt: changed as in call 1 ↔ 1") == 3  # shown once, pointed to after
    found = json.loads(run("diff", runs.base, runs.changed, "--json"))
    for call in found["calls"]:
        assert call["system"] and call["tools"], call
        assert not (call["items"] or call["answer"] or call["tool_uses"] or call["fields"]), call
    assert [t["name"] for t in found["calls"][2]["tools"]] == ["get_weather"]  # the openai call's tool too
    assert all(v["a"] == v["b"] for v in found["totals"].values())


def test_unknown_or_ambiguous_sessions_are_one_line_errors(runs):
    out = run("diff", runs.base, "no-such-session", code=1)
    assert "Error:" in out and "no-such-session" in out and "Traceback" not in out
    out = run("diff", runs.base[:9], runs.again, code=1)  # every session of the day
    assert "matches 3 sessions" in out


def test_html_writes_the_page_as_one_file(runs, tmp_path):
    target = tmp_path / "diff.html"
    out = run("diff", runs.base, runs.changed, "--html", str(target))
    assert f"wrote {target}" in out
    page = target.read_text()
    assert '<div class="dline added">+You are a brief weather assistant.</div>' in page
    assert (
        "<style>" in page and 'href="/' not in page and "src=" not in page
    )  # self-contained, no server links


def test_one_session_is_compared_with_the_one_before_it(runs):
    out = run("diff", runs.changed)
    assert out.splitlines()[0] == f"A {runs.again}  →  B {runs.changed}"
    assert "changed: system prompt (4 calls), tools (4 calls)" in out
    out = run("diff", runs.base, code=1)  # the first session has none before it
    assert f"session {runs.base} is no replay and has no earlier session with a database: name B" in out


def test_a_database_that_is_not_a_session_is_a_clear_error(runs, tmp_path, monkeypatch):
    import shutil
    import sqlite3

    home = tmp_path / "home"
    shutil.copytree(runs.home, home)
    monkeypatch.setenv("CAPSEM_HOME", str(home))
    folder = home / "sessions" / "20261125-000000-dead"
    folder.mkdir()
    sqlite3.connect(folder / "session.db").close()
    out = run("diff", runs.base, "20261125-000000-dead", code=1)
    assert "no model_calls table" in out and "Traceback" not in out


@pytest.mark.parametrize("width", ("80", "160"))
def test_errors_are_counted_as_inspect_session_counts_them_and_money_reads_as_money(agent_runs, monkeypatch,
                                                                                   width):  # fmt: skip
    """Issue 35, item 10: `errors 0 0` for a session with a failed tool result and a request answered
    404 (list-sessions and the run summary say 2), `$0.002682`, and `$0` for a call whose model has no
    known price."""
    monkeypatch.setenv("CAPSEM_HOME", str(agent_runs.home))
    monkeypatch.setenv("COLUMNS", width)
    listed = {s["id"]: s["total_errors"] for s in json.loads(run("list-sessions", "--json"))}
    assert (listed[agent_runs.a], listed[agent_runs.b]) == (2, 0)
    out = run("diff", agent_runs.a, agent_runs.b)
    fits(out, int(width))
    lines = {line.split("  ")[0]: line.split() for line in out.splitlines() if "  " in line}
    assert lines["errors"][-3:] == ["2", "0", "-2"]
    assert lines["unpriced calls"][-3:] == ["1", "0", "-1"]
    costs = lines["cost"][1:3]
    assert all(re.fullmatch(r"\$0\.\d{4}", c) for c in costs), costs
    assert re.search(r"tokens \d+ in, \d+ out, unpriced\n", out), out
    assert not re.search(r"\$0\b(?!\.)", out), out
