"""Reading recorded sessions for the backtest (assembler/backtest_source.py): sessions that cannot
match are not opened, MCP arguments are read from the stored body only when a rule reaches them,
and a damaged session is reported while the others are tested."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import yaml

from addons.proxy.policy import Policy
from assembler.backtest import Backtest
from assembler.backtest_source import LazyArguments, Needs, call_arguments, pick, read_session, run
from capsem.settings import parse
from capsem.store.schema import connect
from tests.cli.conftest import clone_session, execute, recorded_id
from tests.cli.conftest import run as cli
from tests.recording import RecorderHarness, ended, head, response

ARGS = "policy: {rules: [{name: no-rm, action: deny, mcp_tool: shell, mcp_args: {command: 'rm *'}}]}"


def policy(text: str = ARGS) -> Policy:
    return Policy.from_settings(parse(yaml.safe_load(text)))


def test_sessions_that_cannot_match_are_not_opened_and_culled_ones_are_counted(home):
    empty = clone_session(
        home, datetime(2026, 11, 1, tzinfo=UTC), empty=True, suffix="e0e0"
    )  # rolled up: zeros
    live = clone_session(home, datetime(2026, 11, 2, tzinfo=UTC), empty=True, rolled_up=False, suffix="f0f0")
    gone = clone_session(home, datetime(2026, 11, 3, tzinfo=UTC), suffix="a0a0")
    (home / "sessions" / gone / "session.db").unlink()
    picked = pick((), None, Needs.of(policy("policy: {rules: [{action: deny, host: x}]}"), ()))
    assert empty not in picked.sessions and (picked.skipped, picked.missing) == (1, 1)
    assert set(picked.sessions) == {live, recorded_id(home)}  # not rolled up yet: its totals say nothing
    # MCP rules only: the recorded session made no MCP call, so it is not opened either
    picked = pick((), None, Needs.of(policy(ARGS), ()))
    assert picked.sessions == [live] and picked.skipped == 3  # the culled one too: its rollup says no MCP
    assert pick((), "2026-11-02", Needs.of(policy(ARGS), ())).sessions == [live]


def mcp_session(tmp_path):
    """A session.db with an MCP batch (two shell calls) and a failed CONNECT."""
    rec = RecorderHarness(tmp_path)
    now = time.time()

    def call(n: int, tool: str, command: str) -> dict:
        return {"jsonrpc": "2.0", "id": n, "method": "tools/call",
                "params": {"name": tool, "arguments": {"command": command}}}  # fmt: skip

    batch = [call(1, "shell", "ls"), call(2, "shell", "rm -r x"), call(3, "read", "rm")]
    answers = [{"jsonrpc": "2.0", "id": n, "result": {"content": []}} for n in (1, 2, 3)]
    rec.feed(
        ended(head("m1", started=now, scheme="http", host="127.0.0.1", port=8000, path="/mcp"),
              resp=response(200, "application/json"), body=json.dumps(answers).encode(),
              request_body=json.dumps(batch).encode(), mcp=True),
        ended(head("c1", started=now + 1, host="nowhere.test", method="CONNECT", path=""),
              error="connection refused"),
    )  # fmt: skip
    rec.rows("SELECT 1")
    rec.shutdown()
    return rec.db


def test_arguments_are_read_only_when_a_rule_reaches_them(tmp_path):
    db = mcp_session(tmp_path)
    conn = connect(db, readonly=True)
    try:
        rules = policy()
        session = read_session(conn, "s", Needs.of(rules, ()))
        assert [(r.method, r.host) for r in session.requests] == [
            ("POST", "127.0.0.1")
        ]  # CONNECT is no request
        (request,) = session.requests
        calls = request.calls
        assert [(c.tool, c.servers) for c in calls] == [("shell", ("127.0.0.1:8000/mcp",))] * 2 + [
            ("read", ("127.0.0.1:8000/mcp",))]  # fmt: skip
        assert all(isinstance(c.arguments, LazyArguments) and c.arguments._value is None for c in calls)
        backtest = Backtest(rules)
        backtest.add(session)
        (finding,) = backtest.report().findings
        assert (finding.rule, finding.call.id) == ("no-rm", calls[1].id)  # the batch's call with id 2
        # the shell calls were read (the first did not match, the second did); `read` never was
        assert [c.arguments._value for c in calls] == [{"command": "ls"}, {"command": "rm -r x"}, None]
        # no rule on arguments: nothing is set up to read them
        assert read_session(conn, "s", Needs.of(policy("policy: {rules: [{action: deny, mcp_tool: x}]}"), ())
                            ).requests[0].calls[0].arguments is None  # fmt: skip
    finally:
        conn.close()
    # a body that was not stored: the request_preview stands in
    execute(db, "DELETE FROM event_body_blobs")
    conn = connect(db, readonly=True)
    try:
        assert call_arguments(conn, calls[1].id, "2") == {"command": "rm -r x"}
    finally:
        conn.close()


def test_a_damaged_session_is_reported_and_the_others_are_tested(home, tmp_path):
    broken = clone_session(home, datetime(2026, 11, 2, tzinfo=UTC), suffix="b0b0")
    (home / "sessions" / broken / "session.db").write_bytes(b"not a database" * 100)
    rules = policy("policy: {rules: [{name: no-openai, action: deny, host: api.openai.com}]}")
    needs = Needs.of(rules, ())
    report = run(Backtest(rules), pick((), None, needs).sessions, needs)
    assert report.sessions == [recorded_id(home)] and list(report.unreadable) == [broken]
    assert "file is not a database" in report.unreadable[broken]
    file = tmp_path / "p.yaml"
    file.write_text("policy: {rules: [{name: no-openai, action: deny, host: api.openai.com}]}")
    out = cli("policy", "test", str(file))
    assert f"not read: {broken}: " in out and "no-openai would have denied 2 requests in 1 session" in out
