"""Capsem's own session checker runs on our databases: a tool loop recorded through the recorder
(JSON and streamed model calls, an MCP call under a `warn` policy verdict, a failed tool), rolled
up into main.db, then every query that Capsem's `scripts/check_session.py` runs, on our
session.db and main.db. The queries are those of google/capsem's check_session.py at commit
4337ec3248ba9b7ffac6a666763af824d99c7c0e (2026-08-22), written out here as queries."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from addons.messages import Route
from capsem.paths import main_db_path, session_dir
from capsem.rollup import finish_session, open_main, register_session
from tests.recording import RecorderHarness, ended, head, response

FIXTURES = Path(__file__).parent / "fixtures"
T0 = time.time() - 60

# -- the queries of Capsem's scripts/check_session.py (4337ec3) -------------------------------------
CHECK_TABLES = {
    "net_events": ["id", "timestamp", "domain", "decision", "method", "path", "status_code", "duration_ms"],
    "model_calls": ["id", "timestamp", "provider", "model", "input_tokens", "output_tokens", "stop_reason",
                    "estimated_cost_usd", "duration_ms"],
    "tool_calls": ["id", "model_call_id", "tool_name", "call_id", "origin"],
    "tool_responses": ["id", "model_call_id", "call_id", "is_error"],
    "fs_events": ["id", "timestamp", "action", "path", "size"],
}  # fmt: skip
RECENT_SESSIONS = (
    "SELECT id, mode, status, created_at, stopped_at, total_requests, allowed_requests, denied_requests,"
    " total_input_tokens, total_output_tokens, total_estimated_cost, total_tool_calls, total_file_events"
    " FROM sessions ORDER BY created_at DESC LIMIT ?"
)
TABLES = "SELECT name FROM sqlite_master WHERE type='table'"
UNANSWERED = "SELECT COUNT(*) FROM tool_calls tc LEFT JOIN tool_responses tr ON tc.call_id = tr.call_id WHERE tr.id IS NULL"
AI_NET_EVENTS = (
    "SELECT COUNT(*) FROM net_events WHERE domain LIKE '%.googleapis.com' OR domain LIKE '%.anthropic.com'"
    " OR domain LIKE '%.openai.com'"
)
QUALITY = (
    "SELECT COUNT(*) FROM model_calls WHERE model IS NULL",
    "SELECT COUNT(*) FROM model_calls WHERE input_tokens IS NULL AND output_tokens IS NULL",
    "SELECT COUNT(*) FROM model_calls WHERE request_body_preview IS NULL",
)
ORIGINS = "SELECT origin, COUNT(*) FROM tool_calls GROUP BY origin"
TOOL_USAGE = (
    "SELECT tool_name, origin, decision, COUNT(*) as cnt, ROUND(AVG(duration_ms), 1) as avg_ms FROM tool_calls"
    " WHERE tool_name IS NOT NULL GROUP BY tool_name, origin, decision ORDER BY cnt DESC"
)


def anthropic_call(
    rec,
    key: str,
    at: float,
    messages: list,
    answer: dict | None = None,
    sse: str | None = None,
    tool_decisions: tuple = (),
):
    """A finished Anthropic Messages call: a JSON `answer`, or the SSE fixture `sse` streamed (with
    the tool rules' verdicts on its tool calls, as the proxy hands them over)."""
    body = json.dumps({"model": "claude-sonnet-5", "max_tokens": 100, "stream": sse is not None,
                       "messages": messages}).encode()  # fmt: skip
    req, route = head(key, started=at), Route("anthropic", "anthropic")
    if sse is None:
        rec.close(ended(req, resp=response(200, started=at + 0.1), body=json.dumps(answer).encode(),
                        request_body=body, at=at + 0.2, route=route, tool_decisions=tool_decisions))  # fmt: skip
        return
    wire = (FIXTURES / "anthropic" / sse).read_bytes()
    resp = response(200, "text/event-stream", started=at + 0.1)
    rec.open(req, resp, route, "sse")
    for i in range(0, len(wire), 300):
        rec.chunk(key, at + 0.2, wire[i : i + 300])
    rec.close(ended(req, resp=resp, request_body=body, at=at + 0.5, route=route, streamed=True,
                    response_size=len(wire), tool_decisions=tool_decisions))  # fmt: skip


def tool_use(call_id: str, name: str, arguments: dict) -> dict:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def tool_result(call_id: str, text: str, is_error: bool = False) -> dict:
    return {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": is_error}


def mcp_tools_call(rec, key: str, tool: str, arguments: dict, at: float, decision: str) -> None:
    message = {
        "jsonrpc": "2.0",
        "id": key,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    answer = {"jsonrpc": "2.0", "id": key, "result": {"content": [{"type": "text", "text": "note 1"}]}}
    req = head(key, started=at, scheme="http", host="127.0.0.1", port=8000, path="/mcp",
               headers=[("content-type", "application/json"), ("mcp-session-id", "s")])  # fmt: skip
    rec.close(ended(req, resp=response(200, started=at + 0.05), body=json.dumps(answer).encode(),
                    request_body=json.dumps(message).encode(), at=at + 0.1, mcp=True, decision=decision))  # fmt: skip


@pytest.fixture
def session(capsem_home) -> str:
    """A recorded, rolled-up tool loop of four tools over three model calls; its session id."""
    sid = "20260823-120000-c4ec"
    main = open_main()
    register_session(main, sid, mode="mitmdump", command="agent", created_at="2026-08-23T12:00:00Z")
    rec = RecorderHarness(session_dir(sid))
    rec.mcp.names["127.0.0.1:8000/mcp"] = "files"  # as its initialize answer would have said
    ask = [{"role": "user", "content": "sizes?"}]
    first = [tool_use("toolu_a", "mcp__files__read_note", {"n": 1}),
             tool_use("toolu_b", "Bash", {"command": "ls"})]  # fmt: skip
    anthropic_call(rec, "m1", T0, ask, answer={
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-5", "content": first,
        "stop_reason": "tool_use", "usage": {"input_tokens": 100, "output_tokens": 20}})  # fmt: skip
    mcp_tools_call(rec, "c1", "read_note", {"n": 1}, T0 + 0.7, decision="warned")  # the agent runs toolu_a
    history = [
        *ask,
        {"role": "assistant", "content": first},
        {"role": "user", "content": [tool_result("toolu_a", "note 1"), tool_result("toolu_b", "no", True)]},
    ]
    anthropic_call(rec, "m2", T0 + 1.5, history, sse="stream_thinking_tools.sse")  # asks for Read and Grep
    (read, grep) = rec.rows("SELECT call_id FROM tool_calls WHERE model_call_id = 2 ORDER BY call_index")
    history += [{"role": "assistant", "content": [tool_use(read["call_id"], "Read", {}),
                                                  tool_use(grep["call_id"], "Grep", {})]},
                {"role": "user", "content": [tool_result(read["call_id"], "12 KB"),
                                             tool_result(grep["call_id"], "3 KB")]}]  # fmt: skip
    anthropic_call(rec, "m3", T0 + 4, history, answer={
        "id": "msg_3", "type": "message", "role": "assistant", "model": "claude-sonnet-5",
        "content": [{"type": "text", "text": "12 KB and 3 KB"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 300, "output_tokens": 9}})  # fmt: skip
    rec.shutdown()
    finish_session(main, sid)
    main.close()
    return sid


def test_capsem_check_session_queries_run_on_our_databases(session, capsem_home):
    db = sqlite3.connect(f"file:{session_dir(session) / 'session.db'}?mode=ro", uri=True)
    main = sqlite3.connect(f"file:{main_db_path()}?mode=ro", uri=True)
    (recent,) = main.execute(RECENT_SESSIONS, (5,)).fetchall()
    assert recent[:4] == (session, "mitmdump", "stopped", "2026-08-23T12:00:00Z") and recent[4]  # stopped_at
    tokens_in, tokens_out, cost = db.execute(
        "SELECT SUM(input_tokens), SUM(output_tokens), SUM(estimated_cost_usd) FROM model_calls"
    ).fetchone()
    # requests (3 model calls, 1 MCP call), allowed (a warned one counts), denied, tokens, cost, tools, files
    assert recent[5:] == (4, 4, 0, tokens_in, tokens_out, pytest.approx(cost), 4, 0)
    assert tokens_in > 400 and cost > 0

    existing = {r[0] for r in db.execute(TABLES)}
    assert set(CHECK_TABLES) <= existing
    counts = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in CHECK_TABLES}
    assert counts == {"net_events": 4, "model_calls": 3, "tool_calls": 4, "tool_responses": 4, "fs_events": 0}
    assert db.execute(UNANSWERED).fetchone()[0] == 0
    assert db.execute(AI_NET_EVENTS).fetchone()[0] == 3
    assert [db.execute(q).fetchone()[0] for q in QUALITY] == [0, 0, 0]
    assert "origin" in {r[1] for r in db.execute("PRAGMA table_info(tool_calls)")}
    assert dict(db.execute(ORIGINS).fetchall()) == {"mcp": 1, "native": 3}
    # how long the agent ran each tool: from the end of the response that asked (m1 ended at
    # T0 + 0.2, m2 at T0 + 2.0) to the start of the request that carried the result
    usage = {(r[0], r[1], r[2]): (r[3], r[4]) for r in db.execute(TOOL_USAGE)}
    assert usage == {
        ("mcp__files__read_note", "mcp", "warned"): (1, 1300.0),
        ("Bash", "native", "allowed"): (1, 1300.0),
        ("Read", "native", "allowed"): (1, 2000.0),
        ("Grep", "native", "allowed"): (1, 2000.0),
    }
    for table, columns in CHECK_TABLES.items():  # the preview: every column it shows exists here
        cursor = db.execute(f"SELECT * FROM {table} ORDER BY id DESC LIMIT ?", (5,))
        assert set(columns) <= {d[0] for d in cursor.description}, table
        cursor.fetchall()


def test_the_capsem_columns_of_tool_calls(session, capsem_home):
    db = sqlite3.connect(f"file:{session_dir(session) / 'session.db'}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    calls = [dict(r) for r in db.execute(
        "SELECT tool_name, provider, transport, status, decision, server_name, duration_ms FROM tool_calls ORDER BY id"
    )]  # fmt: skip
    assert calls == [
        {"tool_name": "mcp__files__read_note", "provider": "anthropic", "transport": "http", "status": "responded",
         "decision": "warned", "server_name": "files", "duration_ms": 1300},
        {"tool_name": "Bash", "provider": "anthropic", "transport": "http", "status": "error",
         "decision": "allowed", "server_name": None, "duration_ms": 1300},
        {"tool_name": "Read", "provider": "anthropic", "transport": "sse", "status": "responded",
         "decision": "allowed", "server_name": None, "duration_ms": 2000},
        {"tool_name": "Grep", "provider": "anthropic", "transport": "sse", "status": "responded",
         "decision": "allowed", "server_name": None, "duration_ms": 2000},
    ]  # fmt: skip
    # the same tool time as main.db's rollup computes on its own
    main = sqlite3.connect(f"file:{main_db_path()}?mode=ro", uri=True)
    rolled = dict(main.execute("SELECT tool_name, total_duration_ms FROM tool_usage WHERE session_id = ?",
                               (session,)).fetchall())  # fmt: skip
    assert rolled == {c["tool_name"]: c["duration_ms"] for c in calls}


def test_a_tool_call_recorded_after_its_mcp_call_takes_its_verdict(tmp_path):
    """The other order (the MCP call ran while the model's stream was still open): the builder,
    not the trigger, sets decision and server_name; the result's insert still finishes it."""
    rec = RecorderHarness(tmp_path)
    rec.mcp.names["127.0.0.1:8000/mcp"] = "files"
    mcp_tools_call(rec, "c1", "read_note", {"n": 1}, T0 + 0.1, decision="denied")
    ask = [{"role": "user", "content": "read"}]
    content = [tool_use("toolu_a", "mcp__files__read_note", {"n": 1})]
    anthropic_call(rec, "m1", T0, ask, answer={"id": "msg_1", "type": "message", "role": "assistant",
                   "model": "claude-sonnet-5", "content": content, "stop_reason": "tool_use",
                   "usage": {"input_tokens": 10, "output_tokens": 5}})  # fmt: skip
    history = [*ask, {"role": "assistant", "content": content},
               {"role": "user", "content": [tool_result("toolu_a", "denied by policy", True)]}]  # fmt: skip
    anthropic_call(rec, "m2", T0 + 0.25, history, answer={"id": "msg_2", "type": "message", "role": "assistant",
                   "model": "claude-sonnet-5", "content": [{"type": "text", "text": "no"}],
                   "stop_reason": "end_turn", "usage": {"input_tokens": 20, "output_tokens": 1}})  # fmt: skip
    (call,) = rec.rows(
        "SELECT origin, mcp_call_id, decision, server_name, status, duration_ms FROM tool_calls"
    )
    rec.shutdown()
    assert call == {"origin": "mcp", "mcp_call_id": 1, "decision": "denied", "server_name": "files",
                    "status": "error", "duration_ms": 50}  # fmt: skip
