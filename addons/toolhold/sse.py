"""Server-sent events cut into whole events, exactly as received, for a hold machine.

An event ends at a blank line; lines end with CRLF, LF or CR (the SSE spec), so a CR at the end
of what has arrived waits for the next byte (it may be a CRLF's first half). Bytes are never
changed here: the events joined are the input. Only whole events go to the machine, so a chunk
cut mid-event or mid-UTF-8 character waits for the rest of that event, unless the machine says
from its first line that it will let it through unchanged (`passes`): then its bytes go out as
they come.
"""

from __future__ import annotations

import logging
import re

from addons.toolhold.base import EventMachine, StreamHold

logger = logging.getLogger("addons.proxy.capture")

_EVENT_END = re.compile(rb"(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r)")
"""A line's end, then an empty line's: a CR before an LF is never a line end of its own."""
_LINE = re.compile(rb"\r\n|\r|\n")


def split_events(buffer: bytearray, final: bool = False) -> list[bytes]:
    """Take the whole events off the front of `buffer` (all of it when `final`)."""
    if b"\r" not in buffer:  # every provider's line ends: `find`, not the regex's char-by-char scan
        return _split_lf(buffer, final)
    out: list[bytes] = []
    start = 0
    while True:
        m = _EVENT_END.search(buffer, start)
        if m is None:
            break
        end = m.end()
        if buffer[end - 1] == 0x0D and end == len(buffer) and not final:
            break  # a CR last: maybe a CRLF cut in two
        if end < len(buffer) and buffer[end - 1] == 0x0D and buffer[end] == 0x0A:
            end += 1  # the blank line's CRLF
        out.append(bytes(buffer[start:end]))
        start = end
    if final and start < len(buffer):
        out.append(bytes(buffer[start:]))
        start = len(buffer)
    del buffer[:start]
    return out


def _split_lf(buffer: bytearray, final: bool) -> list[bytes]:
    """`split_events` for a buffer with no CR: an event ends at the first LF LF."""
    out: list[bytes] = []
    start = 0
    while (at := buffer.find(b"\n\n", start)) >= 0:
        out.append(bytes(buffer[start : at + 2]))
        start = at + 2
    if final and start < len(buffer):
        out.append(bytes(buffer[start:]))
        start = len(buffer)
    del buffer[:start]
    return out


def data_of(raw: bytes) -> bytes | None:
    """An event's data lines joined by LF (the SSE rule); None when it has none."""
    split = _LINE.split(raw) if b"\r" in raw else raw.split(b"\n")
    lines = [line for line in split if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(line[6:] if line[5:6] == b" " else line[5:] for line in lines)


class SseHold(StreamHold):
    """`flow.response.stream` for an SSE answer: whole events to the machine, what it lets go out.

    Returns a list of chunks, empty while everything is held: mitmproxy sends each item as it
    is, and an empty `bytes` would be an empty HTTP/1.1 chunk, which ends a chunked body.

    Never raises into mitmproxy: a failure lets everything held and everything after go through
    unchanged (the agent's answer is never broken by capsem), and says so in the log."""

    __slots__ = ("ahead", "buffer")

    def __init__(self, machine: EventMachine) -> None:
        super().__init__(machine)
        self.buffer = bytearray()
        self.ahead = 0
        """Bytes of the event still arriving already sent: one the machine lets through unread
        (`passes`, e.g. a text delta cut across reads goes out as it comes)."""

    def take(self, chunk: bytes) -> bytes:
        """What goes out for `chunk` (b"" ends the answer), as one `bytes`."""
        if self.failure is not None:
            return chunk
        out: list[bytes] = []
        final = not chunk
        self.buffer += chunk
        if not final and (quiet := self._untouched()):  # nothing to hold: whole events go out as one
            out.append(quiet)
        events = split_events(self.buffer, final)
        for i, raw in enumerate(events):
            try:
                given = self.machine.event(raw, data_of(raw))
                if self.ahead:  # its start is gone already: the machine must have let it through
                    if given != [raw]:
                        raise RuntimeError("an event sent ahead was held or changed")
                    given, self.ahead = [raw[self.ahead :]], 0
                out += given
            except Exception as exc:  # never break the agent's answer
                return b"".join(out) + self.fail(exc, raw, events[i + 1 :])
        if final:
            try:
                out += self.machine.finish()
            except Exception as exc:
                return b"".join(out) + self.fail(exc, b"", [])
        elif self.buffer and (self.ahead or self.machine.passes(self.buffer)):
            out.append(bytes(self.buffer[self.ahead :]))
            self.ahead = len(self.buffer)
        return b"".join(out)

    def _untouched(self) -> bytes:
        """The whole events at the buffer's front, taken off it, when the machine would let every one
        through unread (b"" otherwise); the part of the first already sent ahead is not sent again."""
        buffer = self.buffer
        if b"\r" in buffer:
            return b""
        end = buffer.rfind(b"\n\n") + 2
        if end < 2 or not self.machine.untouched(buffer[:end]):
            return b""
        out = bytes(buffer[self.ahead : end])
        del buffer[:end]
        self.ahead = 0
        return out

    def fail(self, exc: Exception, current: bytes, later: list[bytes]) -> bytes:
        """Give up holding: what the machine held, the event it failed on and the rest, unchanged."""
        self.failure = f"tool hold failed: {exc!r}"
        logger.warning("capsem: %s; the answer passes unchanged", self.failure)
        held = list(self.machine.held)
        if current and not (held and held[-1] is current):
            held.append(current[self.ahead :])  # an event sent ahead: only what is not out yet
        rest = bytes(self.buffer)  # a new partial event: none of it sent
        self.buffer, self.ahead = bytearray(), 0
        return b"".join([*held, *later, rest])
