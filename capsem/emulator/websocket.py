"""A minimal RFC 6455 server for the Responses path (Codex CLI's WebSocket transport).

After the HTTP upgrade (the request head is already read by `server.py`), framing is done by
`wsproto`. Each client text message of type `response.create` (request fields at top level
or under `response`) is answered with the same event objects as the SSE stream, one text
frame each, and logged as an exchange with its `expected` record. Pings are answered; a
close is echoed.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import CloseConnection, Message, Ping, TextMessage

from capsem.emulator import openai_responses
from capsem.emulator.reply import Reply, parse_controls

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PATH = re.compile(r"(?:/[\w.-]+)*/v1/responses")


def is_upgrade(headers: dict[str, str], target: str) -> bool:
    path = target.split("?", 1)[0]
    if "://" in path:
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    return headers.get("upgrade", "").lower() == "websocket" and bool(PATH.fullmatch(path))


async def accept(writer: asyncio.StreamWriter, headers: dict[str, str], server_name: str) -> Connection:
    """Complete a WebSocket upgrade (its request head already read): the 101 answer, and the
    server side of the connection."""
    key = headers.get("sec-websocket-key", "")
    accept_key = base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()
    writer.write(
        (
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
            f"sec-websocket-accept: {accept_key}\r\nserver: {server_name}\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    return Connection(ConnectionType.SERVER)


async def messages(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   conn: Connection) -> AsyncIterator[str | bytes]:  # fmt: skip
    """Each whole message the client sends (text as str, binary as bytes), until it closes or goes
    away; pings are answered and a close is echoed. The caller answers a message before the next
    one is read."""
    parts: list[Any] = []
    while True:
        data = await reader.read(65536)
        conn.receive_data(data or None)
        for event in conn.events():
            if isinstance(event, Message):
                parts.append(event.data)
                if event.message_finished:
                    whole = "".join(parts) if isinstance(event, TextMessage) else b"".join(parts)
                    parts = []
                    yield whole
            elif isinstance(event, Ping):
                writer.write(conn.send(event.response()))
            elif isinstance(event, CloseConnection):
                try:
                    writer.write(conn.send(event.response()))
                    await writer.drain()
                except Exception:
                    pass
                return
        await writer.drain()
        if not data:
            return


async def serve(server: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, scheme: str,
                host: str, target: str, headers: dict[str, str]) -> None:  # fmt: skip
    """Complete the upgrade and answer `response.create` messages until the socket closes."""
    conn = await accept(writer, headers, "capsem-emulator")
    controls = parse_controls(headers.get("x-emulator"), server.defaults)
    path, _, query = target.partition("?")
    async for whole in messages(reader, writer, conn):
        await _answer(server, conn, writer, scheme, host, path, query, headers, whole, controls)


async def _answer(server, conn, writer, scheme, host, path, query, headers, whole, controls) -> None:
    try:
        obj = json.loads(whole)
    except ValueError:
        return
    if not (isinstance(obj, dict) and obj.get("type") == "response.create"):
        return
    req = (
        obj["response"]
        if isinstance(obj.get("response"), dict)
        else {k: v for k, v in obj.items() if k != "type"}
    )
    body = json.dumps(req, ensure_ascii=False).encode()
    turn = openai_responses.turn(body, req, controls, True)
    if turn.error is not None:
        status, err = turn.error
        events = [{"type": "error", "status": status, "error": err["error"]}]
        turn.expected["error_type"] = err["error"].get("code") or err["error"].get("type")
    else:
        events = turn.events
    texts = [json.dumps(ev, ensure_ascii=False) for ev in events]
    frames = [conn.send(TextMessage(data=text)) for text in texts]
    messages = [text.encode() for text in texts]
    reply = Reply(200, [], None, messages, turn.expected, turn.complete)
    received = whole.encode() if isinstance(whole, str) else whole
    # logged before sending: the client may act on the last frame before this coroutine resumes
    # (request: the message as received; response: the frames as sent, and their payloads one a
    # line, NDJSON)
    server._log(scheme, host, "WS", path, query, headers, received, received, reply, b"".join(frames),
                turn.complete, sent_decoded=b"\n".join(messages))  # fmt: skip
    delay = int(controls.get("delay_ms", 0)) / 1000  # paced as an HTTP stream's events are
    for frame in frames:
        if delay:
            await asyncio.sleep(delay)
        writer.write(frame)
        await writer.drain()
