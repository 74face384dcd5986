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
import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from capsem.emulator import anthropic, gemini, ollama, openai_chat, openai_responses, websocket
from capsem.emulator.encoding import Encoder, header_value
from capsem.emulator.reply import Reply, Request, json_reply
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
]
_MAX_BODY = 64 * 1024 * 1024


def parse_controls(value: str | None, defaults: dict[str, str]) -> dict[str, str]:
    out = dict(defaults)
    for part in (value or "").split(";"):
        key, eq, val = part.partition("=")
        if eq and key.strip():
            out[key.strip().lower()] = val.strip()
    return out


def _decode_request(body: bytes, encoding: str | None) -> bytes:
    if not encoding or not body:
        return body
    from addons.decode import decode_body  # the emulator reads requests like the addon does

    data, _ = decode_body(body, encoding)
    return data


class Server:
    def __init__(self, defaults: dict[str, str] | None = None) -> None:
        self.defaults = {k: str(v) for k, v in (defaults or {}).items()}
        self.ca = CertificateAuthority()
        self.exchanges: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    # -- connection loop ----------------------------------------------------------------------

    async def handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, scheme: str = "http"
    ) -> None:
        tunnel_host: str | None = None
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    return
                method, target, headers, body = request
                if method == "CONNECT":
                    tunnel_host = target.rsplit(":", 1)[0].strip("[]")
                    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    await writer.drain()
                    await writer.start_tls(self.ca.context(tunnel_host))
                    scheme = "https"
                    continue
                if websocket.is_upgrade(headers, target):  # Responses over WebSocket (Codex CLI)
                    host = tunnel_host or headers.get("host", "").rsplit(":", 1)[0]
                    return await websocket.serve(self, reader, writer, scheme, host, target, headers)
                keep = await self._respond(writer, scheme, tunnel_host, method, target, headers, body)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, OSError, asyncio.CancelledError):
            return  # client gone, or the emulator is stopping
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def _read_request(self, reader: asyncio.StreamReader):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = b""
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
        return method, target, headers, body

    # -- one exchange ---------------------------------------------------------------------------

    async def _respond(self, writer, scheme, tunnel_host, method, target, headers, body) -> bool:
        if target.startswith(("http://", "https://")):
            parts = urlsplit(target)
            scheme, host, path, query = parts.scheme, parts.hostname or "", parts.path, parts.query
        else:
            path, _, query = target.partition("?")
            host = tunnel_host or headers.get("host", "").rsplit(":", 1)[0]
        if path.startswith("/_emulator/"):
            return await self._admin(writer, method, path)
        controls = parse_controls(headers.get("x-emulator"), self.defaults)
        decoded = _decode_request(body, headers.get("content-encoding"))
        reply = self._route(method, host, path, query, headers, decoded, controls)
        encoding = controls.get("encoding", "identity")
        if encoding == "auto":
            offered = [e.split(";")[0].strip() for e in headers.get("accept-encoding", "").split(",")]
            encoding = next((e for e in offered if e in ("gzip", "br", "zstd", "deflate")), "identity")
        sent, complete = await self._write(writer, reply, encoding, controls)
        self._log(
            scheme, host, method, path, query, headers, decoded, reply, sent, complete and reply.complete
        )
        return complete and headers.get("connection", "").lower() != "close"

    def _route(self, method, host, path, query, headers, body: bytes, controls: dict[str, str]) -> Reply:
        if method == "GET" and path == "/v1/models":
            return json_reply(200, {"object": "list", "data": [
                {"id": "claude-sonnet-4-5", "type": "model"}, {"id": "gpt-4.1", "object": "model"}]})  # fmt: skip
        try:
            req = json.loads(body) if body else {}
        except ValueError:
            req = None
        if path == "/v1/messages/count_tokens" and method == "POST":
            return json_reply(200, {"input_tokens": max(1, len(body) // 4)})
        for route_method, pattern, handler in ROUTES:
            match = pattern.fullmatch(path)
            if match and method == route_method:
                if not isinstance(req, dict):
                    return json_reply(
                        400, {"error": {"type": "invalid_request_error", "message": "body is not JSON"}}
                    )
                return handler(Request(method, host, path, query, headers, body, req, controls, match))
        return json_reply(404, {"error": {"type": "not_found_error", "message": f"no route {method} {path}"}})

    async def _write(
        self, writer, reply: Reply, encoding: str, controls: dict[str, str]
    ) -> tuple[bytearray, bool]:
        """Write the reply; return the body bytes sent (after encoding) and whether it completed."""
        lie = controls.get("lie_encoding")
        encoder = Encoder("identity" if lie else encoding)
        chunk = int(controls.get("chunk", 0)) or None
        delay = int(controls.get("delay_ms", 0)) / 1000
        truncate = int(controls["truncate"]) if "truncate" in controls else None
        head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'OK')}", "date: " + time.strftime(
            "%a, %d %b %Y %H:%M:%S GMT", time.gmtime()), "server: capsem-emulator"]  # fmt: skip
        head += [f"{k}: {v}" for k, v in reply.headers]
        content_encoding = lie or header_value(encoding)
        if content_encoding:
            head.append(f"content-encoding: {content_encoding}")
        streamed = reply.events is not None
        pieces = [encoder.step(e) for e in reply.events] + [encoder.end()] if streamed else [
            encoder.whole(reply.body or b"")]  # fmt: skip
        if streamed:
            head.append("transfer-encoding: chunked")
        else:
            head.append(f"content-length: {len(pieces[0])}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        sent = bytearray()
        for piece in pieces:
            for part in _split(piece, chunk):
                if truncate is not None and len(sent) + len(part) > truncate:
                    part = part[: truncate - len(sent)]
                    sent += part
                    writer.write(f"{len(part):x}\r\n".encode() + part if streamed and part else part)
                    await writer.drain()
                    writer.transport.abort()
                    return sent, False
                sent += part
                writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n" if streamed else part)
                await writer.drain()
                if delay and streamed:
                    await asyncio.sleep(delay)
        if streamed:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        return sent, True

    async def _admin(self, writer, method: str, path: str) -> bool:
        if path == "/_emulator/exchanges" and method == "DELETE":
            with self.lock:
                self.exchanges.clear()
            reply = json_reply(200, {"cleared": True})
        elif path == "/_emulator/exchanges":
            with self.lock:
                reply = json_reply(200, list(self.exchanges))
        else:
            reply = json_reply(200, {"ok": True})
        await self._write(writer, reply, "identity", {})
        return True

    def _log(
        self, scheme, host, method, path, query, headers, body, reply: Reply, sent: bytes, complete
    ) -> None:
        with self.lock:
            self.exchanges.append({
                "id": len(self.exchanges) + 1, "time": time.time(), "scheme": scheme, "host": host,
                "method": method, "path": path, "query": query, "request_headers": headers,
                "request_body": body.decode("utf-8", "replace"), "status": reply.status,
                "response_headers": [list(h) for h in reply.headers], "response_body_b64":
                base64.b64encode(bytes(sent)).decode(), "stream": reply.events is not None, "complete": complete,
                "expected": reply.expected,
            })  # fmt: skip


def _split(data: bytes, size: int | None) -> list[bytes]:
    if not data:
        return []
    if not size:
        return [data]
    return [data[i : i + size] for i in range(0, len(data), size)]


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 529: "Overloaded"}  # fmt: skip
