"""A tiny Anthropic-shaped SSE server for the streaming benchmark (loopback, HTTP/1.1).

`POST /v1/messages` answers with one Messages stream (`message_start`, a text block of
`events` `content_block_delta` events of about `size` bytes of text each, `message_delta`,
`message_stop`), chunked, one event per chunk; with `tools` > 0 the text block is followed by that
many `Bash` tool calls (`tool_use` blocks whose arguments come in `TOOL_PIECES` deltas) and the
answer stops for `tool_use`. Each text delta starts with a marker ``@t=<time.time() at send>;``
so the client can measure each event's delivery lag on the same clock (tool deltas carry none).
Events are sent `delay_ms` apart on a fixed schedule (start + i × delay, so jitter does not add
up), or back to back when `delay_ms` is 0. Parameters come from the request header
``x-bench: events=400; size=200; delay_ms=5; tools=1``.

The capsem addon recognises the stream as a real Anthropic call (path `/v1/messages` on an
unknown host) and parses it in full. Run alone with ``python -m benchmarks.upstream``: it
prints its port on stdout and serves until interrupted. (capsem's emulator has no per-event
timestamps or fixed-size paced events, hence this server.)
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

MARKER = re.compile(rb"@t=(\d+\.\d+);")
"""The send-time marker at the start of every delta's text."""
MODEL = "claude-haiku-4-5-20251001"
_FILLER = b"lorem ipsum dolor sit amet, consectetur adipiscing elit " * 64
_DELTA_HEAD = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"@t='
)


TOOL_PIECES = 20
"""Argument deltas per tool call (as `benchmarks/tool_hold.py`'s answer)."""
TOOL_COMMAND = "ls -la " + "src/" * 50
"""The tool call's command: harmless, so a rule denying `rm -rf` holds and releases it unchanged."""


@dataclass(frozen=True)
class StreamSpec:
    """One response: `events` text deltas of about `size` bytes of text, `delay_ms` apart, then
    `tools` tool calls."""

    events: int
    size: int
    delay_ms: float = 0.0
    tools: int = 0

    def header(self) -> str:
        return f"events={self.events}; size={self.size}; delay_ms={self.delay_ms:g}; tools={self.tools}"

    @classmethod
    def of_size(cls, total: int, size: int = 1000) -> StreamSpec:
        """Back-to-back deltas of ~`size` bytes of text, about `total` bytes on the wire in all."""
        return cls(events=total // (size + 130), size=size)  # a delta event is its text + ~130 B

    @classmethod
    def parse(cls, value: str) -> StreamSpec:
        fields = dict(part.strip().partition("=")[::2] for part in value.split(";") if "=" in part)
        return cls(int(fields.get("events", 100)), int(fields.get("size", 100)),
                   float(fields.get("delay_ms", 0)), int(fields.get("tools", 0)))  # fmt: skip


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def head_events(message_id: str = "msg_bench") -> list[bytes]:
    usage = {
        "input_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 1,
    }
    message = {"model": MODEL, "id": message_id, "type": "message", "role": "assistant", "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": usage}  # fmt: skip
    return [
        _sse("message_start", {"type": "message_start", "message": message}),
        _sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        b'event: ping\ndata: {"type": "ping"}\n\n',
    ]


TEXT_STOP = _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
"""The text block's end."""


def tool_events(index: int) -> list[bytes]:
    """A `Bash` tool call as block `index`: its start, `TOOL_PIECES` argument deltas, its stop."""
    arguments = json.dumps({"command": TOOL_COMMAND})
    step = -(-len(arguments) // TOOL_PIECES)
    start = {"type": "tool_use", "id": f"toolu_bench_{index}", "name": "Bash", "input": {}}
    pieces = [
        {"type": "content_block_delta", "index": index,
         "delta": {"type": "input_json_delta", "partial_json": arguments[i : i + step]}}
        for i in range(0, len(arguments), step)
    ]  # fmt: skip
    return [
        _sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
        *(_sse("content_block_delta", piece) for piece in pieces),
        _sse("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def tail_events(output_tokens: int, tools: int = 0) -> list[bytes]:
    """The message's end (after the text block's stop, `TEXT_STOP`, and any tool calls)."""
    stop = "tool_use" if tools else "end_turn"
    return [
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        ),
        _sse("message_stop", {"type": "message_stop"}),
    ]


def delta_event(size: int, sent_at: float) -> bytes:
    """One text delta whose text (about `size` bytes) starts with the send-time marker."""
    stamp = b"%.6f;" % sent_at
    filler = _FILLER[: max(0, size - len(stamp) - 3)]
    return _DELTA_HEAD + stamp + filler + b'"}}\n\n'


def stream_events(spec: StreamSpec, clock=time.time) -> Iterator[bytes]:
    """The whole stream, event by event (delta markers stamped when each event is built)."""
    yield from head_events()
    for _ in range(spec.events):
        yield delta_event(spec.size, clock())
    yield TEXT_STOP
    for k in range(spec.tools):
        yield from tool_events(k + 1)
    yield from tail_events(spec.events, spec.tools)


async def _read_request(reader: asyncio.StreamReader) -> dict[str, str] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    await reader.readexactly(int(headers.get("content-length") or 0))
    return headers


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _send_stream(writer: asyncio.StreamWriter, spec: StreamSpec) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"transfer-encoding: chunked\r\ncache-control: no-cache\r\nrequest-id: req_bench\r\n\r\n"
    )
    for event in head_events():
        writer.write(_chunk(event))
    await writer.drain()
    delay = spec.delay_ms / 1000
    start = time.perf_counter()
    tools = [event for k in range(spec.tools) for event in tool_events(k + 1)]
    paced: list[bytes | None] = [None] * spec.events + tools  # None: a text delta, stamped when sent
    for i, event in enumerate(paced):
        if delay:
            wait = start + (i + 1) * delay - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
        if i == spec.events:  # the text block ends with its last delta
            writer.write(_chunk(TEXT_STOP))
        writer.write(_chunk(delta_event(spec.size, time.time()) if event is None else event))
        await writer.drain()
    if not tools:
        writer.write(_chunk(TEXT_STOP))
    for event in tail_events(spec.events, spec.tools):
        writer.write(_chunk(event))
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while (headers := await _read_request(reader)) is not None:
            await _send_stream(writer, StreamSpec.parse(headers.get("x-bench", "")))
            if headers.get("connection", "").lower() == "close":
                break
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def serve(port: int = 0) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print(server.sockets[0].getsockname()[1], flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
