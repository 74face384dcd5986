"""The timing client: one streamed request over a raw asyncio connection, directly or via a proxy.

A raw HTTP/1.1 client (no httpx) keeps the client's own overhead small and identical in every
scenario. It reads chunked, length-delimited or close-delimited bodies piece by piece as they
arrive, notes `time.time()` for each piece, and finds the upstream's send-time markers in it:
an event's lag is its arrival time minus its send time (same machine, same clock).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from benchmarks.upstream import MARKER, MODEL, StreamSpec

_READ = 64 * 1024
_TAIL = 40  # longer than any marker: an unfinished marker at a piece's end is kept for the next


@dataclass
class StreamResult:
    """What one client saw of one streamed response (times in seconds)."""

    ttfb: float = 0.0
    """From opening the connection to the first byte of the response."""
    first_event: float | None = None
    """From opening the connection to the arrival of the first delta."""
    total: float = 0.0
    """From opening the connection to the end of the body."""
    lags: list[float] = field(default_factory=list)
    """Per delta: arrival time minus the upstream's send time."""
    body_bytes: int = 0
    status: int = 0
    error: str | None = None


class _Scanner:
    """Finds send-time markers in a body that arrives in arbitrary pieces."""

    def __init__(self, result: StreamResult, started: float) -> None:
        self.result = result
        self.started = started
        self.tail = b""

    def feed(self, piece: bytes, now: float, clock: float) -> None:
        """`now` is the arrival time (time.time), `clock` the same instant on perf_counter."""
        self.result.body_bytes += len(piece)
        buf = self.tail + piece
        end = 0
        for match in MARKER.finditer(buf):
            self.result.lags.append(now - float(match.group(1)))
            end = match.end()
        if end and self.result.first_event is None:
            self.result.first_event = clock - self.started
        self.tail = buf[max(end, len(buf) - _TAIL) :]


def request_bytes(upstream_port: int, spec: StreamSpec, *, absolute: bool) -> bytes:
    """An Anthropic Messages request as an SDK would send it (absolute-form for a proxy)."""
    body = json.dumps({"model": MODEL, "max_tokens": 4096, "stream": True,
                       "messages": [{"role": "user", "content": "Write a long story."}]}).encode()  # fmt: skip
    authority = f"127.0.0.1:{upstream_port}"
    target = f"http://{authority}/v1/messages" if absolute else "/v1/messages"
    head = (
        f"POST {target} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n"
        f"accept: text/event-stream\r\nanthropic-version: 2023-06-01\r\nx-api-key: sk-ant-bench-0000000000\r\n"
        f"x-bench: {spec.header()}\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def fetch(upstream_port: int, spec: StreamSpec, proxy_port: int | None = None) -> StreamResult:
    """Send one streamed request (through the proxy on `proxy_port` when given) and time it."""
    result = StreamResult()
    started = time.perf_counter()
    writer: asyncio.StreamWriter | None = None
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port or upstream_port)
        writer.write(request_bytes(upstream_port, spec, absolute=proxy_port is not None))
        await writer.drain()
        first = await reader.read(1)
        if not first:
            raise ConnectionError("connection closed before any response")
        result.ttfb = time.perf_counter() - started
        head = first + await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        result.status = int(lines[0].split(" ", 2)[1])
        headers = {n.strip().lower(): v.strip() for n, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        scanner = _Scanner(result, started)
        await _read_body(reader, headers, scanner)
        result.total = time.perf_counter() - started
        if result.status != 200:
            result.error = f"HTTP {result.status}"
        elif len(result.lags) != spec.events:
            result.error = f"{len(result.lags)} of {spec.events} events arrived"
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        result.total = time.perf_counter() - started
    finally:
        if writer is not None:
            writer.close()
    return result


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str], scanner: _Scanner) -> None:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                return
            await _read_pieces(reader, size, scanner)
            await reader.readexactly(2)
    elif "content-length" in headers:
        await _read_pieces(reader, int(headers["content-length"]), scanner)
    else:
        await _read_pieces(reader, None, scanner)


async def _read_pieces(reader: asyncio.StreamReader, limit: int | None, scanner: _Scanner) -> None:
    """Read `limit` bytes (None: until the connection closes), scanning each piece on arrival."""
    remaining = limit
    while remaining is None or remaining > 0:
        piece = await reader.read(_READ if remaining is None else min(_READ, remaining))
        if not piece:
            if remaining:
                raise asyncio.IncompleteReadError(b"", remaining)
            return
        if remaining is not None:
            remaining -= len(piece)
        scanner.feed(piece, time.time(), time.perf_counter())
