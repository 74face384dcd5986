"""The tool rules' verdicts reach `tool_calls`: carried on the flow's `FlowEnded` (or, on a
WebSocket, on the messages of the turn), through the msgpack hand-over, onto the rows by call id."""

from __future__ import annotations

import json
import time

from addons.messages import Route, ToolDecision, WsMessage, WsOpened, decode, encode
from tests.recording import RecorderHarness, ended, head, response
from tests.test_capsem_check_session import mcp_tools_call, tool_use

T0 = time.time() - 60
QUERY = "SELECT call_id, tool_name, decision, decision_rule, approval_id FROM tool_calls ORDER BY id"


def handed_over(message):
    """The message as the recorder receives it: encoded and decoded as one batch."""
    (back,) = decode(encode([message]))
    return back


def answer_with(*content: dict) -> bytes:
    return json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-5",
                       "content": list(content), "stop_reason": "tool_use",
                       "usage": {"input_tokens": 10, "output_tokens": 5}}).encode()  # fmt: skip


def anthropic_flow(key: str, at: float, body: bytes, decisions: tuple[ToolDecision, ...]):
    request = json.dumps({"model": "claude-sonnet-5", "max_tokens": 100,
                          "messages": [{"role": "user", "content": "clean up"}]}).encode()  # fmt: skip
    return ended(head(key, started=at), resp=response(200, started=at + 0.1), body=body, request_body=request,
                 at=at + 0.2, route=Route("anthropic", "anthropic"), tool_decisions=decisions)  # fmt: skip


def test_each_call_gets_its_verdict_and_rule_by_call_id(tmp_path):
    rec = RecorderHarness(tmp_path)
    decisions = (
        ToolDecision("toolu_rm", "Bash", "denied", "no-rm-rf"),
        ToolDecision("toolu_push", "Bash", "approved", "ask-push", approval_id="ap-7"),
        ToolDecision("toolu_ls", "Bash", "allowed", None),
    )
    body = answer_with(tool_use("toolu_ls", "Bash", {"command": "ls"}),
                       tool_use("toolu_rm", "Bash", {"command": "rm -rf /x"}),
                       tool_use("toolu_push", "Bash", {"command": "git push"}),
                       tool_use("toolu_read", "Read", {"file_path": "a"}))  # fmt: skip
    rec.feed(handed_over(anthropic_flow("m1", T0, body, decisions)))
    assert rec.rows(QUERY) == [
        {"call_id": "toolu_ls", "tool_name": "Bash", "decision": "allowed", "decision_rule": None, "approval_id": None},
        {"call_id": "toolu_rm", "tool_name": "Bash", "decision": "denied", "decision_rule": "no-rm-rf",
         "approval_id": None},
        {"call_id": "toolu_push", "tool_name": "Bash", "decision": "approved", "decision_rule": "ask-push",
         "approval_id": "ap-7"},
        {"call_id": "toolu_read", "tool_name": "Read", "decision": "allowed", "decision_rule": None,
         "approval_id": None},
    ]  # fmt: skip
    rec.shutdown()


def test_no_tool_rule_leaves_the_rows_as_before(tmp_path):
    rec = RecorderHarness(tmp_path)
    rec.feed(
        handed_over(anthropic_flow("m1", T0, answer_with(tool_use("toolu_a", "Bash", {"command": "ls"})), ()))
    )
    assert rec.rows(QUERY) == [
        {
            "call_id": "toolu_a",
            "tool_name": "Bash",
            "decision": "allowed",
            "decision_rule": None,
            "approval_id": None,
        }
    ]
    rec.shutdown()


def test_a_later_mcp_call_keeps_the_tool_rules_verdict_unless_it_warns_or_denies(tmp_path):
    """The trigger of m018: an MCP call the policy let through leaves `approved`; a warned one
    sets its own verdict and rule."""
    rec = RecorderHarness(tmp_path)
    rec.mcp.names["127.0.0.1:8000/mcp"] = "files"
    decisions = (ToolDecision("toolu_a", "mcp__files__read_note", "approved", "ask-files", "ap-1"),
                 ToolDecision("toolu_b", "mcp__files__read_note", "warned", "watch-files"))  # fmt: skip
    body = answer_with(tool_use("toolu_a", "mcp__files__read_note", {"n": 1}),
                       tool_use("toolu_b", "mcp__files__read_note", {"n": 2}))  # fmt: skip
    rec.feed(handed_over(anthropic_flow("m1", T0, body, decisions)))
    rec.rows(QUERY)  # the tool calls are written first
    mcp_tools_call(rec, "c1", "read_note", {"n": 1}, T0 + 0.5, decision="allowed")
    mcp_tools_call(rec, "c2", "read_note", {"n": 2}, T0 + 0.6, decision="denied")
    rows = rec.rows(
        "SELECT call_id, decision, decision_rule, server_name, mcp_call_id FROM tool_calls ORDER BY id"
    )
    rec.shutdown()
    assert [(r["call_id"], r["decision"], r["server_name"]) for r in rows] == [
        ("toolu_a", "approved", "files"),
        ("toolu_b", "denied", "files"),
    ]
    assert rows[0]["decision_rule"] == "ask-files"
    assert all(r["mcp_call_id"] for r in rows)


def test_a_websocket_turn_takes_the_verdicts_of_its_messages(tmp_path):
    """A turn's rows are written when it ends, long before the socket's FlowEnded: its verdicts
    come on the messages of the turn."""
    rec = RecorderHarness(tmp_path)
    ws = head("w1", started=T0, host="api.openai.com", method="GET", path="/v1/responses",
              headers=[("upgrade", "websocket")])  # fmt: skip
    rec.feed(WsOpened(ws, response(101, None, started=T0)))
    create = {"type": "response.create", "model": "gpt-5", "input": "clean"}
    rec.feed(WsMessage("w1", True, json.dumps(create).encode(), True, T0 + 0.1))
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_rm", "name": "shell",
            "arguments": json.dumps({"command": ["rm", "-rf", "/x"]}), "status": "completed"}  # fmt: skip
    done = {"type": "response.output_item.done", "output_index": 0, "item": item}
    verdict = ToolDecision("call_rm", "shell", "denied", "no-rm-rf")
    rec.feed(handed_over(WsMessage("w1", False, json.dumps(done).encode(), True, T0 + 0.2, (verdict,))))
    completed = {"type": "response.completed", "response": {"id": "resp_1", "model": "gpt-5", "status": "completed",
                 "output": [item], "usage": {"input_tokens": 1, "output_tokens": 1}}}  # fmt: skip
    rec.feed(WsMessage("w1", False, json.dumps(completed).encode(), True, T0 + 0.3))
    assert rec.rows(QUERY) == [
        {"call_id": "call_rm", "tool_name": "shell", "decision": "denied", "decision_rule": "no-rm-rf",
         "approval_id": None}
    ]  # fmt: skip
    rec.close(ended(ws, resp=response(101, None, started=T0), at=T0 + 1, websocket=True, close_code=1000))
    rec.shutdown()
