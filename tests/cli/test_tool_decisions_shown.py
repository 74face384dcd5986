"""What the tool rules decided is shown: `inspect-session`, the run summary and `show-call` (text
and --json). A denied call is shown as denied, never with a tool result. The session is written
through the real recorder path: each answer's `FlowEnded` carries its `ToolDecision`s, as the proxy
hands them over (the pages: tests/view/test_tool_decisions_view.py)."""

from __future__ import annotations

import io
import json
import time

import pytest
from rich.console import Console

from addons.messages import ToolDecision
from assembler.summary import print_session
from capsem.paths import session_dir
from capsem.rollup import finish_session, open_main, register_session
from tests.cli.conftest import run
from tests.recording import RecorderHarness
from tests.test_capsem_check_session import anthropic_call, tool_result, tool_use

T0 = time.time() - 120
SESSION = "20261128-120000-70d1"
RM = tool_use("toolu_rm", "Bash", {"command": "rm -rf /tmp/x"})
PUSH = tool_use("toolu_push", "Bash", {"command": "git push origin main"})
READ = tool_use("toolu_read", "Read", {"file_path": "notes.md"})
DECISIONS = (ToolDecision("toolu_rm", "Bash", "denied", "no-rm-rf"),
             ToolDecision("toolu_push", "Bash", "approved", "ask-push", approval_id="ap-1"),
             ToolDecision("toolu_read", "Read", "allowed", None))  # fmt: skip


def decided_session(*, ran_denied: bool = False, session_id: str = SESSION) -> str:
    """A tool loop whose first answer asked for `rm -rf` (denied: the agent never got it), `git push`
    (asked, approved) and a Read; the second request carries the results of the two it ran (and,
    with `ran_denied`, one for the denied call too: a verdict that did not hold)."""
    main = open_main()
    register_session(
        main, session_id, mode="run", command="claude -p clean", created_at="2026-11-28T12:00:00Z"
    )
    rec = RecorderHarness(session_dir(session_id))
    ask = [{"role": "user", "content": "clean up and push"}]
    answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
              "content": [RM, PUSH, READ], "stop_reason": "tool_use",
              "usage": {"input_tokens": 100, "output_tokens": 30}}  # fmt: skip
    anthropic_call(rec, "m1", T0, ask, answer=answer, tool_decisions=DECISIONS)
    results = [tool_result("toolu_push", "pushed main"), tool_result("toolu_read", "# notes")]
    if ran_denied:
        results.insert(0, tool_result("toolu_rm", "removed"))
    history = [*ask, {"role": "assistant", "content": [PUSH, READ]}, {"role": "user", "content": results}]
    anthropic_call(rec, "m2", T0 + 2, history, answer={
        "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Pushed; I did not remove /tmp/x."}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 150, "output_tokens": 9}})  # fmt: skip
    rec.shutdown()
    finish_session(main, session_id)
    main.close()
    return session_id


def test_inspect_session_says_what_the_tool_rules_decided(capsem_home):
    sid = decided_session()
    text = run("inspect-session", sid)
    flat = " ".join(text.split())
    assert "tool rules: rule no-rm-rf: 1 tool call denied (Bash)" in flat
    assert "tool rules: rule ask-push: 1 tool call approved (Bash)" in flat
    assert "never got a result" not in flat  # the denied call was never the agent's to answer
    assert "not run" in flat  # the tool usage table counts it
    data = json.loads(run("inspect-session", sid, "--json"))
    bash = next(t for t in data["tools"] if t["tool_name"] == "Bash")
    assert bash["calls"] == 2 and bash["results"] == 1 and bash["not_run"] == 1
    found = [f for f in data["findings"] if f["check"] == "tool rules"]
    assert [f["severity"] for f in found] == ["info", "info"]


def test_a_denied_call_that_got_a_result_is_a_warning(capsem_home):
    sid = decided_session(ran_denied=True)
    data = json.loads(run("inspect-session", sid, "--json"))
    warned = [
        f["message"] for f in data["findings"] if f["check"] == "tool rules" and f["severity"] == "warning"
    ]
    assert warned == ["a Bash call denied by rule no-rm-rf got a tool result: the agent ran it anyway"]


def test_the_run_summary_shows_the_verdict_and_no_result_for_the_denied_call(capsem_home):
    sid = decided_session(ran_denied=True)  # even a result recorded for it is not shown as its result
    out = io.StringIO()
    print_session(sid, Console(file=out, width=160, color_system=None))
    text = out.getvalue()
    rm = next(line for line in text.splitlines() if "rm -rf /tmp/x" in line)
    assert "denied by no-rm-rf: not run" in rm and "removed" not in rm
    push = next(line for line in text.splitlines() if "git push origin main" in line)
    assert "[approved (asked by ask-push)] pushed main" in push
    assert "capsem denied 1, approved 1" in text
    assert (
        "tool rule no-rm-rf" in text
        and "tool rule no-rm-rf: not run (the agent was told the rule stopped it)" in " ".join(text.split())
    )


def test_show_call_text_and_json_give_each_calls_verdict(capsem_home):
    sid = decided_session()
    text = run("show-call", "1", sid)
    assert "tool call Bash (toolu_rm) · denied by no-rm-rf: not run" in text
    assert "tool call Bash (toolu_push) · approved (asked by ask-push)" in text
    assert "tool call Read (toolu_read)\n" in text  # nothing decided: nothing said
    document = json.loads(run("show-call", "1", sid, "--json"))
    tools = {t["call_id"]: t for t in document["tool_calls"]}
    assert {
        k: tools["toolu_rm"][k] for k in ("decision", "decision_rule", "approval_id", "not_run", "result")
    } == {
        "decision": "denied",
        "decision_rule": "no-rm-rf",
        "approval_id": None,
        "not_run": True,
        "result": None,
    }
    assert tools["toolu_push"]["decision"] == "approved" and tools["toolu_push"]["approval_id"] == "ap-1"
    assert tools["toolu_push"]["result"] == {"content": "pushed main", "is_error": False}
    assert tools["toolu_read"]["decision"] == "allowed" and tools["toolu_read"]["decision_rule"] is None
    assert "tool_calls" not in json.loads(run("show-call", "1", sid, "--request", "--json"))


@pytest.mark.parametrize("command", [("inspect-session",), ("show-call", "1")])
def test_a_session_with_no_tool_rule_reads_as_before(capsem_home, command):
    main = open_main()
    register_session(
        main, "20261128-120500-0001", mode="run", command="claude", created_at="2026-11-28T12:05:00Z"
    )
    rec = RecorderHarness(session_dir("20261128-120500-0001"))
    anthropic_call(rec, "m1", T0, [{"role": "user", "content": "x"}], answer={
        "id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [RM],
        "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}})  # fmt: skip
    rec.shutdown()
    finish_session(main, "20261128-120500-0001")
    main.close()
    text = run(*command, "20261128-120500-0001")
    assert "tool rules" not in text and "not run" not in text and "denied" not in text
