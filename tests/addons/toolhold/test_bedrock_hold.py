"""Bedrock's AWS event stream (Anthropic events, one `chunk` frame each, base64 in JSON) held for
the tool rules: at every cut an allowed call's frames reach the agent byte-identical; a denied
call's events become new frames with real CRCs that capsem's decoder and the Anthropic parser read."""

from __future__ import annotations

import base64
import json

from addons.body import ResponseReader
from addons.eventstream import EventStreamDecoder
from addons.providers import parser_for
from addons.toolhold import HeldCall, calls_in, machine_for, rewrite_json
from addons.toolhold.frames import FrameHold
from addons.toolhold.sse import data_of, split_events
from capsem.emulator.eventstream import encode_frame
from tests.addons.toolhold.test_hold import STREAMS, allow, cut, deny, through_a_failing_decision

HEADERS = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}


def bedrock_stream() -> bytes:
    """The Anthropic fixture's events as Bedrock frames them (with its padding field)."""
    events = split_events(bytearray(STREAMS["anthropic"].read_bytes()), final=True)
    frames = []
    for i, raw in enumerate(events):
        data = data_of(raw)
        if data and json.loads(data).get("type") != "ping":
            payload = {"bytes": base64.b64encode(data).decode(), "p": "abcdefgh"[: i % 8]}
            frames.append(encode_frame(HEADERS, json.dumps(payload).encode()))
    return b"".join(frames)


STREAM = bedrock_stream()


def run(pieces: list[bytes], decide) -> bytes:
    hold = FrameHold(machine_for("anthropic", decide))
    sent = [c for p in pieces if p for c in hold(p)] + hold(b"")
    assert all(sent) and hold.failure is None
    return b"".join(sent)


def read(body: bytes):
    """What a client reads of the frames: every frame valid; the events, and the answer they make."""
    decoder = EventStreamDecoder()
    events = decoder.feed(body) + decoder.flush()
    assert decoder.invalid_lines == 0
    reader = ResponseReader(parser_for("anthropic"), framing="eventstream", content_encoding=None, status=200)
    reader.feed(body)
    return events, reader.finish()


def test_allowed_calls_pass_byte_identical_at_every_cut():
    for point in range(1, len(STREAM), 7):
        calls: list[HeldCall] = []
        assert run(cut(STREAM, [point]), allow(calls)) == STREAM
        assert [c.name for c in calls] == ["Read", "Grep"]
    assert run([bytes([b]) for b in STREAM], allow([])) == STREAM


def test_a_denied_call_becomes_valid_frames_at_every_cut():
    denied = run([STREAM], deny({"Grep"}))
    assert denied != STREAM
    for point in range(1, len(STREAM), 11):
        assert run(cut(STREAM, [point]), deny({"Grep"})) == denied
    events, answer = read(denied)
    assert [c.name for c in answer.tool_calls] == ["Read"] and answer.complete and not answer.parse_errors
    texts = [json.loads(e.data) for e in events]
    blocks = [t["content_block"] for t in texts if t.get("type") == "content_block_start"]
    assert [b["name"] for b in blocks if b["type"] == "tool_use"] == ["Read"]
    said = "".join(t["delta"].get("text", "") for t in texts if t.get("type") == "content_block_delta")
    assert "Grep tool call was denied by policy rule 'no-rm'" in said


def test_a_whole_answer_read_whole():
    assert [c.name for c in calls_in("anthropic", STREAM, "eventstream")] == ["Read", "Grep"]
    assert rewrite_json("anthropic", STREAM, allow([]), "eventstream") is None
    assert rewrite_json("anthropic", STREAM, deny({"Grep"}), "eventstream") == run([STREAM], deny({"Grep"}))


def test_frames_that_carry_no_event_pass_as_they_came():
    exception = encode_frame({":exception-type": "throttlingException", ":content-type": "application/json",
                              ":message-type": "exception"}, b'{"message":"slow down"}')  # fmt: skip
    body = STREAM + exception
    assert run([body], deny({"nothing"})) == body
    assert run([body[:-3], body[-3:]], deny({"Grep"})).endswith(exception)


def test_a_failing_decision_lets_the_frames_through_unchanged():
    assert through_a_failing_decision(FrameHold, "anthropic", STREAM) == STREAM
