"""What the replay server sends, pure: recorded bodies cut as they arrived, misses in each
provider's error shape."""

from __future__ import annotations

import json

import pytest

from assembler.replay.answers import miss_error, not_replayed, pieces, protocol_of, websocket_miss
from assembler.replay.live import with_model

SSE = b"event: a\ndata: {}\n\nevent: b\r\ndata: {}\r\n\r\ndata: [DONE]\n\n"


def test_pieces_follow_the_recorded_chunks_and_their_times():
    assert pieces(b"abcdefgh", "text/event-stream", [(3, 10), (3, 11), (6, 20)]) == [
        (b"abc", 10), (b"def", 20), (b"gh", 20)]  # fmt: skip
    assert pieces(b"abc", None, [(99, 5)]) == [(b"abc", 5)]  # a body cut short by max_body_bytes


def test_pieces_without_chunks_are_framing_units():
    assert [p for p, _ in pieces(SSE, "text/event-stream; charset=utf-8", None)] == [
        b"event: a\ndata: {}\n\n", b"event: b\r\ndata: {}\r\n\r\n", b"data: [DONE]\n\n"]  # fmt: skip
    assert [p for p, _ in pieces(b'{"a":1}\n{"b":2}\n', "application/x-ndjson", None)] == [
        b'{"a":1}\n',
        b'{"b":2}\n',
    ]
    assert pieces(b"\x00\x01binary", "application/vnd.amazon.eventstream", None) == [
        (b"\x00\x01binary", None)
    ]


def test_websocket_pieces_are_its_messages():
    body = b'{"type":"a"}\n{"type":"b"}'
    assert [p for p, _ in pieces(body, None, None, websocket=True)] == [b'{"type":"a"}', b'{"type":"b"}']
    assert pieces(body, None, [(13, 4), (25, 9)], websocket=True) == [
        (b'{"type":"a"}', 4),
        (b'{"type":"b"}', 9),
    ]


@pytest.mark.parametrize(("path", "obj", "protocol"), [
    ("/v1/messages", {}, "anthropic"), ("/v1/chat/completions", {}, "openai"), ("/v1/responses", {}, "openai"),
    ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", {}, "gemini"), ("/api/chat", {}, "ollama"),
    ("/mcp", {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}, "mcp")])  # fmt: skip
def test_a_miss_is_an_error_in_the_providers_shape(path, obj, protocol):
    assert protocol_of(path, obj) == protocol
    status, payload = miss_error(protocol, "messages[0]: recorded 1, now 2", obj)
    error = json.loads(payload)
    text = json.dumps(error)
    assert "capsem replay miss: messages[0]: recorded 1, now 2" in text
    if protocol == "mcp":
        assert status == 200 and error["id"] == 3 and error["error"]["code"] == -32000
    else:
        assert status == 400
    if protocol == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    if protocol == "gemini":
        assert error["error"]["status"] == "INVALID_ARGUMENT"
    if protocol == "openai":
        assert error["error"]["code"] == "replay_miss"


def test_websocket_miss_and_not_replayed():
    event = json.loads(websocket_miss("x"))
    assert event["type"] == "error" and event["error"]["message"] == "capsem replay miss: x"
    assert (
        "is not a model or MCP call"
        in json.loads(not_replayed("GET", "statsig.com", "/v1/x"))["error"]["message"]
    )


def test_with_model_rewrites_the_body_or_geminis_path():
    assert with_model("/v1/messages", b'{"model":"a","x":1}', "b") == (
        "/v1/messages",
        b'{"model": "b", "x": 1}',
    )
    assert with_model("/v1beta/models/gemini-2.5-flash:generateContent", b"{}", "gemini-pro")[0] == (
        "/v1beta/models/gemini-pro:generateContent"
    )
    ws = with_model("", b'{"type":"response.create","response":{"model":"a"}}', "b")[1]
    assert json.loads(ws)["response"]["model"] == "b"
