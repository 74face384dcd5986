"""MCP through a real mitmdump with the capsem addon: the real `mcp` SDK as client and server
(FastMCP over Streamable HTTP, answering as JSON or as SSE), every mcp_calls column compared with
what the server received and sent, a deny rule that keeps a tool call from ever reaching the
server, and a model's `mcp__server__tool` call linked to the MCP call that executed it."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import anthropic
import httpx
import pytest
import uvicorn
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.shared.exceptions import McpError
from pydantic import AnyUrl

from capsem.redact import hash_value
from tests.cli.conftest import run
from tests.conftest import rows
from tests.e2e.test_capture_sdk import ANTHROPIC_KEY, http_client, model_exchanges
from tests.shared_proxy import SharedProxy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Recording:
    """ASGI wrapper: the exact request and response bodies of every HTTP exchange the server had."""

    def __init__(self, app) -> None:
        self.app = app
        self.exchanges: list[dict] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        entry = {
            "method": scope["method"],
            "path": scope["path"],
            "request": b"",
            "response": b"",
            "status": None,
            "request_headers": {k.decode().lower(): v.decode() for k, v in scope["headers"]},
        }
        self.exchanges.append(entry)

        async def recv():
            message = await receive()
            entry["request"] += message.get("body", b"")
            return message

        async def snd(message):
            if message["type"] == "http.response.start":
                entry["status"] = message["status"]
                entry["headers"] = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
            elif message["type"] == "http.response.body":
                entry["response"] += message.get("body", b"")
            await send(message)

        return await self.app(scope, recv, snd)

    def messages(self) -> list[tuple[dict, list[dict], dict]]:
        """(JSON-RPC message the server received, the JSON-RPC messages it answered with, exchange)."""
        out = []
        for e in self.exchanges:
            if e["method"] != "POST":
                continue
            answer = e["response"].decode()
            if "event-stream" in e.get("headers", {}).get("content-type", ""):
                out.append((json.loads(e["request"]), sse_messages(e["response"]), e))
            else:
                out.append((json.loads(e["request"]), [json.loads(answer)] if answer.strip() else [], e))
        return out


def protocol_versions(recording: Recording) -> set[str]:
    """The MCP-Protocol-Version headers the server received."""
    return {v for e in recording.exchanges if (v := e["request_headers"].get("mcp-protocol-version"))}


def sse_messages(body: bytes) -> list[dict]:
    """The JSON `data:` payloads of an SSE body (`endpoint` events are not JSON: skipped)."""
    datas = [ln[5:].strip() for ln in body.decode().splitlines() if ln.startswith("data:")]
    return [json.loads(d) for d in datas if d.startswith("{")]


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def make_server(json_response: bool, stateless: bool = False) -> FastMCP:
    server = FastMCP(
        "files-server", json_response=json_response, stateless_http=stateless, log_level="WARNING"
    )

    @server.tool()
    def read_note(name: str) -> str:
        """Read a note."""
        return f"note {name}: buy milk"

    @server.tool()
    def flaky(reason: str) -> str:
        """Always fails."""
        raise ToolError(f"flaky failed: {reason}")

    @server.tool()
    def delete_everything() -> str:
        """Dangerous."""
        return "deleted"

    @server.resource("note://{name}")
    def note(name: str) -> str:
        if name == "missing":
            raise ValueError("no such note")
        return "a note"

    return server


@contextmanager
def serve(
    json_response: bool, legacy: bool = False, stateless: bool = False
) -> Iterator[tuple[str, Recording]]:
    """A FastMCP server on loopback: Streamable HTTP at /mcp, or (legacy) HTTP+SSE at /sse."""
    server = make_server(json_response, stateless)
    recording = Recording(server.sse_app() if legacy else server.streamable_http_app())
    with asgi_server(recording) as port:
        yield f"http://127.0.0.1:{port}/{'sse' if legacy else 'mcp'}", recording


@contextmanager
def asgi_server(app) -> Iterator[int]:
    """An ASGI app served by uvicorn on a thread, on a free loopback port (yielded), until the end."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "MCP server did not start"
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


def proxied(proxy, headers=None, timeout=None, auth=None) -> httpx.AsyncClient:
    """An httpx client through mitmdump (also the mcp SDK's `httpx_client_factory`)."""
    return httpx.AsyncClient(proxy=proxy.url, headers=headers, timeout=timeout or httpx.Timeout(30), auth=auth,
                             follow_redirects=True)  # fmt: skip


async def session_calls(url: str, proxy, calls) -> list:
    async with (
        proxied(proxy) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return [await call(session) for call in calls]


def db_of(capsem_home):
    (db,) = capsem_home.glob("sessions/*/session.db")
    return db


FORMS = {"json": (True, False), "sse": (False, False), "stateless": (False, True)}
"""Streamable HTTP answering as JSON or SSE, and a stateless server: (json_response, stateless)."""


@pytest.fixture(scope="module")
def forms(emulator, tmp_path_factory) -> SharedProxy:
    """Each of FORMS's traffic through one mitmdump (no upstream: the MCP server is on loopback),
    then stopped (the session rolled up)."""
    shared = SharedProxy(emulator, tmp_path_factory.mktemp("mcp-forms"), upstream=False)
    try:
        for name, (json_response, stateless) in FORMS.items():
            shared.run(name, lambda p, j=json_response, st=stateless: forms_traffic(p, j, st),
                       flows=lambda result: len(result[1].exchanges))  # fmt: skip
    finally:
        shared.stop()
    return shared


def forms_traffic(proxy, json_response: bool, stateless: bool) -> tuple[str, Recording, list]:
    """Two client sessions: tools listed and two called, then a resource read that fails; (the
    server's URL, what it saw, the answers of the first session)."""
    with serve(json_response, stateless=stateless) as (url, recording):
        answers = asyncio.run(session_calls(url, proxy, [
            lambda s: s.list_tools(),
            lambda s: s.call_tool("read_note", {"name": "groceries"}),
            lambda s: s.call_tool("flaky", {"reason": "disk full"}),
        ]))  # fmt: skip

        async def protocol_error():
            async with (
                proxied(proxy) as http,
                streamable_http_client(url, http_client=http) as (read, write, _),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                with pytest.raises(McpError):
                    await session.read_resource(AnyUrl("note://missing"))

        asyncio.run(protocol_error())
    return url, recording, answers


@pytest.mark.parametrize("form", FORMS)
def test_mcp_calls_match_what_the_server_saw(forms, monkeypatch, form):
    """Session-based Streamable HTTP answering as JSON or SSE, and a stateless server (no Mcp-Session-Id)."""
    json_response, stateless = FORMS[form]
    s = forms.scenario(form)
    url, recording, (listed, ok, failed) = s.result
    monkeypatch.setenv("CAPSEM_HOME", str(forms.home))  # its hash key; the CLI reads its session
    assert {t.name for t in listed.tools} == {"read_note", "flaky", "delete_everything"}
    assert ok.isError is False and failed.isError is True
    db = forms.db
    got = rows(db, f"SELECT * FROM mcp_calls WHERE net_event_id IN ({s.ids()}) ORDER BY id")
    seen = recording.messages()
    nets = {n["id"]: n for n in rows(db, f"SELECT * FROM net_events WHERE id IN ({s.ids()})")}
    assert len(got) == len(seen) == 8  # 2x (initialize, initialized) + list + 2 calls + read
    port = urlsplit(url).port
    session_ids = {}  # the Mcp-Session-Id each client session got from the server and echoed
    for row, (request, answers, exchange) in zip(got, seen, strict=True):
        (answer,) = answers or [None]
        sent = exchange["request_headers"]
        session_id = sent.get("mcp-session-id") or exchange["headers"].get("mcp-session-id")
        session_ids.setdefault(session_id, []).append(row["id"])
        net = nets[row["net_event_id"]]
        params = request.get("params")
        assert row["method"] == request["method"]
        assert row["tool_name"] == (params.get("name") or params.get("uri") if request["method"] in (
            "tools/call", "resources/read") else None)  # fmt: skip
        assert row["request_id"] == (json.dumps(request["id"]) if "id" in request else None)
        assert row["request_preview"] == (compact(params) if params is not None else None)
        assert row["bytes_sent"] == len(compact(request).encode())
        assert (row["timestamp"], row["flow_id"], row["status_code"]) == (
            net["timestamp"], net["flow_id"], exchange["status"])  # fmt: skip
        assert (row["endpoint"], row["matched_rule"]) == (f"127.0.0.1:{port}/mcp", None)
        assert row["protocol_version"] == sent.get("mcp-protocol-version")
        assert row["mcp_session"] == (hash_value(session_id) if session_id else None)
        # process lookup is best effort (a short connection may close first): as on its net_events row
        assert (row["process_name"], row["pid"]) == (net["process_name"], net["pid"])
        assert 0 <= row["duration_ms"] <= net["duration_ms"]
        if answer is None:  # a notification: 202, no answer
            assert exchange["status"] == 202
            assert (row["response_preview"], row["bytes_received"], row["is_error"], row["error_message"]) == (
                None, 0, None, None)  # fmt: skip
            assert (row["decision"], row["response_framing"]) == ("allowed", "none")
            continue
        body = answer.get("result", answer.get("error"))
        assert row["response_preview"] == compact(body)
        assert row["bytes_received"] == len(compact(answer).encode())
        assert row["server_name"] == "files-server"  # also initialize's row: its answer names the server
        assert row["response_framing"] == ("json" if json_response else "sse")
        assert row["is_error"] == int("error" in answer or answer["result"].get("isError") is True)
        assert row["decision"] == ("error" if "error" in answer else "allowed")
        if "error" in answer:
            assert row["error_message"] == f"{answer['error']['code']}: {answer['error']['message']}"
        elif answer["result"].get("isError"):
            assert row["error_message"] == answer["result"]["content"][0]["text"]
        else:
            assert row["error_message"] is None
    assert list(session_ids) == [None] if stateless else len(session_ids) == 2 and None not in session_ids
    assert protocol_versions(recording) <= {r["protocol_version"] for r in got}
    assert any(r["process_name"] for r in got)
    by_method = {}
    for row in got:
        by_method.setdefault(row["method"], []).append(row)
    calls = {r["tool_name"]: r for r in by_method["tools/call"]}
    assert calls["read_note"]["decision"] == "allowed" and calls["read_note"]["is_error"] == 0
    assert calls["flaky"]["decision"] == "allowed" and calls["flaky"]["is_error"] == 1
    assert "flaky failed: disk full" in calls["flaky"]["error_message"]
    (read,) = by_method["resources/read"]
    assert read["decision"] == "error" and read["error_message"] and read["tool_name"] == "note://missing"
    assert all(r["protocol_version"] for r in by_method["tools/call"])

    # the rollup and inspect-session report MCP usage per server and tool (of the session: every
    # form made the same calls)
    (session,) = json.loads(run("list-sessions", "--json"))
    assert session["total_mcp_calls"] == len(got) * len(FORMS)
    inspected = run("inspect-session", session["id"])
    assert "files-server" in inspected and "read_note" in inspected and "flaky" in inspected
    usage = {(u["server_name"], u["tool_name"], u["decision"]): u["calls"]
             for u in json.loads(run("inspect-session", session["id"], "--json"))["mcp"]}  # fmt: skip
    assert usage == {key: n * len(FORMS) for key, n in {
        ("files-server", "initialize", "allowed"): 2,
        ("files-server", "notifications/initialized", "allowed"): 2,
        ("files-server", "tools/list", "allowed"): 1,
        ("files-server", "read_note", "allowed"): 1,
        ("files-server", "flaky", "allowed"): 1,  # the tool failed; the call was allowed
        ("files-server", "note://missing", "error"): 1,
    }.items()}  # fmt: skip


def test_http_sse_transport_answers_arrive_on_the_get_stream(mitmdump, capsem_home):
    """The 2024-11-05 transport: every POST gets 202 and its answer comes on the GET stream."""
    proxy = mitmdump()
    with serve(json_response=False, legacy=True) as (url, recording):

        async def calls():
            async with (
                sse_client(url, httpx_client_factory=lambda **kw: proxied(proxy, **kw)) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return [await session.list_tools(), await session.call_tool("read_note", {"name": "a"}),
                        await session.call_tool("flaky", {"reason": "b"})]  # fmt: skip

        listed, ok, failed = asyncio.run(calls())
    assert len(listed.tools) == 3 and ok.isError is False and failed.isError is True
    assert proxy.stop() == 0
    got = rows(db_of(capsem_home), "SELECT * FROM mcp_calls ORDER BY id")
    posts = [(json.loads(e["request"]), e["status"]) for e in recording.exchanges if e["method"] == "POST"]
    (stream,) = [e for e in recording.exchanges if e["method"] == "GET"]
    answers = {m["id"]: m for m in sse_messages(stream["response"]) if "id" in m and "method" not in m}
    assert len(got) == len(posts) == 5
    for row, (request, status) in zip(got, posts, strict=True):
        assert (row["method"], row["status_code"], row["server_name"]) == (
            request["method"],
            status,
            "files-server",
        )
        assert row["bytes_sent"] == len(compact(request).encode())
        if "id" not in request:
            assert (row["response_preview"], row["bytes_received"], row["response_framing"]) == (
                None,
                0,
                "none",
            )
            continue
        answer = answers[request["id"]]
        assert row["request_id"] == json.dumps(request["id"])
        assert row["response_preview"] == compact(answer.get("result", answer.get("error")))
        assert row["bytes_received"] == len(compact(answer).encode())
        assert row["response_framing"] == "stream" and row["decision"] == "allowed"
    calls = {r["tool_name"]: r for r in got if r["method"] == "tools/call"}
    assert (calls["read_note"]["is_error"], calls["flaky"]["is_error"]) == (0, 1)
    assert "flaky failed: b" in calls["flaky"]["error_message"]
    (net,) = rows(db_of(capsem_home), "SELECT response_body_preview FROM net_events WHERE method = 'GET'")
    assert net["response_body_preview"].startswith("event: endpoint")


def test_a_denied_tool_never_reaches_the_server(mitmdump, capsem_home):
    capsem_home.mkdir(parents=True, exist_ok=True)
    (capsem_home / "config.yaml").write_text(
        "policy:\n  rules:\n    - name: no-deletes\n      action: deny\n      mcp_tool: 'delete_*'\n"
        "    - name: watch-notes\n      action: warn\n      mcp_server: files-server\n      mcp_tool: read_note\n"
    )
    proxy = mitmdump()
    with serve(json_response=True) as (url, recording):
        (ok,) = asyncio.run(session_calls(url, proxy, [lambda s: s.call_tool("read_note", {"name": "x"})]))
        with pytest.raises(BaseExceptionGroup) as denied:  # the SDK fails the session on an HTTP 403
            asyncio.run(session_calls(url, proxy, [lambda s: s.call_tool("delete_everything", {})]))
    assert ok.isError is False
    (error,) = denied.value.exceptions
    assert isinstance(error, httpx.HTTPStatusError) and error.response.status_code == 403
    received = [json.loads(e["request"]) for e in recording.exchanges if e["method"] == "POST"]
    assert [m.get("params", {}).get("name") for m in received if m.get("method") == "tools/call"] == [
        "read_note"
    ]
    assert proxy.stop() == 0
    db = db_of(capsem_home)
    calls = {r["tool_name"]: r for r in rows(db, "SELECT * FROM mcp_calls WHERE method = 'tools/call'")}
    assert (calls["delete_everything"]["decision"], calls["delete_everything"]["matched_rule"]) == (
        "denied",
        "no-deletes",
    )
    assert (
        calls["delete_everything"]["status_code"] == 403
        and "no-deletes" in calls["delete_everything"]["error_message"]
    )
    assert (calls["read_note"]["decision"], calls["read_note"]["matched_rule"]) == ("warned", "watch-notes")
    nets = rows(
        db, "SELECT decision, matched_rule, status_code FROM net_events WHERE matched_rule IS NOT NULL"
    )
    assert {(n["decision"], n["matched_rule"], n["status_code"]) for n in nets} == {
        ("denied", "no-deletes", 403), ("warned", "watch-notes", 200)}  # fmt: skip
    assert "policy rule watch-notes warns" in proxy.log()


def test_a_model_tool_call_links_to_the_mcp_call_that_ran_it(mitmdump, emu, capsem_home):
    proxy = mitmdump()
    tools = [{"name": "mcp__files__read_note", "description": "Read a note (MCP)",
              "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
             {"name": "Bash", "description": "run", "input_schema": {"type": "object", "properties": {
                 "command": {"type": "string"}}, "required": ["command"]}}]  # fmt: skip
    client = anthropic.Anthropic(api_key=ANTHROPIC_KEY, base_url=emu.http_url, http_client=http_client(proxy),
                                 max_retries=0, default_headers={"x-emulator": "tools=2"})  # fmt: skip
    msg = client.messages.create(model="claude-sonnet-4-5", max_tokens=200, tools=tools,
                                 messages=[{"role": "user", "content": "read my note"}])  # fmt: skip
    uses = {b.name: b for b in msg.content if b.type == "tool_use"}
    mcp_use = uses["mcp__files__read_note"]
    with serve(json_response=False) as (url, _):
        (result,) = asyncio.run(
            session_calls(url, proxy, [lambda s: s.call_tool("read_note", dict(mcp_use.input))])
        )
    assert result.isError is False
    assert proxy.stop() == 0
    db = db_of(capsem_home)
    calls = {r["tool_name"]: r for r in rows(db, "SELECT * FROM tool_calls")}
    (mcp_row,) = rows(db, "SELECT id, tool_name, server_name FROM mcp_calls WHERE method = 'tools/call'")
    assert calls["mcp__files__read_note"]["origin"] == "mcp"
    assert calls["mcp__files__read_note"]["mcp_call_id"] == mcp_row["id"]
    mcp_tool = calls["mcp__files__read_note"]
    assert mcp_tool["server_name"] == mcp_row["server_name"]  # set by the MCP call's insert
    assert {(c["decision"], c["transport"], c["status"]) for c in calls.values()} == {
        ("allowed", "http", "observed")
    }
    assert (calls["Bash"]["origin"], calls["Bash"]["mcp_call_id"]) == ("native", None)
    assert len(model_exchanges(emu)) == 1
