"""`capsem export har`: a session's flows as HAR 1.2, for browser devtools and HAR viewers.

One entry per `net_events` row, in order. Headers are as stored (allowlisted values verbatim,
the others as `hash:…`). A model or MCP call's bodies are its whole decoded bodies from
`event_body_blobs` (scrubbed spans replaced) where they were kept, the stored previews otherwise;
each body's `comment` says which. A WebSocket's turns (Codex's `response.create` and the events
that answered it) are Chrome's `_webSocketMessages`. capsem's own fields are `_capsem`.
"""

from __future__ import annotations

import base64
import json
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any
from urllib.parse import parse_qsl

from assembler.export.select import has_table
from capsem import __version__
from capsem.store.bodies import read_body

_SPACE = re.compile(r"\s*")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


@dataclass(frozen=True)
class Body:
    """A body to export: its text (or base64 of bytes), and where it came from."""

    data: bytes
    comment: str
    mime: str | None = None
    whole: bool = False
    """The whole decoded body (its length is the content's size), not a preview."""


@dataclass(frozen=True)
class Flow:
    """Everything one HAR entry is made of: the `net_events` row, its bodies, its WebSocket messages."""

    net: dict[str, Any]
    request: Body | None
    response: Body | None
    ws_messages: tuple[dict[str, Any], ...] = ()


def headers(stored: str | None) -> list[dict[str, str]]:
    """A stored header object (`{"name": value or [values]}`) as HAR name/value pairs."""
    try:
        obj = json.loads(stored) if stored else {}
    except ValueError:
        return []
    out: list[dict[str, str]] = []
    for name, value in obj.items() if isinstance(obj, dict) else ():
        for one in value if isinstance(value, list) else [value]:
            out.append({"name": str(name), "value": "" if one is None else str(one)})
    return out


def url(net: dict[str, Any]) -> str:
    scheme = net.get("conn_type") or "https"
    port = net.get("port")
    host = net["domain"] if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{net['domain']}:{port}"
    path = net.get("path") or "/"
    return f"{scheme}://{host}{path}" + (f"?{net['query']}" if net.get("query") else "")


def _text(body: Body) -> dict[str, Any]:
    """`text` (and `encoding: base64` when the bytes are not UTF-8) and the body's comment."""
    try:
        out: dict[str, Any] = {"text": body.data.decode("utf-8")}
    except UnicodeDecodeError:
        out = {"text": base64.b64encode(body.data).decode("ascii"), "encoding": "base64"}
    out["comment"] = body.comment
    return out


def _mime(net: dict[str, Any], side: str, body: Body | None) -> str:
    return (
        (body.mime if body and body.mime else None)
        or net.get(f"{side}_content_type")
        or "application/octet-stream"
    )


def _timings(net: dict[str, Any]) -> dict[str, int]:
    total = max(0, net.get("duration_ms") or 0)
    wait = min(total, max(0, net.get("ttfb_ms") or 0)) if net.get("ttfb_ms") is not None else total
    return {"send": 0, "wait": wait, "receive": total - wait}


def entry(flow: Flow) -> dict[str, Any]:
    """The HAR entry of one flow."""
    net = flow.net
    request: dict[str, Any] = {
        "method": net.get("method") or "GET", "url": url(net), "httpVersion": net.get("http_version") or "HTTP/1.1",
        "cookies": [], "headers": headers(net.get("request_headers")),
        "queryString": [{"name": k, "value": v} for k, v in parse_qsl(net.get("query") or "", keep_blank_values=True)],
        "headersSize": -1, "bodySize": net.get("bytes_sent") or 0,
    }  # fmt: skip
    if flow.request is not None:
        request["postData"] = {"mimeType": _mime(net, "request", flow.request), **_text(flow.request)}
    content: dict[str, Any] = {
        "size": net.get("bytes_received") or 0,
        "mimeType": _mime(net, "response", flow.response),
    }
    if flow.response is not None:
        content |= _text(flow.response)
        if flow.response.whole:
            content["size"] = len(flow.response.data)
    out: dict[str, Any] = {
        "startedDateTime": net["timestamp"], "time": max(0, net.get("duration_ms") or 0), "request": request,
        "response": {
            "status": net.get("status_code") or 0, "statusText": "", "httpVersion": net.get("http_version") or "HTTP/1.1",
            "cookies": [], "headers": headers(net.get("response_headers")), "content": content, "redirectURL": "",
            "headersSize": -1, "bodySize": net.get("bytes_received") or 0,
        },
        "cache": {}, "timings": _timings(net),
        "_capsem": {k: net.get(k) for k in ("id", "event_id", "trace_id", "decision", "matched_rule", "provider",
                                             "process_name", "pid", "error", "decode_error", "streamed")},
    }  # fmt: skip
    if net.get("error"):
        out["comment"] = f"error: {net['error']}"
    out["_resourceType"] = (
        "websocket" if flow.ws_messages or net.get("conn_type") in ("ws", "wss") else "fetch"
    )
    if flow.ws_messages:
        out["_webSocketMessages"] = list(flow.ws_messages)
    return out


def write(out: IO[str], session_id: str, entries: Iterable[dict[str, Any]]) -> int:
    """The HAR document of `entries` written to `out` one entry at a time; how many were written."""
    head = {"version": "1.2", "creator": {"name": "capsem", "version": __version__},
            "comment": f"capsem session {session_id}"}  # fmt: skip
    out.write('{"log": ' + json.dumps(head, ensure_ascii=False)[:-1] + ', "entries": [')
    n = 0
    for n, one in enumerate(entries, 1):
        out.write(("," if n > 1 else "") + "\n" + json.dumps(one, ensure_ascii=False))
    out.write("\n]}}\n")
    return n


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def ws_messages(turns: list[tuple[dict[str, Any], Body | None, Body | None]]) -> tuple[dict[str, Any], ...]:
    """Chrome's `_webSocketMessages` of a socket's turns (each a model call with its two bodies):
    the client's message, then the server's messages that answered it. Only
    each turn's start and end are recorded: received messages carry the turn's end time."""
    out: list[dict[str, Any]] = []
    for call, sent, received in turns:
        start = _epoch(call["timestamp"])
        end = start + (call.get("duration_ms") or 0) / 1000
        request = sent.data if sent else (call.get("request_body_preview") or "").encode()
        out.append({"type": "send", "time": start, "opcode": 1, "data": request.decode("utf-8", "replace")})
        for message in split_messages(received.data if received else b""):
            out.append({"type": "receive", "time": end, "opcode": 1, "data": message})
    return tuple(out)


def split_messages(data: bytes) -> list[str]:
    """A turn's answer (the server's JSON messages as stored, one a line) back into its
    messages; what does not parse is one last message."""
    text, decoder, at, out = data.decode("utf-8", "replace"), json.JSONDecoder(), 0, []
    while (at := _SPACE.match(text, at).end()) < len(text):  # type: ignore[union-attr]
        try:
            _, end = decoder.raw_decode(text, at)
        except ValueError:
            out.append(text[at:])
            break
        out.append(text[at:end])
        at = end
    return out


# -- reading a session ------------------------------------------------------------------------------


_NOT_KEPT = "whole bodies are kept for model and MCP calls only"


def _stored(conn: sqlite3.Connection, table: str, row_id: int, direction: str) -> tuple[Body | None, str]:
    """A call's kept body, or None and why a preview stands in for it."""
    if not has_table(conn, "event_body_blobs"):
        return None, "recorded before whole bodies were kept"
    try:
        found = read_body(conn, row_id, direction, table)
    except (ValueError, sqlite3.OperationalError) as exc:  # pieces missing; bodies stored by another version
        return None, f"the whole body cannot be read: {exc}"
    if found is None:
        return None, _NOT_KEPT
    data, blob = found
    note = "whole decoded body as recorded (secrets replaced)"
    if blob["truncated"]:
        note = f"decoded body, cut at {len(data):,} bytes (capture.max_body_bytes; secrets replaced)"
    return Body(data, note, blob["content_type"], whole=True), ""


def _preview(text: str | None, size: int | None, why: str) -> Body | None:
    if text is None:
        return None
    data = text.encode("utf-8", "surrogateescape")
    return Body(data, f"preview: the first {len(data):,} of {size or 0:,} bytes ({why}; secrets replaced)")


def flows(conn: sqlite3.Connection) -> Iterator[Flow]:
    """The session's flows, in order, each with the best bodies stored for it."""
    calls: dict[int, list[tuple[str, int]]] = {}
    for table in ("model_calls", "mcp_calls"):
        sql = f"SELECT id, net_event_id FROM {table} WHERE net_event_id IS NOT NULL ORDER BY id"
        for row_id, net_id in conn.execute(sql):
            calls.setdefault(net_id, []).append((table, row_id))
    for row in conn.execute("SELECT * FROM net_events ORDER BY id"):
        net = dict(row)
        owned = calls.get(net["id"], [])
        if net.get("conn_type") in ("ws", "wss"):
            turns = []
            for table, row_id in owned:
                if table == "model_calls":
                    call = dict(conn.execute("SELECT * FROM model_calls WHERE id = ?", (row_id,)).fetchone())
                    sent, received = (_stored(conn, table, row_id, d)[0] for d in ("request", "response"))
                    turns.append((call, sent, received))
            yield Flow(net, None, None, ws_messages(turns))
            continue
        (request, why_request), (response, why_response) = (None, _NOT_KEPT), (None, _NOT_KEPT)
        if owned:
            table, row_id = owned[0]
            request, why_request = _stored(conn, table, row_id, "request")
            if len(owned) == 1:
                response, why_response = _stored(conn, table, row_id, "response")
            else:
                why_response = f"the flow carried {len(owned)} calls"
        request = request or _preview(net.get("request_body_preview"), net.get("bytes_sent"), why_request)
        response = response or _preview(
            net.get("response_body_preview"), net.get("bytes_received"), why_response
        )
        yield Flow(net, request, response)


def session_entries(
    conn: sqlite3.Connection, on_entry: Callable[[int, int], None] | None = None
) -> Iterator[dict]:
    """The session's HAR entries; `on_entry(done, total)` is called as they are built."""
    total = conn.execute("SELECT COUNT(*) FROM net_events").fetchone()[0]
    for done, flow in enumerate(flows(conn), 1):
        yield entry(flow)
        if on_entry:
            on_entry(done, total)
