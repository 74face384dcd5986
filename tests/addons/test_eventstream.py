"""AWS event-stream framing (Bedrock): frames split at every byte, CRC errors and resync,
exception frames, the Anthropic interpreter reading the decoded events, never raising."""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import asdict

from hypothesis import given, settings
from hypothesis import strategies as st

from addons.body import ResponseReader
from addons.eventstream import EventStreamDecoder, decode_headers, encode_frame
from addons.framing import make_framer
from addons.providers import detect, stream_framing
from addons.providers.anthropic import AnthropicMessages

CHUNK = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}
EVENTS = [
    {"type": "message_start", "message": {"id": "msg_bdrk_01", "type": "message", "role": "assistant",
     "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": None,
     "usage": {"input_tokens": 12, "cache_read_input_tokens": 3, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Héllo "}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "🎉 world"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_bdrk",
     "name": "ls", "input": {}}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"dir\":"}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"src\"}"}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 21}},
    {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 12, "outputTokenCount": 21,
     "invocationLatency": 900, "firstByteLatency": 200}},
]  # fmt: skip


def chunk(obj: dict, pad: str = "abcdefgh") -> bytes:
    data = base64.b64encode(json.dumps(obj).encode()).decode()
    return encode_frame(CHUNK, json.dumps({"bytes": data, "p": pad}).encode())


WIRE = b"".join(chunk(e, "p" * (i % 7 + 1)) for i, e in enumerate(EVENTS))
EXCEPTION = encode_frame({":message-type": "exception", ":exception-type": "throttlingException",
                          ":content-type": "application/json"}, b'{"message":"Too many requests"}')  # fmt: skip


def read(pieces: list[bytes]) -> dict:
    reader = ResponseReader(AnthropicMessages(), framing="eventstream", content_encoding=None, status=200)  # fmt: skip
    for piece in pieces:
        reader.feed(piece)
    return asdict(reader.finish())


def test_frame_layout_and_headers():
    frame = chunk({"type": "ping"})
    total, headers_len = struct.unpack(">II", frame[:8])
    assert total == len(frame)
    assert decode_headers(frame[12 : 12 + headers_len]) == CHUNK
    # typed header values other than strings
    block = b"\x04flag\x00" + b"\x03num\x04" + struct.pack(">i", -5) + b"\x02ts\x08" + struct.pack(">q", 7)
    assert decode_headers(block) == {"flag": True, "num": -5, "ts": 7}
    assert decode_headers(b"\x05short") is None and decode_headers(b"\x01a\x63") is None


def test_every_split_point_gives_one_summary():
    whole = read([WIRE])
    assert (whole["text"], whole["stop_reason"], whole["complete"], whole["parse_errors"]) == (
        "Héllo 🎉 world", "tool_use", True, 0)  # fmt: skip
    assert whole["usage"]["input_tokens"] == 15 and whole["usage"]["output_tokens"] == 21
    assert [(c["call_id"], c["name"], c["arguments"]) for c in whole["tool_calls"]] == [
        ("toolu_bdrk", "ls", '{"dir":"src"}')
    ]
    for cut in range(1, len(WIRE)):
        assert read([WIRE[:cut], WIRE[cut:]]) == whole, cut
    assert read([WIRE[i : i + 1] for i in range(len(WIRE))]) == whole


def test_events_carry_the_anthropic_type_and_json():
    events = make_framer("eventstream").feed(WIRE)
    assert [e.event for e in events] == [e["type"] for e in EVENTS]
    assert [json.loads(e.data) for e in events] == EVENTS


def test_crc_errors_are_counted_and_the_decoder_resyncs():
    frames = [chunk(e) for e in EVENTS]
    bad_message = bytearray(frames[2])
    bad_message[-1] ^= 0x01  # message CRC
    bad_prelude = bytearray(frames[3])
    bad_prelude[9] ^= 0x01  # prelude CRC
    wire = b"".join([*frames[:2], bytes(bad_message), bytes(bad_prelude), b"\x00garbage\xff", *frames[4:]])
    dec = EventStreamDecoder()
    events = dec.feed(wire) + dec.flush()
    assert [json.loads(e.data)["type"] for e in events] == [e["type"] for e in EVENTS[:2] + EVENTS[4:]]
    assert dec.invalid_lines >= 1
    summary = read([wire])
    assert summary["parse_errors"] >= 1 and summary["text"] == "" and summary["complete"]


def test_cut_off_frame_is_counted_at_flush():
    dec = EventStreamDecoder()
    assert dec.feed(WIRE[:-5]) and dec.flush() == [] and dec.invalid_lines == 1
    summary = read([WIRE[: len(WIRE) - 5]])
    assert summary["complete"] is False and summary["stop_reason"] == "tool_use"


def test_exception_frame_is_an_error_event():
    summary = read([b"".join(chunk(e) for e in EVENTS[:3]) + EXCEPTION])
    assert (summary["error_type"], summary["error_message"], summary["complete"], summary["text"]) == (
        "throttlingException", "Too many requests", False, "Héllo ")  # fmt: skip


def test_other_frames_and_bad_payloads():
    dec = EventStreamDecoder()
    initial = encode_frame({":event-type": "initial-response", ":message-type": "event"}, b"{}")
    no_bytes = encode_frame(CHUNK, b'{"p":"x"}')
    bad_b64 = encode_frame(CHUNK, b'{"bytes":"!!!not base64"}')
    assert dec.feed(initial + no_bytes + bad_b64) == [] and dec.invalid_lines == 2


def test_bedrock_routes_pick_the_eventstream_framing():
    route = detect("bedrock-runtime.us-east-1.amazonaws.com",
                   "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream", "POST")  # fmt: skip
    assert route is not None
    assert (route.provider, route.protocol, route.model) == (
        "bedrock", "anthropic", "us.anthropic.claude-sonnet-4-5-20250929-v1:0")  # fmt: skip
    assert stream_framing("anthropic", "application/vnd.amazon.eventstream", "/x") == "eventstream"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=6))
def test_never_raises_on_garbage(data: bytes, cuts: list[int]):
    dec = EventStreamDecoder()
    points = sorted({min(c, len(data)) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    for piece in pieces:
        dec.feed(piece)
    dec.flush()
    read(pieces)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(WIRE) - 1), st.integers(0, 255), st.integers(1, 50))
def test_never_raises_on_corrupted_frames(pos: int, xor: int, size: int):
    wire = bytearray(WIRE)
    wire[pos] ^= xor or 1
    summary = read([bytes(wire[i : i + size]) for i in range(0, len(wire), size)])
    assert isinstance(summary["text"], str)
