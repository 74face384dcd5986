"""MCP wire parsing (pure): requests, answers as JSON or SSE, GET streams, model tool names.

Message bytes follow the specification's examples (2025-11-25 and the stateless 2026-07-28) and
the SDKs' framings (the TypeScript SDK writes `result` before `jsonrpc`/`id`; servers with an
event store send a priming event with an id and empty data).
"""

from __future__ import annotations

import gzip
import json

from hypothesis import given
from hypothesis import strategies as st

from addons.mcp import (
    StreamReader,
    exchange_key,
    header_call,
    initialize_name,
    mcp_tool_name,
    parse_request,
    parse_response,
    preview,
    server_name,
    url_key,
)

CALL = b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_weather","arguments":{"location":"New York"}}}'
SSE_ANSWER = (
    b"id: ev-1\ndata: \n\n"  # priming event: an id, empty data
    b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n'
    b'event: message\ndata: {"result":{"content":[{"type":"text","text":"72\xc2\xb0F"}],"isError":false},'
    b'"jsonrpc":"2.0","id":3}\n\n'
)


def test_a_tools_call_request():
    (req,) = parse_request(CALL)
    assert (req.method, req.id, req.raw_id, req.tool_name) == ("tools/call", "3", 3, "get_weather")
    assert req.params == {"name": "get_weather", "arguments": {"location": "New York"}}
    assert req.size == len(CALL)


def test_ids_keep_their_type_as_text():
    body = b'[{"jsonrpc":"2.0","id":"abc","method":"ping"},{"jsonrpc":"2.0","id":7.5,"method":"tools/list"}]'
    assert [r.id for r in parse_request(body)] == ["abc", "7.5"]


def test_notifications_responses_and_batches():
    body = json.dumps([
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 9, "result": {"roots": []}},  # the client answers a server request
        {"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "file:///a.txt"}},
        {"jsonrpc": "2.0", "id": 5, "method": "prompts/get", "params": {"name": "review"}},
    ], separators=(",", ":")).encode()  # fmt: skip
    reqs = parse_request(body)
    assert [(r.method, r.id, r.tool_name) for r in reqs] == [
        ("notifications/initialized", None, None),
        (None, "9", None),
        ("resources/read", "4", "file:///a.txt"),
        ("prompts/get", "5", "review"),
    ]
    assert sum(r.size for r in reqs) == len(body) - 2 - 3  # each message's share: no brackets, no commas


def test_a_stateless_2026_request():
    body = json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
    }).encode()  # fmt: skip
    (req,) = parse_request(body)
    assert req.method == "server/discover"


def test_a_body_decided_mcp_is_read_as_it_is_without_deciding_again():
    """Whether a body is MCP is decided once, in mitmdump (`addons/mcp/jsonrpc.py`): any method,
    a message without `jsonrpc`, and a batch's items that are not objects are read all the same."""
    other = b'[{"jsonrpc":"2.0","id":1,"method":"custom/thing"}, 5, {"id":2,"method":"tools/call","params":{"name":"x"}}]'
    assert [(r.method, r.tool_name) for r in parse_request(other)] == [
        ("custom/thing", None),
        ("tools/call", "x"),
    ]


def test_a_2026_tools_call_named_in_headers():
    (call,) = header_call([("Mcp-Method", "tools/call"), ("Mcp-Name", "get_weather")])
    assert (call.method, call.tool_name, call.id) == ("tools/call", "get_weather", None)
    assert header_call([("Mcp-Method", "tools/list")]) == []
    assert header_call([("Mcp-Method", "tools/call")]) == []
    assert header_call([]) == []


def test_bodies_that_cannot_be_read():
    for body in (b"", b"not json", b"\xff\xfe", b"[" * 100_000):  # the last: deeper than the parser goes
        assert parse_request(body) is None, body[:40]
    assert parse_request(b"[]") == [] and parse_request(b"[1, 2]") == []


def test_json_answers_with_results_tool_errors_and_protocol_errors():
    body = json.dumps([
        {"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": "ok"}], "isError": False}},
        {"jsonrpc": "2.0", "id": 4, "result": {"content": [{"type": "text", "text": "Invalid date."}], "isError": True}},
        {"jsonrpc": "2.0", "id": 5, "error": {"code": -32602, "message": "Unknown tool: x"}},
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {}},
    ]).encode()  # fmt: skip
    ok, tool_error, protocol_error = parse_response(body, "application/json")
    assert (ok.id, ok.is_error, ok.error_message) == ("3", False, None)
    assert (tool_error.is_error, tool_error.error_message) == (True, "Invalid date.")
    assert (protocol_error.is_error, protocol_error.error_message) == (True, "-32602: Unknown tool: x")
    assert protocol_error.error == {"code": -32602, "message": "Unknown tool: x"}


def test_sse_answer_skips_priming_and_progress_events():
    (answer,) = parse_response(SSE_ANSWER, "text/event-stream; charset=utf-8")
    assert answer.id == "3" and answer.result["content"][0]["text"] == "72°F"
    assert answer.size == len(json.dumps(json.loads(SSE_ANSWER.split(b"data: ")[-1]), separators=(",", ":"),
                                         ensure_ascii=False).encode())  # fmt: skip


def test_unreadable_answers_give_nothing():
    assert parse_response(b"", "application/json") == []
    assert parse_response(b"Accepted", "text/plain") == []
    assert parse_response(b"data: {broken\n\n", "text/event-stream") == []


def test_server_names():
    assert server_name("mcp.example.com", 443, "/mcp/") == "mcp.example.com/mcp"
    assert server_name("127.0.0.1", 8000, "/") == "127.0.0.1:8000/"
    init = parse_response(
        b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},'
        b'"serverInfo":{"name":"ExampleServer","version":"1.0.0"}}}',
        "application/json",
    )[0]
    assert initialize_name(init) == "ExampleServer"
    assert initialize_name(parse_response(b'{"jsonrpc":"2.0","id":1,"result":{}}', None)[0]) is None


def test_model_tool_names_in_mcp_schemes():
    assert mcp_tool_name("mcp__files__read_note") == ("files", "read_note")
    assert mcp_tool_name("mcp__my_server__do__it") == ("my_server", "do__it")
    assert mcp_tool_name("developer__shell") == ("developer", "shell")
    for native in ("Bash", "read_note", "web_search", "__init", "a____b", "mcp____x"):
        assert mcp_tool_name(native) is None, native


def test_preview_is_compact_json():
    assert preview({"a": [1, "é"]}) == '{"a":[1,"é"]}'
    assert preview(None) is None


def test_exchange_keys_tie_a_post_to_its_get_stream():
    assert exchange_key("abc", "h", 1, "/mcp", "") == "session:abc"
    post = exchange_key(None, "127.0.0.1", 8000, "/messages/", "session_id=42")
    assert url_key("http://127.0.0.1:8000/messages/?session_id=42") == post
    assert url_key("http://example.com/messages?session_id=42") == exchange_key(
        None, "example.com", 80, "/messages", "session_id=42"
    )


LEGACY_STREAM = (
    b"event: endpoint\r\ndata: /messages/?session_id=42\r\n\r\n"
    b": ping\r\n\r\n"
    b'event: message\r\ndata: {"jsonrpc":"2.0","id":0,"result":{"serverInfo":{"name":"files"}}}\r\n\r\n'
    b'event: message\r\ndata: {"jsonrpc":"2.0","id":1,"method":"roots/list"}\r\n\r\n'
    b'event: message\r\ndata: {"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"nope"}}\r\n\r\n'
)


def read_all(reader: StreamReader, chunks: list[bytes]) -> tuple[list[str], list]:
    endpoints, answers = [], []
    for i, chunk in enumerate(chunks):
        e, a = reader.feed(chunk, final=i == len(chunks) - 1)
        endpoints += e
        answers += a
    return endpoints, answers


@given(st.lists(st.integers(min_value=1, max_value=len(LEGACY_STREAM) - 1), max_size=8))
def test_stream_reader_any_chunking(cuts):
    points = sorted(set(cuts))
    chunks = [LEGACY_STREAM[a:b] for a, b in zip([0, *points], [*points, len(LEGACY_STREAM)], strict=True)]
    reader = StreamReader(None, "http://127.0.0.1:8000/sse")
    endpoints, answers = read_all(reader, chunks)
    assert endpoints == ["http://127.0.0.1:8000/messages/?session_id=42"]
    assert [(a.id, a.is_error) for a in answers] == [("0", False), ("2", True)]
    assert reader.is_mcp and reader.active


def test_stream_reader_decodes_a_compressed_stream():
    reader = StreamReader("gzip", "https://mcp.example.com/sse")
    body = gzip.compress(LEGACY_STREAM)
    endpoints, answers = read_all(reader, [body[:10], body[10:]])
    assert endpoints == ["https://mcp.example.com/messages/?session_id=42"] and len(answers) == 2


def test_stream_reader_gives_up_on_other_event_streams():
    reader = StreamReader(None, "http://x/events", give_up=100)
    event = b'data: {"ticker":"ABC","price":1}\n\n'
    for _ in range(10):
        assert reader.feed(event) == ([], [])
    assert not reader.active and not reader.is_mcp
    assert reader.feed(LEGACY_STREAM) == ([], [])  # no longer read
