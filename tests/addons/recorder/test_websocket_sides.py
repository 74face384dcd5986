"""`WebSocketTurns` with the tool gate's sides (pure): a held call released unchanged keeps no
delivered body; a denied one keeps the agent's messages, and the turn waits for the rewritten
`response.completed` that follows the model's. The same through mitmdump:
tests/replay/test_replay_denied.py."""

from __future__ import annotations

import json

from addons.recorder.websocket import WebSocketTurns

CREATE = json.dumps({"type": "response.create", "model": "gpt-5", "input": []}).encode()
CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell", "arguments": "{}"}
ADDED = json.dumps({"type": "response.output_item.added", "output_index": 0, "item": CALL}).encode()
DONE = json.dumps({"type": "response.output_item.done", "output_index": 0, "item": CALL}).encode()


def completed(output: list) -> bytes:
    return json.dumps({"type": "response.completed", "response": {"id": "r", "status": "completed",
                       "output": output, "usage": {"input_tokens": 3, "output_tokens": 2}}}).encode()  # fmt: skip


def feed(turns: WebSocketTurns, messages: list[tuple[bytes, str]]) -> list:
    out = turns.message(True, CREATE, True, 0.0)
    for n, (content, side) in enumerate(messages, 1):
        out += turns.message(False, content, True, float(n), side)
    return out


def test_a_call_released_unchanged_keeps_no_delivered_body():
    turns = WebSocketTurns()
    (turn,) = feed(turns, [(ADDED, "model"), (DONE, "model"), (ADDED, "agent"), (DONE, "agent"),
                           (completed([CALL]), "both")])  # fmt: skip
    assert turn.delivered_body is None and turn.summary.error_message is None
    assert [c.name for c in turn.summary.tool_calls] == ["shell"]


def test_a_denied_call_keeps_what_the_agent_received_and_waits_for_its_last_message():
    turns = WebSocketTurns()
    text = {"type": "message", "id": "msg_capsem_fc_1", "role": "assistant",
            "content": [{"type": "output_text", "text": "denied"}]}  # fmt: skip
    replaced = json.dumps({"type": "response.output_item.done", "output_index": 0, "item": text}).encode()
    model = [(ADDED, "model"), (DONE, "model"), (completed([CALL]), "model")]
    assert feed(turns, model) == [] and turns.waiting  # the model's turn ended; the agent's not yet
    (turn,) = turns.message(False, replaced, True, 4.0, "agent") + turns.message(
        False, completed([text]), True, 5.0, "agent"
    )
    assert not turns.waiting and turn.ended == 3.0 and turn.summary.error_message is None
    assert turn.response_body == b"\n".join(m for m, _ in model)  # the model's, as it came
    assert turn.delivered_body == replaced + b"\n" + completed([text])
    assert [c.name for c in turn.summary.tool_calls] == ["shell"]  # the record keeps what the model asked
    turns = WebSocketTurns()
    feed(turns, model)
    (cut,) = turns.close(9.0)  # the socket ended before the agent's messages: recorded, not an error
    assert cut.summary.error_message is None and cut.delivered_body == b""
