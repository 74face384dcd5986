"""The emulator's HTTP/1.1 server, written on asyncio streams for byte-exact control.

One port serves plain HTTP and also acts as an upstream proxy: `CONNECT host:443` is
answered, then the connection is upgraded to TLS with a certificate for that host; absolute
request targets (`POST http://api.openai.com/...`) are accepted. A second port serves HTTPS.
Streamed replies are written event by event (encoded, then split into `chunk=N` writes,
drained, paced by `delay_ms`), so a client sees each event when it is sent.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from capsem.emulator import (
    anthropic,
    bedrock,
    gemini,
    housekeeping,
    ollama,
    openai_chat,
    openai_responses,
    websocket,
)
from capsem.emulator.encoding import Encoder, decode_request, header_value
from capsem.emulator.reply import Reply, Request, json_reply, parse_controls
from capsem.emulator.tls import CertificateAuthority

Handler = Callable[[Request], Reply]
# (method, path pattern, handler): the first full match wins. Add one line per API.
ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [
    ("POST", re.compile(r"(?:/[\w.-]+)*/v1/messages"), anthropic.handle),
    ("POST", re.compile(r"(?:/[\w.-]+)*/chat/completions"), openai_chat.handle),
    ("POST", re.compile(r"(?:/[\w.-]+)*/v1/responses"), openai_responses.handle),
    (
        "POST",
        re.compile(r"(?:/[\w.-]+)*/models/(?P<model>[^/:]+):(?:stream)?[gG]enerateContent"),
        gemini.handle,
    ),
    ("POST", re.compile(r"/v1internal:(?:stream)?[gG]enerateContent"), gemini.handle),
    ("POST", re.compile(r"/api/(?:chat|generate)"), ollama.handle),
    # a company gateway on paths no provider uses (for body-shape detection)
    ("POST", re.compile(r"/gateway/anthropic"), anthropic.handle),
    ("POST", re.compile(r"/gateway/openai"), openai_chat.handle),
    # Anthropic on Bedrock (InvokeModel, eventstream when streamed) and on Vertex AI
    ("POST", re.compile(r"/model/(?P<model>[^/]+)/invoke(?:-with-response-stream)?"), bedrock.handle),
    (
        "POST",
        re.compile(r"(?:/[\w.-]+)*/publishers/anthropic/models/(?P<model>[^/:]+):(?:streamR|r)awPredict"),
        bedrock.handle_vertex,
    ),
]
_MAX_BODY = 64 * 1024 * 1024
log = logging.getLogger("capsem.emulator")


@dataclass
class Incoming:
    """One request as read from the connection."""

    method: str
    target: str
    headers: dict[str, str]
    """Lower-cased names (the last of a repeated header wins)."""
    head: bytes
    """The request line and header lines exactly as received, up to the blank line."""
    body: bytes
    """The body as received (chunked transfer framing removed, Content-Encoding not undone)."""


class Server:
    def __init__(self, defaults: dict[str, str] | None = None) -> None:
        self.defaults = {k: str(v) for k, v in (defaults or {}).items()}
        self.ca = CertificateAuthority()
        self.exchanges: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._ids = itertools.count(1)

    # -- connection loop ----------------------------------------------------------------------

    async def handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, scheme: str = "http"
    ) -> None:
        tunnel_host: str | None = None
        try:
            while True:
                request = await self._read_request(reader, writer)
                if request is None:
                    return
                if request.method == "CONNECT":
                    tunnel_host = request.target.rsplit(":", 1)[0].strip("[]")
                    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    await writer.drain()
                    # the leaf follows the SNI the client sends (the CONNECT host when it sends none)
                    await writer.start_tls(self.ca.context(tunnel_host))
                    scheme = "https"
                    continue
                # Responses over WebSocket (Codex CLI)
                if websocket.is_upgrade(request.headers, request.target):
                    host = tunnel_host or request.headers.get("host", "").rsplit(":", 1)[0]
                    return await self.websocket(reader, writer, scheme, host, request)
                keep = await self._respond(writer, scheme, tunnel_host, request)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, OSError, asyncio.CancelledError):
            return  # client gone, or the emulator is stopping
        except (ValueError, asyncio.LimitOverrunError):
            return  # not HTTP we can read (bad chunk size, huge head): drop the connection
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def websocket(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, scheme: str, host: str,
                        request: Incoming) -> None:  # fmt: skip
        """Serve an upgraded Responses WebSocket (`capsem replay` serves its own)."""
        await websocket.serve(self, reader, writer, scheme, host, request.target, request.headers)

    async def _read_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Incoming | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, _version = lines[0].split(" ", 2)
        except ValueError:
            return None  # not HTTP: drop the connection
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = b""
        if headers.get("expect", "").lower() == "100-continue":  # curl, for larger bodies
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            body = b"".join(parts)
        elif "content-length" in headers:
            body = await reader.readexactly(min(int(headers["content-length"]), _MAX_BODY))
        return Incoming(method, target, headers, head[:-2], body)

    # -- one exchange ---------------------------------------------------------------------------

    async def _respond(self, writer, scheme, tunnel_host, request: Incoming) -> bool:
        method, target, headers = request.method, request.target, request.headers
        if target.startswith(("http://", "https://")):
            parts = urlsplit(target)
            scheme, host, path, query = parts.scheme, parts.hostname or "", parts.path, parts.query
        else:
            path, _, query = target.partition("?")
            host = tunnel_host or headers.get("host", "").rsplit(":", 1)[0]
        if path.startswith("/_emulator/"):
            return await self._admin(writer, method, path)
        controls = parse_controls(headers.get("x-emulator"), self.defaults)
        decoded: bytes | None = None
        try:
            decoded = decode_request(request.body, headers.get("content-encoding"))
            encoding = controls.get("encoding", "identity")
            if encoding == "auto":
                offered = [e.split(";")[0].strip() for e in headers.get("accept-encoding", "").split(",")]
                encoding = next((e for e in offered if e in ("gzip", "br", "zstd", "deflate")), "identity")
            Encoder(encoding)  # reject unknown encodings before anything is sent
            for key in ("chunk", "delay_ms", "truncate", "tools", "status", "cache_read", "cache_write"):
                int(controls.get(key, 0))
            reply = self._route(method, host, path, query, headers, decoded, controls)
        except Exception as exc:  # a bad control or a handler bug: say so instead of hanging the client
            log.exception("emulator could not answer %s %s", method, path)
            encoding, controls = "identity", {}
            reply = json_reply(400 if isinstance(exc, ValueError) else 500,
                               {"error": {"type": "emulator_error", "message": f"{type(exc).__name__}: {exc}"}})  # fmt: skip
        # log before writing: a client may act on the last byte before this coroutine resumes
        wire = _prepare(reply, encoding, controls)
        entry = self._log(scheme, host, method, path, query, headers, request.body, decoded, reply, wire.body,
                          wire.whole and reply.complete, head=wire.headers, request_head=request.head,
                          sent_decoded=_identity(reply) if wire.whole else None)  # fmt: skip
        sent = bytearray()
        try:
            await _send(writer, wire, sent)
        except BaseException:
            with self.lock:  # the client went away: record what actually left
                entry.update(complete=False, response_body_b64=_b64(sent), response_body_decoded_b64=None)
            raise
        return entry["complete"] and headers.get("connection", "").lower() != "close"

    def _route(self, method, host, path, query, headers, body: bytes, controls: dict[str, str]) -> Reply:
        if method == "GET" and path == "/v1/models":
            return _models(headers)
        try:
            req = json.loads(body) if body else {}
        except ValueError:
            req = None
        if path == "/v1/messages/count_tokens" and method == "POST" and isinstance(req, dict):
            return json_reply(200, {"input_tokens": anthropic.count_tokens(req)})
        for route_method, pattern, handler in ROUTES:
            match = pattern.fullmatch(path)
            if match and method == route_method:
                if not isinstance(req, dict):
                    return json_reply(
                        400, {"error": {"type": "invalid_request_error", "message": "body is not JSON"}}
                    )
                return handler(Request(method, host, path, query, headers, body, req, controls, match))
        found = housekeeping.answer(method, host, path, headers.get("content-type", ""))
        if found is None:
            found = housekeeping.not_emulated(method, host, path)
        return found or json_reply(
            404, {"error": {"type": "not_found_error", "message": f"no route {method} {path}"}}
        )

    async def _admin(self, writer, method: str, path: str) -> bool:
        if path == "/_emulator/exchanges" and method == "DELETE":
            with self.lock:
                self.exchanges.clear()
            reply = json_reply(200, {"cleared": True})
        elif path == "/_emulator/exchanges":
            with self.lock:
                reply = json_reply(200, list(self.exchanges))
        elif path == "/_emulator/health":
            reply = json_reply(200, {"ok": True})
        else:
            reply = json_reply(
                404, {"error": {"type": "not_found_error", "message": f"no admin route {path}"}}
            )
        await _send(writer, _prepare(reply, "identity", {}), bytearray())
        return True

    def _log(self, scheme, host, method, path, query, headers, received: bytes, decoded: bytes | None,
             reply: Reply, sent: bytes, complete, head: list[tuple[str, str]] | None = None,
             request_head: bytes | None = None, sent_decoded: bytes | None = None) -> dict[str, Any]:  # fmt: skip
        """Append one exchange to the log and return its (live) entry.

        Bytes are kept exactly, base64-encoded: the request head and body as received
        (`request_head_b64`, `request_body_b64`: still content-encoded) and decoded
        (`request_body_decoded_b64`, None if it did not decode; `request_body` is its text), the
        response body as sent (`response_body_b64`: encoded, every streamed chunk concatenated,
        what left before a cut) and as the client should decode it (`response_body_decoded_b64`:
        the reply before Content-Encoding; None when the body was cut short)."""
        entry = {
            "id": next(self._ids), "time": time.time(), "scheme": scheme, "host": host, "method": method,
            "path": path, "query": query, "request_headers": headers,
            "request_head_b64": _b64(request_head), "request_body_b64": _b64(received),
            "request_body_decoded_b64": _b64(decoded),
            "request_body": (received if decoded is None else decoded).decode("utf-8", "replace"),
            "status": reply.status, "response_headers": [list(h) for h in (reply.headers if head is None else head)],
            "response_body_b64": _b64(sent), "response_body_decoded_b64": _b64(sent_decoded),
            "stream": reply.events is not None, "complete": complete, "expected": reply.expected,
        }  # fmt: skip
        with self.lock:
            self.exchanges.append(entry)
        return entry


@dataclass
class Wire:
    """A reply as it goes on the wire: head, body parts (encoded, split, truncated), pacing."""

    status_line: str
    headers: list[tuple[str, str]]
    parts: list[bytes]
    streamed: bool
    whole: bool
    """False when `truncate` cuts the body."""
    delay: float

    @property
    def body(self) -> bytes:
        return b"".join(self.parts)


def _prepare(reply: Reply, encoding: str, controls: dict[str, str]) -> Wire:
    lie = controls.get("lie_encoding")
    encoder = Encoder("identity" if lie else encoding)
    chunk = int(controls.get("chunk", 0)) or None
    truncate = int(controls["truncate"]) if "truncate" in controls else None
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
    own = [("server", "capsem-emulator")] if not any(k.lower() == "server" for k, _ in reply.headers) else []
    head = [("date", date), *own, *reply.headers]
    content_encoding = lie or header_value(encoding)
    if content_encoding:
        head.append(("content-encoding", content_encoding))
    streamed = reply.events is not None
    if streamed:
        pieces = [encoder.step(e) for e in reply.events or []] + [encoder.end()]
        head.append(("transfer-encoding", "chunked"))
    else:
        pieces = [encoder.whole(reply.body or b"")]
        if reply.status != 204:  # RFC 9110: no Content-Length on a 204
            head.append(("content-length", str(len(pieces[0]))))
    parts = [part for piece in pieces for part in _split(piece, chunk)]
    whole = True
    if truncate is not None and sum(map(len, parts)) > truncate:
        kept, size = [], 0
        for part in parts:
            kept.append(part[: truncate - size])
            size += len(kept[-1])
            if size >= truncate:
                break
        parts, whole = kept, False
    status_line = f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'OK')}"
    return Wire(status_line, head, parts, streamed, whole, int(controls.get("delay_ms", 0)) / 1000)


async def _send(writer: asyncio.StreamWriter, wire: Wire, sent: bytearray) -> None:
    """Write head and body part by part (each drained, paced by `delay_ms`); `sent` collects the
    body bytes as they go. A truncated body ends with an abort: no final chunk, no terminator."""
    head = wire.status_line + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in wire.headers) + "\r\n"
    writer.write(head.encode("utf-8"))
    await writer.drain()
    for n, part in enumerate(wire.parts):
        cut = not wire.whole and n == len(wire.parts) - 1
        if wire.streamed and part:
            writer.write(f"{len(part):x}\r\n".encode() + part + (b"" if cut else b"\r\n"))
        else:
            writer.write(part)
        sent += part
        await writer.drain()
        if wire.delay and not cut:
            await asyncio.sleep(wire.delay)
    if not wire.whole:
        writer.transport.abort()
        return
    if wire.streamed:
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def _identity(reply: Reply) -> bytes:
    """The reply body before Content-Encoding (streamed events concatenated)."""
    return b"".join(reply.events) if reply.events is not None else reply.body or b""


def _b64(data: bytes | bytearray | None) -> str | None:
    return None if data is None else base64.b64encode(bytes(data)).decode()


def _split(data: bytes, size: int | None) -> list[bytes]:
    if not data:
        return []
    if not size:
        return [data]
    return [data[i : i + size] for i in range(0, len(data), size)]


_REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            429: "Too Many Requests", 500: "Internal Server Error", 529: "Overloaded"}  # fmt: skip


_ANTHROPIC_MODELS = {"claude-sonnet-4-5-20250929": "Claude Sonnet 4.5", "claude-haiku-4-5-20251001": "Claude Haiku 4.5",
                     "claude-opus-4-1-20250805": "Claude Opus 4.1"}  # fmt: skip
_OPENAI_MODELS = [
    "gpt-4.1-2025-04-14",
    "gpt-4.1-mini-2025-04-14",
    "gpt-4o-mini-2024-07-18",
    "o4-mini-2025-04-16",
]


def _models(headers: dict[str, str]) -> Reply:
    """`GET /v1/models` in the shape of the API the client speaks (Anthropic if it sends its headers)."""
    if "anthropic-version" in headers or "x-api-key" in headers:
        data = [{"type": "model", "id": m, "display_name": name, "created_at": "2025-08-05T00:00:00Z"}
                for m, name in _ANTHROPIC_MODELS.items()]  # fmt: skip
        return json_reply(
            200, {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}
        )
    data = [{"id": m, "object": "model", "created": 1744316542, "owned_by": "system"} for m in _OPENAI_MODELS]
    return json_reply(200, {"object": "list", "data": data}, pretty=True)
