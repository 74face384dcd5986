"""mcp_calls rows through the Recorder (no mitmproxy): answers that arrive on a GET stream in
either order, stateless requests, batches, and links between model tool calls and MCP calls
whichever is recorded first."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from addons.messages import FlowEnded, RequestHead, Route
from addons.recorder.mcp_ledger import ANSWER_WAIT, LINK_WINDOW, MCP_PREVIEW_BYTES
from capsem.settings import defaults
from capsem.store.bodies import read_body
from tests.recording import RecorderHarness, ended, head, response

T0 = time.time()


def post(key: str, message, *, at: float = T0, status: int = 202, answer: bytes | None = b"Accepted",
         content_type: str = "text/plain", headers=(), query: str = "session_id=42", **fields) -> FlowEnded:  # fmt: skip
    body = json.dumps(message, separators=(",", ":")).encode()
    req = head(key, started=at, scheme="http", host="127.0.0.1", port=8000, path="/messages/", query=query,
               headers=[("content-type", "application/json"), *headers])  # fmt: skip
    return ended(req, resp=response(status, content_type, started=at + 0.01), body=answer, request_body=body,
                 at=at + 0.02, mcp=True, **fields)  # fmt: skip


def get_head(key: str = "g1", *, headers=(), path: str = "/sse") -> RequestHead:
    return head(key, started=T0 - 1, scheme="http", host="127.0.0.1", port=8000, method="GET", path=path,
                headers=[("accept", "text/event-stream"), *headers])  # fmt: skip


class Rec(RecorderHarness):
    """The harness with the GET-stream shorthands these tests use."""

    def open_stream(self, req: RequestHead) -> None:
        self.open(req, response(200, "text/event-stream"), None, None, mcp_stream=True)

    def close_stream(self, req: RequestHead, at: float) -> None:
        self.close(ended(req, resp=response(200, "text/event-stream"), at=at, streamed=True))


def event(message) -> bytes:
    return b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n"


INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2024-11-05"}}
INIT_OK = {"jsonrpc": "2.0", "id": 0, "result": {"serverInfo": {"name": "files", "version": "1"}}}
CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "read_note", "arguments": {"n": 1}},
}
CALL_OK = {
    "jsonrpc": "2.0",
    "id": 1,
    "result": {"content": [{"type": "text", "text": "hi"}], "isError": False},
}


@pytest.fixture
def rec(tmp_path):
    harness = Rec(tmp_path)
    yield harness
    harness.shutdown()


def mcp_rows(rec) -> list[dict]:
    return rec.rows("SELECT * FROM mcp_calls ORDER BY id")


@pytest.mark.parametrize("answer_first", [False, True], ids=["post-first", "answer-first"])
def test_answers_on_the_get_stream_complete_their_rows(rec, answer_first):
    stream = get_head()
    rec.open_stream(stream)
    rec.chunk("g1", T0 - 0.5, b"event: endpoint\ndata: /messages/?session_id=42\n\n")
    init = post("p0", INIT)
    if answer_first:  # the server wrote the answer before the proxy saw its 202 end
        rec.chunk("g1", T0 + 0.3, event(INIT_OK))
        rec.close(init)
    else:
        rec.close(init)
        rec.chunk("g1", T0 + 0.3, event(INIT_OK)[:20])
        rec.chunk("g1", T0 + 0.3, event(INIT_OK)[20:])
    rec.close(post("p1", CALL, at=T0 + 1))
    rec.chunk("g1", T0 + 1.5, event(CALL_OK))
    rec.close_stream(stream, T0 + 2)
    init_row, call_row = mcp_rows(rec)
    assert (init_row["server_name"], init_row["response_framing"], init_row["status_code"]) == (
        "files",
        "stream",
        202,
    )
    assert init_row["response_preview"] == json.dumps(INIT_OK["result"], separators=(",", ":"))
    assert init_row["duration_ms"] == 300
    assert (call_row["server_name"], call_row["tool_name"], call_row["is_error"]) == ("files", "read_note", 0)
    assert (call_row["duration_ms"], call_row["decision"]) == (500, "allowed")
    assert call_row["bytes_received"] == len(json.dumps(CALL_OK, separators=(",", ":")))
    (net,) = rec.rows("SELECT response_body_preview FROM net_events WHERE method = 'GET'")
    assert net["response_body_preview"].startswith("event: endpoint")


def test_an_answer_on_another_sessions_stream_is_not_taken(rec):
    rec.open_stream(get_head())
    rec.chunk("g1", T0, b"event: endpoint\ndata: /messages/?session_id=OTHER\n\n")
    rec.close(post("p0", INIT))
    rec.chunk("g1", T0 + 0.3, event(INIT_OK))
    assert mcp_rows(rec) == []  # held while its answer may still come
    rec.recorder.tick(now=T0 + ANSWER_WAIT)  # it did not: written without one
    (row,) = mcp_rows(rec)
    assert (row["response_preview"], row["bytes_received"], row["response_framing"]) == (None, 0, "none")


def test_streamable_http_resumed_stream_answers_by_session_id(rec):
    session = [("mcp-session-id", "s-1")]
    rec.close(post("p0", CALL, headers=session, query=""))
    rec.open_stream(get_head(headers=[*session, ("last-event-id", "ev-3")], path="/mcp"))
    rec.chunk("g1", T0 + 2, b"id: ev-4\n" + event(CALL_OK))
    (row,) = mcp_rows(rec)
    assert row["response_framing"] == "stream" and row["mcp_session"].startswith("hash:")
    assert row["response_preview"] and row["server_name"] == "127.0.0.1:8000/messages"


def test_stateless_batch_and_inline_answers(rec):
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "x", "arguments": {}}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "z"}},
        {"jsonrpc": "2.0", "id": "b", "method": "tools/call", "params": {"name": "y", "arguments": {}}},
    ]
    answers = [
        {"jsonrpc": "2.0", "id": "b", "error": {"code": -32602, "message": "Unknown tool: y"}},
        {"jsonrpc": "2.0", "id": "a", "result": {"content": [], "isError": True, "resultType": "complete"}},
    ]
    fd = post("p0", batch, status=200, answer=json.dumps(answers).encode(), content_type="application/json",
              headers=[("mcp-method", "tools/call")], query="")  # fmt: skip
    rec.close(fd)
    x, note, y = mcp_rows(rec)
    assert (x["tool_name"], x["request_id"], x["is_error"], x["decision"]) == ("x", "a", 1, "allowed")
    assert x["error_message"] == "tool returned isError" and x["response_framing"] == "json"
    assert (note["method"], note["request_id"], note["response_preview"]) == (
        "notifications/cancelled",
        None,
        None,
    )
    assert (y["is_error"], y["decision"], y["error_message"]) == (1, "error", "-32602: Unknown tool: y")
    assert x["mcp_session"] is None and x["protocol_version"] is None


def model_call(rec, key: str, tool_uses: list[tuple[str, dict]], at: float) -> None:
    """A finished Anthropic Messages call whose answer asks for `tool_uses`."""
    content = [
        {"type": "tool_use", "id": f"toolu_{key}{i}", "name": n, "input": a}
        for i, (n, a) in enumerate(tool_uses)
    ]
    answer = json.dumps({"id": "msg_" + key, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                         "content": content, "stop_reason": "tool_use",
                         "usage": {"input_tokens": 10, "output_tokens": 5}}).encode()  # fmt: skip
    body = json.dumps(
        {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "go"}]}
    )
    rec.close(ended(head(key, started=at), resp=response(200, started=at + 0.1), body=answer,
                    request_body=body.encode(), at=at + 0.2, route=Route("anthropic", "anthropic")))  # fmt: skip


def mcp_call(rec, key: str, tool: str, arguments: dict, at: float) -> None:
    message = {
        "jsonrpc": "2.0",
        "id": key,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    answer = json.dumps({"jsonrpc": "2.0", "id": key, "result": {"content": []}}).encode()
    rec.close(post(key, message, at=at, status=200, answer=answer, content_type="application/json",
                   headers=[("mcp-session-id", "s")], query=""))  # fmt: skip


def tool_rows(rec) -> dict[str, dict]:
    return {r["call_id"]: r for r in rec.rows("SELECT * FROM tool_calls")}


def test_a_model_call_links_to_the_mcp_call_that_ran_it(rec):
    model_call(rec, "m1", [("mcp__other__read_note", {"n": 1}), ("mcp__files__read_note", {"n": 1}),
                           ("read_note", {"n": 2}), ("Bash", {"command": "ls"})], T0)  # fmt: skip
    rec.mcp.names["127.0.0.1:8000/messages"] = "files-server"  # as its initialize answer would have said
    mcp_call(rec, "c1", "read_note", {"n": 1}, T0 + 1)  # the server name picks mcp__files__ over mcp__other__
    mcp_call(rec, "c2", "read_note", {"n": 2}, T0 + 2)  # a plain tool name that MCP ran
    mcp_call(rec, "c3", "read_note", {"n": 3}, T0 + 3)  # nobody asked for these arguments
    calls = tool_rows(rec)
    ids = {r["request_id"]: r["id"] for r in mcp_rows(rec)}
    assert (calls["toolu_m11"]["origin"], calls["toolu_m11"]["mcp_call_id"]) == ("mcp", ids["c1"])
    assert (calls["toolu_m10"]["origin"], calls["toolu_m10"]["mcp_call_id"]) == (
        "mcp",
        None,
    )  # named, not run
    assert (calls["toolu_m12"]["origin"], calls["toolu_m12"]["mcp_call_id"]) == ("mcp", ids["c2"])
    assert (calls["toolu_m13"]["origin"], calls["toolu_m13"]["mcp_call_id"]) == ("native", None)


def test_a_link_is_made_whichever_row_comes_first(rec):
    mcp_call(rec, "c1", "search", {"q": "x"}, T0 + 0.5)  # the stream was still open when the agent ran it
    model_call(rec, "m1", [("mcp__web__search", {"q": "x"})], T0)
    (call,) = tool_rows(rec).values()
    assert call["mcp_call_id"] == mcp_rows(rec)[0]["id"]


def test_no_link_before_the_model_asked_or_after_the_window(rec):
    mcp_call(rec, "early", "search", {"q": "x"}, T0 - 5)
    model_call(rec, "m1", [("mcp__web__search", {"q": "x"})], T0)
    mcp_call(rec, "late", "search", {"q": "x"}, T0 + LINK_WINDOW + 1)
    (call,) = tool_rows(rec).values()
    assert (call["origin"], call["mcp_call_id"]) == ("mcp", None)


def test_an_mcp_call_links_once(rec):
    model_call(rec, "m1", [("mcp__web__search", {"q": "x"})], T0)
    model_call(rec, "m2", [("mcp__web__search", {"q": "x"})], T0 + 10)
    mcp_call(rec, "c1", "search", {"q": "x"}, T0 + 11)
    mcp_call(rec, "c2", "search", {"q": "x"}, T0 + 12)
    calls = tool_rows(rec)
    ids = {r["request_id"]: r["id"] for r in mcp_rows(rec)}
    assert (
        calls["toolu_m20"]["mcp_call_id"] == ids["c1"]
    )  # the newest ask wins: an older one may never have been run
    assert calls["toolu_m10"]["mcp_call_id"] == ids["c2"]


def test_a_complete_answer_stands_when_the_connection_breaks_after_it(rec):
    answer = b"event: message\ndata: " + json.dumps(CALL_OK).encode() + b"\n\n"
    rec.close(post("p0", CALL, status=200, content_type="text/event-stream", query="", answer=None,
                   error="Client disconnected.", streamed=True, stream_preview=answer))  # fmt: skip
    rec.close(post("p1", {**CALL, "id": 2}, status=200, content_type="text/event-stream", answer=b"", query="",
                   error="Server disconnected."))  # fmt: skip
    done, broken = mcp_rows(rec)
    assert (done["decision"], done["error_message"], done["is_error"]) == ("allowed", None, 0)
    assert (broken["decision"], broken["error_message"], broken["is_error"]) == (
        "error",
        "Server disconnected.",
        None,
    )


def test_previews_stop_at_256_kib_and_sizes_do_not(rec):
    big = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "é" * 200_000}]}}
    answer = json.dumps(big, ensure_ascii=False).encode()
    rec.close(post("p0", CALL, status=200, answer=answer, content_type="application/json", query=""))
    (row,) = mcp_rows(rec)
    kept, note = row["response_preview"].split("\n[... ")
    assert len(kept.encode()) <= MCP_PREVIEW_BYTES
    assert row["response_preview"].startswith('{"content":[{"type":"text","text":"éé')
    assert len(kept.encode()) > MCP_PREVIEW_BYTES - 4 and note.endswith("more bytes]")
    assert row["bytes_received"] == len(json.dumps(big, separators=(",", ":"), ensure_ascii=False).encode())


def test_a_secret_across_the_preview_cut_goes_whole(rec):
    token = "ghp_" + "k3Yq9ZpLm2Rt7Wx8Nc1Jd6Vb0Hs4Fg5Tu2Ae"
    text = "x" * (MCP_PREVIEW_BYTES - 60) + token + " after"
    answer = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": text}]}})
    rec.close(post("p0", CALL, status=200, answer=answer.encode(), content_type="application/json", query=""))
    (row,) = mcp_rows(rec)
    assert row["response_preview"].endswith("more bytes]") and "ghp_" not in row["response_preview"]


def test_an_answer_kept_past_content_max_bytes_is_cut_clear_of_a_secret(tmp_path):
    limit = 3000
    rec = Rec(tmp_path, dataclasses.replace(defaults().capture, content_max_bytes=limit))
    token = "ghp_" + "k3Yq9ZpLm2Rt7Wx8Nc1Jd6Vb0Hs4Fg5Tu2Ae"
    head_ = '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"'
    answer = (head_ + "x" * (limit - 16 - len(head_)) + token + "y" * 5000 + '"}]}}').encode()
    assert answer.index(b"ghp_") < limit < answer.index(b"ghp_") + len(token)
    rec.close(post("p0", CALL, status=200, answer=answer, content_type="application/json", query=""))
    (row,) = mcp_rows(rec)
    stored, blob = read_body(rec.writer.conn, row["id"], "response", "mcp_calls")
    assert blob["truncated"] == 1 and b"ghp_" not in stored and limit - len(token) < len(stored) <= limit
    rec.shutdown()


def test_answers_from_the_stream_are_scrubbed_like_every_row(rec):
    secret = "sk-ant-api03-" + "Z" * 40
    rec.open_stream(get_head())
    rec.chunk("g1", T0, b"event: endpoint\ndata: /messages/?session_id=42\n\n")
    rec.close(post("p1", CALL))
    leak = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": f"key={secret}"}]}}
    rec.chunk("g1", T0 + 1, event(leak))
    (row,) = mcp_rows(rec)
    assert row["response_framing"] == "stream" and secret not in row["response_preview"]
    assert "redacted" in row["response_preview"]
