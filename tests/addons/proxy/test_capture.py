"""The addon's hooks in-process, with mitmproxy's own test helpers (`taddons`, `tflow`).

The recorder runs on a thread of the test process (`Capsem(recorder=RecorderThread)`): the same
messages, the same recorder and writer as in mitmdump, without a proxy process. What only a
real mitmdump can show (bytes on the wire, the recorder process, signals) is in tests/e2e.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mitmproxy import http
from mitmproxy.test import tflow, tutils
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from addons.proxy.capture import Capsem
from tests.addons.proxy.conftest import finish
from tests.conftest import rows

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures"
ANTHROPIC_REQUEST = {"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": True,
                     "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip


def model_flow(host: str = "api.anthropic.com", path: str = "/v1/messages", body: dict | None = None,
               content_type: str = "text/event-stream") -> http.HTTPFlow:  # fmt: skip
    req = tutils.treq(host=host, port=443, scheme="https", method=b"POST", path=path.encode(),
                      content=json.dumps(body or ANTHROPIC_REQUEST).encode(),
                      headers=http.Headers(content_type="application/json"))  # fmt: skip
    resp = tutils.tresp(headers=http.Headers(content_type=content_type), content=None)
    return tflow.tflow(req=req, resp=resp)


def stream_through(addon: Capsem, flow: http.HTTPFlow, wire: bytes, size: int) -> None:
    """The hooks of a streamed response, the body fed to the stream callable in `size` pieces."""
    response = flow.response
    flow.response = None
    addon.requestheaders(flow)
    addon.request(flow)
    flow.response = response
    addon.responseheaders(flow)
    assert callable(flow.response.stream)
    for i in range(0, len(wire), size):
        piece = wire[i : i + size]
        assert flow.response.stream(piece) == piece  # the client sees the same bytes
    flow.response.stream(b"")


@pytest.mark.parametrize("size", [1, 7, 4096])
def test_sse_any_chunking_gives_one_exact_model_call(capsem, capsem_home, size):
    wire = (FIXTURES / "anthropic" / "stream_thinking_tools.sse").read_bytes()
    flow = model_flow()
    stream_through(capsem, flow, wire, size)
    capsem.response(flow)
    db = finish(capsem, capsem_home)
    (call,) = rows(db, "SELECT * FROM model_calls")
    (net,) = rows(db, "SELECT * FROM net_events")
    assert (call["provider"], call["complete"], call["stream"], call["net_event_id"]) == (
        "anthropic",
        1,
        1,
        net["id"],
    )
    assert call["output_tokens"] and call["input_tokens"] and call["event_id"] and net["event_id"]
    assert net["bytes_received"] == len(wire) and net["streamed"] == 1
    tools = rows(db, "SELECT * FROM tool_calls")
    assert tools and all(t["model_call_id"] == call["id"] for t in tools)


def test_a_stream_that_ended_whole_is_not_an_error_when_the_client_leaves(capsem, capsem_home):
    """The openai SDK closes the response right after `data: [DONE]`: the call is complete."""
    wire = (FIXTURES / "openai_chat" / "stream_parallel_tools.sse").read_bytes()
    assert b"[DONE]" in wire
    body = {"model": "gpt-4.1", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    flow = model_flow("api.openai.com", "/v1/chat/completions", body)
    stream_through(capsem, flow, wire, 50)
    flow.error = tflow.terr("Client disconnected.")
    capsem.error(flow)
    db = finish(capsem, capsem_home)
    (call,) = rows(db, "SELECT complete, error_message, stop_reason FROM model_calls")
    (net,) = rows(db, "SELECT decision, error FROM net_events")
    assert call["complete"] == 1 and call["error_message"] is None and call["stop_reason"]
    assert net == {"decision": "allowed", "error": None}


def test_a_stream_cut_before_its_end_is_an_error(capsem, capsem_home):
    wire = (FIXTURES / "anthropic" / "stream_text.sse").read_bytes()
    flow = model_flow()
    stream_through(capsem, flow, wire[: len(wire) // 2], 64)
    flow.error = tflow.terr("Server disconnected.")
    capsem.error(flow)
    db = finish(capsem, capsem_home)
    (call,) = rows(db, "SELECT complete FROM model_calls")
    (net,) = rows(db, "SELECT decision, error FROM net_events")
    assert call["complete"] == 0 and net == {"decision": "error", "error": "Server disconnected."}


def test_done_ends_the_flows_still_open(capsem, capsem_home):
    flow = model_flow()
    flow.response = None
    capsem.requestheaders(flow)
    db = finish(capsem, capsem_home)
    (net,) = rows(db, "SELECT decision, error FROM net_events")
    assert net == {"decision": "error", "error": "capture stopped before the flow finished"}


def test_an_error_before_any_response_is_an_error_row(capsem, capsem_home):
    flow = tflow.tflow(req=tutils.treq(host="nowhere.test"), resp=False)
    capsem.requestheaders(flow)
    capsem.request(flow)
    flow.error = tflow.terr("[Errno -2] Name or service not known")
    capsem.error(flow)
    db = finish(capsem, capsem_home)
    (net,) = rows(db, "SELECT domain, decision, error, status_code FROM net_events")
    assert net == {"domain": "nowhere.test", "decision": "error", "status_code": None,
                   "error": "[Errno -2] Name or service not known"}  # fmt: skip


def _ws(from_client: bool, payload: dict, at: float) -> WebSocketMessage:
    return WebSocketMessage(Opcode.TEXT, from_client, json.dumps(payload).encode(), at)


def test_websocket_turns_point_at_their_upgrade_and_count_every_byte(capsem, capsem_home):
    flow = tflow.twebsocketflow(messages=False)
    flow.request.host, flow.request.port, flow.request.scheme = "api.openai.com", 443, "https"
    flow.request.path = "/v1/responses"
    capsem.requestheaders(flow)
    capsem.request(flow)
    capsem.responseheaders(flow)
    capsem.response(flow)  # the 101: messages follow
    big = "x" * 400_000  # more than the ~350 KB after which byte counts were once lost
    turn = [
        _ws(True, {"type": "response.create", "model": "gpt-5", "input": big}, 946681204),
        _ws(False, {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5"}}, 946681205),
        _ws(False, {"type": "response.output_text.delta", "delta": big, "output_index": 0, "content_index": 0},
            946681206),
        _ws(False, {"type": "response.completed", "response": {"id": "resp_1", "status": "completed",
                                                               "usage": {"input_tokens": 9, "output_tokens": 3}}},
            946681207),
    ]  # fmt: skip
    for message in turn:
        flow.websocket.messages.append(message)
        capsem.websocket_message(flow)
    flow.websocket.close_code = 1000
    flow.websocket.timestamp_end = 946681208
    capsem.websocket_end(flow)
    db = finish(capsem, capsem_home)
    (net,) = rows(
        db, "SELECT id, conn_type, bytes_sent, bytes_received, status_code, trace_id FROM net_events"
    )
    (call,) = rows(
        db, "SELECT net_event_id, input_tokens, output_tokens, complete, trace_id FROM model_calls"
    )
    assert net["conn_type"] == "wss" and net["status_code"] == 101
    assert net["bytes_sent"] == len(turn[0].content)
    assert net["bytes_received"] == sum(len(m.content) for m in turn[1:])
    assert (call["net_event_id"], call["input_tokens"], call["output_tokens"], call["complete"]) == (
        net["id"], 9, 3, 1)  # fmt: skip
    assert call["trace_id"] == net["trace_id"]


@pytest.mark.parametrize("completed", [True, False], ids=["after-the-last-turn", "mid-turn"])
def test_a_websocket_dropped_at_exit_is_an_error_only_mid_turn(capsem, capsem_home, completed):
    """Codex drops its socket without a close frame (1006) when it exits: no error once its last turn
    completed; a turn still open is lost, and that is an error of the flow and of the call."""
    flow = tflow.twebsocketflow(messages=False)
    flow.request.host, flow.request.port, flow.request.scheme = "api.openai.com", 443, "https"
    flow.request.path = "/v1/responses"
    for hook in (capsem.requestheaders, capsem.request, capsem.responseheaders, capsem.response):
        hook(flow)
    turn = [
        _ws(True, {"type": "response.create", "model": "gpt-5", "input": "hi"}, 946681204),
        _ws(False, {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5"}}, 946681205),
        _ws(False, {"type": "response.completed", "response": {"id": "resp_1", "status": "completed",
                                                               "usage": {"input_tokens": 9, "output_tokens": 3}}},
            946681206),
    ]  # fmt: skip
    for message in turn if completed else turn[:2]:
        flow.websocket.messages.append(message)
        capsem.websocket_message(flow)
    flow.websocket.close_code = 1006  # what mitmproxy sets when the connection ends without a close frame
    flow.websocket.timestamp_end = 946681208
    capsem.websocket_end(flow)
    db = finish(capsem, capsem_home)
    (net,) = rows(db, "SELECT decision, error FROM net_events")
    (call,) = rows(db, "SELECT complete, error_message FROM model_calls")
    if completed:
        assert net == {"decision": "allowed", "error": None}
        assert call == {"complete": 1, "error_message": None}
    else:
        assert net["error"] == "websocket closed with code 1006"
        assert call == {"complete": 0, "error_message": "websocket closed with code 1006"}


@pytest.mark.parametrize(
    ("code", "reason", "error"),
    [(1000, "bye", None), (1001, "", None), (1011, "overloaded", "websocket closed with code 1011: overloaded"),
     (4000, "", "websocket closed with code 4000")],
)  # fmt: skip
def test_a_websocket_close_is_an_error_as_the_recorder_decides(capsem, capsem_home, code, reason, error):
    """The hook hands over the close code and reason; `close_error` in the recorder alone turns them
    into the flow's error (1006 above: only mid-turn)."""
    flow = tflow.twebsocketflow(messages=False)
    flow.request.host, flow.request.port, flow.request.scheme = "api.openai.com", 443, "https"
    flow.request.path = "/v1/responses"
    for hook in (capsem.requestheaders, capsem.request, capsem.responseheaders, capsem.response):
        hook(flow)
    flow.websocket.close_code, flow.websocket.close_reason = code, reason
    flow.websocket.timestamp_end = 946681208
    capsem.websocket_end(flow)
    assert rows(finish(capsem, capsem_home), "SELECT error FROM net_events") == [{"error": error}]


def test_a_tls_handshake_the_client_refused_is_recorded(capsem, capsem_home):
    from mitmproxy import connection, tls
    from mitmproxy.proxy import context

    client = tflow.tclient_conn()
    client.sni = "api.anthropic.com"
    ctx = context.Context(client, None)  # type: ignore[arg-type]
    ctx.server = tflow.tserver_conn()
    conn = connection.Client(peername=("127.0.0.1", 5555), sockname=("127.0.0.1", 8080), timestamp_start=1.0)
    conn.error = "certificate unknown"
    capsem.connections.tls_failed_client(tls.TlsData(conn, ctx))
    db = finish(capsem, capsem_home)
    (net,) = rows(db, "SELECT domain, method, decision, error FROM net_events")
    assert net["domain"] == "api.anthropic.com" and net["method"] == "CONNECT" and net["decision"] == "error"
    assert "certificate unknown" in net["error"]
