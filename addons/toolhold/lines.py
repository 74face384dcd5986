"""An NDJSON answer (Ollama's native API) cut into its lines, exactly as received, for the hold
machine: each line is an event, its JSON (without the line end) the event's data. A line cut
across reads waits for its end; a chunk of whole lines that holds no call goes out at once."""

from __future__ import annotations

import logging

from addons.toolhold.base import EventMachine, StreamHold

logger = logging.getLogger("addons.proxy.capture")


def split_lines(buffer: bytearray, final: bool = False) -> list[bytes]:
    """Take the whole lines (each with its LF) off the front of `buffer` (all of it when `final`)."""
    end = len(buffer) if final else buffer.rfind(b"\n") + 1
    whole, out = bytes(buffer[:end]), []
    del buffer[:end]
    start = 0
    while (at := whole.find(b"\n", start)) >= 0:
        out.append(whole[start : at + 1])
        start = at + 1
    if start < len(whole):
        out.append(whole[start:])
    return out


class LineHold(StreamHold):
    """`flow.response.stream` for an NDJSON answer (see `SseHold` for the contract: a list of
    chunks, never an empty one; a failure lets everything through unchanged)."""

    __slots__ = ("buffer",)

    def __init__(self, machine: EventMachine) -> None:
        super().__init__(machine)
        self.buffer = bytearray()

    def take(self, chunk: bytes) -> bytes:
        if self.failure is not None:
            return chunk
        self.buffer += chunk
        lines = split_lines(self.buffer, final=not chunk)
        joined = b"".join(lines)
        if chunk and self.machine.untouched(joined):
            return joined
        out: list[bytes] = []
        for i, line in enumerate(lines):
            try:
                out += self.machine.event(line, line.strip() or None)
            except Exception as exc:  # never break the agent's answer
                self.failure = f"tool hold failed: {exc!r}"
                logger.warning("capsem: %s; the answer passes unchanged", self.failure)
                rest, self.buffer = bytes(self.buffer), bytearray()
                return b"".join([*out, *self.machine.held, *lines[i:], rest])
        if not chunk:
            out += self.machine.finish()
        return b"".join(out)
