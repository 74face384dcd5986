"""`ToolGate` in-process: with no tool rule no answer is held, read or touched; with one, a
streamed answer's denied call is replaced on its way to the client while the record keeps the
model's answer, and the agent's beside it. End to end: tests/e2e/test_tool_hold.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from mitmproxy import ctx
from mitmproxy.test import tflow
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from addons.proxy import tool_gate
from addons.proxy.policy import Policy
from capsem.settings import parse
from tests.addons.proxy.conftest import finish
from tests.addons.proxy.test_capture import model_flow
from tests.conftest import rows

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures"
WIRE = (FIXTURES / "anthropic" / "stream_thinking_tools.sse").read_bytes()
DENY_GREP = "policy:\n  rules:\n    - {name: no-grep, action: deny, tool: Grep}\n"


def opened(capsem, flow):
    response = flow.response
    flow.response = None
    capsem.requestheaders(flow)
    capsem.request(flow)
    flow.response = response
    capsem.responseheaders(flow)


def test_with_no_tool_rule_nothing_is_held_read_or_touched(capsem, capsem_home, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("an answer was read for tool rules that do not exist")

    monkeypatch.setattr(Policy, "decide_tool", never)
    monkeypatch.setattr(tool_gate, "machine_for", never)
    monkeypatch.setattr(tool_gate, "calls_in", never)
    flow = model_flow()
    opened(capsem, flow)
    state = capsem.flows.get(flow)
    assert state.tool_hold is None and not state.tool_whole
    assert type(flow.response.stream).__name__ == "ResponseTap"  # capture's tap alone
    for i in range(0, len(WIRE), 50):
        piece = WIRE[i : i + 50]
        assert flow.response.stream(piece) is piece  # the very same object, not a copy
    assert flow.response.stream(b"") == b""
    assert capsem.response(flow) is None
    db = finish(capsem, capsem_home)
    assert [r["decision_rule"] for r in rows(db, "SELECT decision_rule FROM tool_calls")] == [None, None]


@pytest.mark.parametrize("size", [1, 13, 4096])
def test_a_denied_call_is_replaced_on_the_way_and_both_answers_are_kept(capsem, capsem_home, size):
    capsem.configure_settings(parse(yaml.safe_load(DENY_GREP)))
    flow = model_flow()
    opened(capsem, flow)
    assert capsem.flows.get(flow).tool_hold is not None
    sent = [c for i in range(0, len(WIRE), size) for c in flow.response.stream(WIRE[i : i + size])]
    sent += flow.response.stream(b"")
    assert all(sent)  # never an empty chunk (it would end a chunked body)
    got = b"".join(sent)
    assert b'"name":"Grep"' not in got and b'"name":"Read"' in got and b"'no-grep'" in got
    capsem.response(flow)
    db = finish(capsem, capsem_home)
    decided = rows(db, "SELECT tool_name, decision, decision_rule FROM tool_calls ORDER BY id")
    assert decided == [{"tool_name": "Read", "decision": "allowed", "decision_rule": None},
                       {"tool_name": "Grep", "decision": "denied", "decision_rule": "no-grep"}]  # fmt: skip
    (net,) = rows(db, "SELECT bytes_received FROM net_events")
    assert net["bytes_received"] == len(WIRE)  # the model's answer, as it came


@pytest.mark.parametrize("status", [201, 203, 299])
def test_any_success_status_is_held(capsem, capsem_home, status):
    """An SDK reads any 2xx answer: a gateway's 203 is held like a 200."""
    capsem.configure_settings(parse(yaml.safe_load(DENY_GREP)))
    flow = model_flow()
    flow.response.status_code = status
    opened(capsem, flow)
    assert capsem.flows.get(flow).tool_hold is not None
    got = b"".join(c for i in range(0, len(WIRE), 64) for c in flow.response.stream(WIRE[i : i + 64]))
    got += b"".join(flow.response.stream(b""))
    assert b'"name":"Grep"' not in got and b"'no-grep'" in got
    capsem.response(flow)
    finish(capsem, capsem_home)


def _ws_turn(command: str) -> list[bytes]:
    """A Responses turn on a WebSocket whose answer is one `shell` call running `command`."""
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell",
            "arguments": json.dumps({"command": command}), "status": "completed"}  # fmt: skip
    usage = {"input_tokens": 9, "output_tokens": 3}
    events = [
        {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5"}},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**item, "arguments": "", "status": "in_progress"}},
        {"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": "fc_1", "delta": item["arguments"]},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed",
         "response": {"id": "resp_1", "status": "completed", "output": [item], "usage": usage}},
    ]  # fmt: skip
    return [json.dumps(e).encode() for e in events]


@pytest.mark.parametrize("answer", ["deny", "approve"])
def test_a_websocket_turn_holds_its_call_and_records_the_models_messages_once(
    capsem, capsem_home, monkeypatch, answer
):
    rule = "deny" if answer == "deny" else "ask"
    rules = f'{{name: no-rm-rf, action: {rule}, tool: "*", tool_args: {{command: {{shell: "rm -rf"}}}}}}'
    capsem.configure_settings(parse(yaml.safe_load(f"policy:\n  rules:\n    - {rules}\n")))
    injected: list[bytes] = []
    monkeypatch.setattr(
        ctx.master.commands, "call", lambda name, flow, to_client, content, is_text: injected.append(content)
    )
    flow = tflow.twebsocketflow(messages=False)
    flow.request.host, flow.request.port, flow.request.scheme = "api.openai.com", 443, "https"
    flow.request.path = "/v1/responses"
    for hook in ("requestheaders", "request", "responseheaders", "response"):
        getattr(capsem, hook)(flow)
    turn = _ws_turn("rm -rf /")
    create = WebSocketMessage(
        Opcode.TEXT, True, json.dumps({"type": "response.create", "model": "gpt-5"}).encode()
    )
    flow.websocket.messages.append(create)
    capsem.websocket_message(flow)

    async def deliver() -> None:
        for content in turn:
            message = WebSocketMessage(Opcode.TEXT, False, content)
            flow.websocket.messages.append(message)
            pending = capsem.websocket_message(flow)
            if pending is not None:  # an ask: a person answers while the hook waits
                task = asyncio.ensure_future(pending)
                while not capsem.approvals.waiting:
                    await asyncio.sleep(0.01)
                (waiting,) = capsem.approvals.waiting
                assert capsem.approvals.decide(waiting, True, "cli") is None
                await task
            if content is turn[0]:
                assert not message.dropped  # not a tool call: it passes as it came
        for content in list(injected):  # mitmproxy hands each injected message to the hooks again
            flow.websocket.messages.append(WebSocketMessage(Opcode.TEXT, False, content, injected=True))
            assert capsem.websocket_message(flow) is None

    asyncio.run(deliver())
    got = [json.loads(m)["type"] for m in injected]
    if answer == "deny":
        assert "response.output_text.delta" in got and b"rm -rf" not in b"".join(injected)
    else:
        assert injected == turn[1:4]  # the held call's messages, unchanged, in order
    flow.websocket.close_code = 1000
    capsem.websocket_end(flow)
    db = finish(capsem, capsem_home)
    (net,) = rows(db, "SELECT bytes_received FROM net_events")
    assert net["bytes_received"] == sum(map(len, turn))  # the model's messages, each counted once
    (call,) = rows(db, "SELECT tool_name, decision, decision_rule FROM tool_calls")
    assert call == {"tool_name": "shell", "decision": "denied" if answer == "deny" else "approved",
                    "decision_rule": "no-rm-rf"}  # fmt: skip
