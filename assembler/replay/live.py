"""The live part of `capsem replay --from N --live`: a request passed on to the real provider.

The request goes out as it came (its head and body; `--model M` rewrites the model it asks for),
with `connection: close`, directly over TLS or through an HTTP proxy (`Options.via`, CONNECT), and
the provider's answer is passed back byte for byte. A WebSocket turn that goes live is sent on a
WebSocket of its own to the provider (opened with the replayed socket's headers) and its messages
are passed back one by one.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from typing import TYPE_CHECKING

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, RejectConnection, Request, TextMessage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from assembler.replay.server import Options
    from capsem.emulator.server import Incoming

_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "transfer-encoding",
                  "content-length", "te", "upgrade"})  # fmt: skip
_GEMINI_MODEL = re.compile(r"(/models/)([^/:]+)(:)")


def with_model(path: str, body: bytes, model: str) -> tuple[str, bytes]:
    """`path` and JSON `body` asking for `model` instead (the body's `model`, Gemini's path)."""
    path = _GEMINI_MODEL.sub(lambda m: m.group(1) + model + m.group(3), path)
    try:
        obj = json.loads(body) if body else None
    except ValueError:
        return path, body
    if isinstance(obj, dict):
        if isinstance(obj.get("response"), dict) and "model" in obj["response"]:
            obj["response"]["model"] = model
        elif "model" in obj:
            obj["model"] = model
        else:
            return path, body
        return path, json.dumps(obj, ensure_ascii=False).encode()
    return path, body


async def _open(
    host: str, port: int, scheme: str, options: Options
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    context = ssl.create_default_context(cafile=options.via_ca) if scheme == "https" else None
    if options.via is None:
        return await asyncio.open_connection(
            host, port, ssl=context, server_hostname=host if context else None
        )
    proxy = options.via.split("://", 1)[-1].rstrip("/")
    proxy_host, _, proxy_port = proxy.rpartition(":")
    reader, writer = await asyncio.open_connection(proxy_host, int(proxy_port))
    if context is None:
        return reader, writer
    writer.write(f"CONNECT {host}:{port} HTTP/1.1\r\nhost: {host}:{port}\r\n\r\n".encode())
    await writer.drain()
    answer = await reader.readuntil(b"\r\n\r\n")
    if b" 200 " not in answer.split(b"\r\n", 1)[0] + b" ":
        raise ConnectionError(f"the proxy {options.via} refused CONNECT {host}:{port}")
    await writer.start_tls(context, server_hostname=host)
    return reader, writer


def _head(request: Incoming, path: str, extra: list[str]) -> bytes:
    lines = request.head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    query = target.partition("?")[2]
    keep = [line for line in lines[1:] if line and line.split(":", 1)[0].strip().lower() not in _HOP]
    first = f"{method} {path}{'?' + query if query else ''} {version}"
    return ("\r\n".join([first, *keep, *extra]) + "\r\n\r\n").encode("latin-1")


async def forward(client: asyncio.StreamWriter, request: Incoming, host: str, port: int, scheme: str,
                  options: Options) -> None:  # fmt: skip
    """Send `request` to the real `host` and pass its answer back to `client` as it comes."""
    from capsem.emulator.encoding import decode_request

    path = request.target
    if path.startswith(("http://", "https://")):
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    path = path.partition("?")[0]
    body = request.body
    drop_encoding = False
    if options.model:
        try:
            decoded = decode_request(body, request.headers.get("content-encoding"))
        except Exception:
            decoded = None
        if decoded is not None:
            path, body = with_model(path, decoded, options.model)
            drop_encoding = True
    head = _head(request, path, [f"content-length: {len(body)}", "connection: close"])
    if drop_encoding:
        head = re.sub(rb"(?im)^content-encoding:[^\r\n]*\r\n", b"", head)
    try:
        reader, writer = await _open(host, port, scheme, options)
    except (OSError, ConnectionError, ssl.SSLError) as exc:
        message = json.dumps({"error": {"type": "api_error", "message": f"capsem replay: the live call to {host} "
                                        f"failed: {exc}"}}).encode()  # fmt: skip
        client.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\n"
                     + f"content-length: {len(message)}\r\nconnection: close\r\n\r\n".encode() + message)  # fmt: skip
        await client.drain()
        return
    try:
        writer.write(head + body)
        await writer.drain()
        while data := await reader.read(65536):
            client.write(data)
            await client.drain()
    finally:
        writer.close()


TURN_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})
_WS_HEADERS = frozenset({"host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
                         "sec-websocket-extensions", "content-length", "proxy-connection",
                         "proxy-authorization"})  # fmt: skip


class LiveSocket:
    """A WebSocket to the real provider, opened when the first turn of a replayed socket goes live;
    each live turn is sent on it (`--model` rewritten) and its messages passed back."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: WSConnection
    ) -> None:
        self.reader, self.writer, self.conn = reader, writer, conn

    @classmethod
    async def open(
        cls, request: Incoming, host: str, port: int, scheme: str, path: str, options: Options
    ) -> LiveSocket:
        reader, writer = await _open(host, port, scheme, options)
        conn = WSConnection(ConnectionType.CLIENT)
        headers = [(k, v) for k, v in request.headers.items() if k not in _WS_HEADERS]
        query = request.target.partition("?")[2]
        writer.write(
            conn.send(Request(host=host, target=path + (f"?{query}" if query else ""), extra_headers=headers))
        )
        await writer.drain()
        while True:
            data = await reader.read(65536)
            if not data:
                raise ConnectionError(f"{host} closed the WebSocket before accepting it")
            conn.receive_data(data)
            for event in conn.events():
                if isinstance(event, AcceptConnection):
                    return cls(reader, writer, conn)
                if isinstance(event, RejectConnection):
                    raise ConnectionError(f"{host} refused the WebSocket ({event.status_code})")

    async def turn(self, text: str, model: str | None) -> AsyncIterator[str]:
        """Send one `response.create` and yield the server's messages up to the turn's end."""
        if model:
            text = with_model("", text.encode(), model)[1].decode()
        self.writer.write(self.conn.send(TextMessage(data=text)))
        await self.writer.drain()
        parts: list[str] = []
        while True:
            data = await self.reader.read(65536)
            self.conn.receive_data(data or None)
            for event in self.conn.events():
                if isinstance(event, TextMessage):
                    parts.append(event.data)
                    if event.message_finished:
                        message, parts = "".join(parts), []
                        yield message
                        try:
                            kind = json.loads(message).get("type")
                        except (ValueError, AttributeError):
                            kind = None
                        if kind in TURN_ENDS:
                            return
                elif isinstance(event, CloseConnection):
                    return
            if not data:
                return

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:
            pass
