"""The replay server: mitmdump's upstream under `capsem replay`, answering from a recording.

It is the emulator's server (capsem/emulator/server.py: loopback, CONNECT then TLS with its own
CA, absolute-form requests) with another answer: each model or MCP request is matched to a
recorded call (assembler/replay/match.py) and answered with its recorded status, headers and body,
streamed in the chunks it was received in (at once, or at the recorded pace times `speed`); a
Responses WebSocket turn is answered with its recorded messages, one frame each. A miss is an error
in the provider's shape (assembler/replay/answers.py). Any other request gets what the emulator
answers the agents' housekeeping (settings, telemetry: capsem/emulator/housekeeping.py), else a 404
that says it was not replayed, marked as the emulator marks what it does not play (so it is listed
apart from the agent's errors). Nothing leaves the machine — except, with `live_from`,
the calls from that model call on, which go to the real provider (`live.py`).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from wsproto.connection import Connection
from wsproto.events import TextMessage

from assembler.replay import answers, live
from assembler.replay.match import Endpoint, Hit, Matcher, Miss, Shaper
from assembler.replay.recording import Answer, Recording
from assembler.replay.scrub import RequestScrubber
from capsem.emulator import housekeeping
from capsem.emulator import websocket as ws
from capsem.emulator.server import ROUTES, Incoming, Server


@dataclass(frozen=True, slots=True)
class MissNote:
    """A request the recording could not answer: its number among the model calls of the replay
    (None for an MCP call), where it went and the first differing item."""

    number: int | None
    endpoint: Endpoint
    difference: str
    expected: int | None
    """The number of the recorded call it was compared with."""


@dataclass
class Report:
    """What the replay did so far (read by the summary when the agent is done)."""

    matched: int = 0
    missed: list[MissNote] = field(default_factory=list)
    live: int = 0
    other: int = 0
    """Requests that are neither model nor MCP calls, answered 404."""


@dataclass
class Options:
    speed: float | None = None
    """None: every answer at once; 1: at the recorded pace; 2: twice as fast."""
    live_from: int | None = None
    """Model calls from this number on go to the real provider."""
    model: str | None = None
    """The model the live part asks for."""
    via: str | None = None
    """An HTTP proxy the live part goes through (`http://host:port`); None: directly."""
    via_ca: str | None = None
    """A CA file the live part's upstream is verified with (None: the system's)."""


class Replayer:
    """The recording, the matcher and the report; thread-safe (the server runs in its own thread)."""

    def __init__(self, recording: Recording, options: Options, workspace: str | None = None) -> None:
        self.recording = recording
        self.options = options
        self.scrub = RequestScrubber()
        self.matcher = Matcher([c.recorded for c in recording.calls], Shaper(workspace, self.scrub))
        self.answers = {c.recorded.number: c.answer for c in recording.calls}
        self.report = Report()
        self.requests = 0
        """Model requests seen (their numbers count from 1)."""
        self.lock = threading.Lock()
        self._endpoints = {(c.recorded.endpoint.host, c.recorded.endpoint.path) for c in recording.calls}

    def known(self, host: str, path: str) -> bool:
        """Whether a request there is a model or MCP call (recorded there, or a provider's API path)."""
        return (host, path) in self._endpoints or any(p.fullmatch(path) for _, p, _ in ROUTES)

    def is_live(self) -> bool:
        """Whether the replay has gone live (`--from N --live`, call N was sent)."""
        with self.lock:
            return self.options.live_from is not None and self.requests >= self.options.live_from

    def next_is_live(self, mcp: bool) -> bool:
        """Whether the next request goes live (counting it when it is a model request)."""
        with self.lock:
            if not mcp:
                self.requests += 1
            start = self.options.live_from
            return start is not None and self.requests >= start

    def answer(
        self, endpoint: Endpoint, body: bytes, headers: dict[str, str] | None = None
    ) -> Answer | MissNote:
        with self.lock:
            self.scrub.learn(headers or {})
            found = self.matcher.match(endpoint, body)
            if isinstance(found, Hit):
                self.report.matched += 1
                return self.answers[found.call.number]
            assert isinstance(found, Miss)
            note = MissNote(None if endpoint.kind == "mcp" else self.requests, endpoint, found.difference,
                            found.expected.number if found.expected else None)  # fmt: skip
            self.report.missed.append(note)
            return note

    def count(self, what: str) -> None:
        with self.lock:
            setattr(self.report, what, getattr(self.report, what) + 1)


class ReplayServer(Server):
    """The emulator's server with recorded answers instead of scripted ones."""

    def __init__(self, replayer: Replayer) -> None:
        super().__init__()
        self.replayer = replayer

    async def _respond(self, writer, scheme, tunnel_host, request: Incoming) -> bool:
        started = time.monotonic()
        target = request.target
        if target.startswith(("http://", "https://")):
            parts = urlsplit(target)
            host, path, port = parts.hostname or "", parts.path, parts.port
        else:
            host, path, port = (
                tunnel_host or request.headers.get("host", "").rsplit(":", 1)[0],
                target.partition("?")[0],
                None,
            )
        port = port or (443 if scheme == "https" else 80)
        body = _decoded(request)
        obj = _json(body)
        mcp = isinstance(obj, dict) and obj.get("jsonrpc") == "2.0"
        call = request.method == "POST" and (mcp or self.replayer.known(host, path))
        if self.replayer.next_is_live(mcp) if call else self.replayer.is_live():
            self.replayer.count("live")
            await live.forward(writer, request, host, port, scheme, self.replayer.options)
            return False
        if not call:  # the agent's housekeeping as the emulator answers it; anything else is not replayed
            self.replayer.count("other")
            known = housekeeping.answer(request.method, host, path, request.headers.get("content-type", ""))
            if known is not None:
                await _send(writer, known.status, known.headers, [(known.body or b"", None)])
                return True
            status = (
                405
                if request.method in ("GET", "DELETE") and (host, path) in self.replayer._endpoints
                else 404
            )
            # marked as the emulator marks what it does not play: listed apart from the agent's errors
            head = [("content-type", "application/json"), ("server", housekeeping.NOT_EMULATED_SERVER)]
            await _send(writer, status, head, [(answers.not_replayed(request.method, host, path), None)])
            return True
        if mcp and "id" not in obj and "method" in obj:  # a notification: nothing to answer
            found = self.replayer.answer(Endpoint("mcp", request.method, host, path), body, request.headers)
            if isinstance(found, MissNote):
                self.replayer.report.missed.remove(found)
                await _send(writer, 202, [], [])
                return True
        else:
            found = self.replayer.answer(Endpoint("mcp" if mcp else "http", request.method, host, path), body,
                                         request.headers)  # fmt: skip
        if isinstance(found, MissNote):
            status, payload = answers.miss_error(answers.protocol_of(path, obj), found.difference, obj)
            await _send(writer, status, [("content-type", "application/json")], [(payload, None)])
            return True
        kind = dict((k.lower(), v) for k, v in found.headers).get("content-type")
        cut = answers.pieces(found.body, kind, found.chunks) if found.streamed else [(found.body, None)]
        await _send(writer, found.status, found.headers, cut, streamed=found.streamed, started=started,
                    speed=self.replayer.options.speed)  # fmt: skip
        return True

    async def websocket(self, reader, writer, scheme, host, request: Incoming) -> None:
        path = request.target.partition("?")[0]
        if "://" in path:
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        conn = await ws.accept(writer, request.headers, "capsem-replay")
        endpoint = Endpoint("ws", "GET", host, path)
        upstream: list[live.LiveSocket] = []  # opened when the first turn goes live

        async def go_live(text: str) -> AsyncIterator[str]:
            if not upstream:
                upstream.append(await live.LiveSocket.open(request, host, 443 if scheme == "https" else 80, scheme,
                                                           path, self.replayer.options))  # fmt: skip
            async for message in upstream[0].turn(text, self.replayer.options.model):
                yield message

        try:
            await self._socket(reader, writer, conn, endpoint, go_live, request.headers)
        finally:
            for socket in upstream:
                socket.close()

    async def _socket(self, reader, writer, conn: Connection, endpoint: Endpoint, go_live, headers) -> None:
        async for whole in ws.messages(reader, writer, conn):
            text = whole if isinstance(whole, str) else whole.decode("utf-8", "replace")
            await self._turn(conn, writer, endpoint, text, go_live, headers)

    async def _turn(self, conn: Connection, writer, endpoint: Endpoint, text: str, go_live, headers) -> None:
        obj = _json(text.encode())
        if not (isinstance(obj, dict) and obj.get("type") == "response.create"):
            return
        started = time.monotonic()
        if self.replayer.next_is_live(False):
            self.replayer.count("live")
            try:
                async for message in go_live(text):
                    writer.write(conn.send(TextMessage(data=message)))
                    await writer.drain()
            except (OSError, ConnectionError) as exc:
                error = {"type": "error", "status": 502, "error": {"type": "api_error", "message":
                         f"capsem replay: the live turn failed: {exc}"}}  # fmt: skip
                writer.write(conn.send(TextMessage(data=json.dumps(error))))
                await writer.drain()
            return
        found = self.replayer.answer(endpoint, text.encode(), headers)
        if isinstance(found, MissNote):
            cut = [(answers.websocket_miss(found.difference), None)]
        else:
            cut = answers.pieces(found.body, None, found.chunks, websocket=True)
        speed = self.replayer.options.speed
        for payload, ms in cut:
            await _pace(started, ms, speed)
            writer.write(conn.send(TextMessage(data=payload.decode("utf-8", "surrogateescape"))))
            await writer.drain()


async def _pace(started: float, ms: int | None, speed: float | None) -> None:
    if speed and ms is not None:
        wait = started + ms / 1000 / speed - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)


async def _send(writer, status: int, headers: list[tuple[str, str]], cut: list[tuple[bytes, int | None]], *,
                streamed: bool = False, started: float = 0.0, speed: float | None = None) -> None:  # fmt: skip
    """Head, then the body piece by piece (chunked when it was streamed), each drained."""
    head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}", *(f"{k}: {v}" for k, v in headers)]
    head.append(
        "transfer-encoding: chunked" if streamed else f"content-length: {sum(len(p) for p, _ in cut)}"
    )
    first = cut[0][1] if cut else None
    await _pace(started, first, speed)  # the recorded wait for the head: the time to the first byte
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("utf-8"))
    for piece, ms in cut:
        await _pace(started, ms, speed)
        writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if streamed else piece)
        await writer.drain()
    if streamed:
        writer.write(b"0\r\n\r\n")
    await writer.drain()


def _decoded(request: Incoming) -> bytes:
    from capsem.emulator.encoding import decode_request

    try:
        return decode_request(request.body, request.headers.get("content-encoding"))
    except Exception:
        return request.body


def _json(body: bytes) -> object:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


_REASONS = {200: "OK", 202: "Accepted", 204: "No Content", 400: "Bad Request", 404: "Not Found",
            405: "Method Not Allowed"}  # fmt: skip
