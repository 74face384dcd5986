"""A session built in-process with the recorder for the export tests: an Anthropic tool loop
(secrets planted in a header, the request body and the tool result) that starts a subagent (a
Task tool call), an MCP tool call and a Codex-style WebSocket turn, registered in main.db like a
recorded one."""

from __future__ import annotations

import json
import time
from pathlib import Path

from addons.messages import Route, WsMessage, WsOpened
from capsem.rollup import rollup
from capsem.store.schema import open_main_db
from tests.recording import RecorderHarness, ended, head, response

NEEDLE = "EXPSECRET"
SECRETS = {
    "header": "sk-ant-api03-EXPSECRETheader0000000000000",
    "body": "EXPSECRETbody-password-value",
    "tool_result": "ghp_EXPSECRETtoolResult0000000000000000",
}
ANTHROPIC = Route("anthropic", "anthropic")


def _call(rec: RecorderHarness, key: str, at: float, request: dict, answer: dict) -> None:
    req = head(
        key, started=at, headers=[("content-type", "application/json"), ("x-api-key", SECRETS["header"])]
    )
    body = json.dumps(answer).encode()
    rec.close(ended(req, resp=response(200, started=at + 0.05), body=body, request_body=json.dumps(request).encode(),
                    at=at + 0.1, route=ANTHROPIC))  # fmt: skip


def build_session(home: Path, session_id: str = "20261123-120000-e0e0", *, t0: float | None = None) -> Path:
    """Record the session under `home` (a CAPSEM_HOME) and roll it up; returns its session.db."""
    folder = home / "sessions" / session_id
    folder.mkdir(parents=True)
    rec = RecorderHarness(folder)
    t0 = t0 if t0 is not None else time.time()
    tools = [{"name": "read_env", "description": "Read the env file", "input_schema": {"type": "object"}}]
    first = [{"role": "user", "content": f'log in with {{"password": "{SECRETS["body"]}"}} and read .env'}]
    use = {"type": "tool_use", "id": "toolu_1", "name": "read_env", "input": {"path": ".env"}}
    usage = {"input_tokens": 120, "output_tokens": 30, "cache_read_input_tokens": 0}
    _call(rec, "a1", t0, {"model": "claude-sonnet-4-5", "system": "You are terse.", "tools": tools,
                          "messages": first, "max_tokens": 100},
          {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
           "content": [{"type": "text", "text": "Reading it."}, use], "stop_reason": "tool_use",
           "usage": usage})  # fmt: skip
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": f"GITHUB_TOKEN={SECRETS['tool_result']}",
    }
    second = [*first, {"role": "assistant", "content": [{"type": "text", "text": "Reading it."}, use]},
              {"role": "user", "content": [result]}]  # fmt: skip
    task = {
        "type": "tool_use",
        "id": "toolu_2",
        "name": "Task",
        "input": {"prompt": "Count the files in src"},
    }
    _call(rec, "a2", t0 + 1, {"model": "claude-sonnet-4-5", "system": "You are terse.", "tools": tools,
                              "messages": second, "max_tokens": 100},
          {"id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
           "content": [{"type": "text", "text": "Done."}, task], "stop_reason": "tool_use",
           "usage": {"input_tokens": 180, "output_tokens": 5}})  # fmt: skip
    # the subagent the Task tool started: a new conversation whose first message is the prompt
    _call(rec, "a3", t0 + 1.5, {"model": "claude-haiku-4-5", "system": "You are a file counter.",
                                "messages": [{"role": "user", "content": "Count the files in src"}], "max_tokens": 50},
          {"id": "msg_3", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
           "content": [{"type": "text", "text": "42 files."}], "stop_reason": "end_turn",
           "usage": {"input_tokens": 20, "output_tokens": 4}})  # fmt: skip
    # a request that never got an answer (the upstream refused the connection)
    lost = head(
        "e1", started=t0 + 1.8, host="pypi.org", method="GET", path="/simple/requests/", query="a=1&b="
    )
    rec.close(ended(lost, at=t0 + 1.9, error="connection refused", decision="error"))
    # an MCP tool call (JSON-RPC over HTTP, answered inline)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "read_note", "arguments": {"n": 1}},
    }
    answer = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "note one"}]}}
    req = head("m1", started=t0 + 2, scheme="http", host="127.0.0.1", port=8000, path="/mcp",
               headers=[("content-type", "application/json")])  # fmt: skip
    rec.close(ended(req, resp=response(200, "application/json", started=t0 + 2.01), body=json.dumps(answer).encode(),
                    request_body=json.dumps(call).encode(), at=t0 + 2.02, mcp=True))  # fmt: skip
    # a Codex-style WebSocket: one response.create turn
    ws = head("w1", started=t0 + 3, host="api.openai.com", method="GET", path="/v1/responses",
              headers=[("upgrade", "websocket")])  # fmt: skip
    rec.feed(WsOpened(ws, response(101, None, started=t0 + 3.01)))
    create = {"type": "response.create", "model": "gpt-5-codex", "input": [{"role": "user", "content": "hi"}]}
    events = [{"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5-codex"}},
              {"type": "response.output_text.delta", "delta": "hello"},
              {"type": "response.completed", "response": {"id": "resp_1", "model": "gpt-5-codex", "status": "completed",
               "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]}],
               "usage": {"input_tokens": 10, "output_tokens": 2}}}]  # fmt: skip
    rec.feed(WsMessage("w1", True, json.dumps(create).encode(), True, t0 + 3.1))
    for i, e in enumerate(events):
        rec.feed(WsMessage("w1", False, json.dumps(e).encode(), True, t0 + 3.2 + i / 10))
    rec.close(
        ended(ws, resp=response(101, None, started=t0 + 3.01), at=t0 + 4, websocket=True, close_code=1000)
    )
    rec.writer.commit()
    rec.shutdown()
    main = open_main_db(home / "main.db")
    try:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t0))
        main.execute("INSERT INTO sessions (id, mode, status, created_at, stopped_at) VALUES (?, 'mitmdump', "
                     "'stopped', ?, ?)", (session_id, stamp, stamp))  # fmt: skip
        rollup(main, session_id)
        main.commit()
    finally:
        main.close()
    return folder / "session.db"
