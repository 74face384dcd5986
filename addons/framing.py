"""Incremental framing of decoded response bodies into Server-Sent Events.

WHATWG rules: lines end at CRLF, LF or a lone CR, split on raw bytes before UTF-8 decoding
(so U+2028 or U+0085 inside data never split a line, and a multibyte character torn across
chunks comes out whole); a CR ending one chunk and an LF starting the next are one line end.
`field: value` strips exactly one space; lines starting with `:` are comments; several `data`
lines join with newlines; a blank line dispatches an event if it has data. `[DONE]` is not
filtered here: protocol interpreters decide what it means.

Policy at end of body (`flush`): a last line without terminator counts, and an event that
never got its blank line IS emitted, because a recorder keeps what was received (the SDKs
drop it; the spec discards it). Lines longer than `max_line` are dropped and counted, and so
are lines with an unknown field name (garbage).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEEvent"]

_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(slots=True)
class SSEEvent:
    """One dispatched Server-Sent Event."""

    event: str | None
    """The `event:` field, or None when the event had no `event:` line."""
    data: str
    """The `data:` lines joined with newlines."""
    id: str | None = None


class SSEDecoder:
    """Split a byte stream into SSE events, whatever the chunking."""

    def __init__(self, max_line: int = 32 * 1024 * 1024) -> None:
        self.max_line = max_line
        self.overlong_lines = 0
        self.invalid_lines = 0
        """Lines with an unknown field name (garbage in the stream); counted, then ignored."""
        self._buf = b""
        self._skip_lf = False
        self._discarding = False
        self._started = False
        self._event: str | None = None
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, data: bytes) -> list[SSEEvent]:
        if not data:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        if not self._started and (self._buf or data):
            buf = self._buf + data
            if len(buf) < 3 and b"\xef\xbb\xbf".startswith(buf):
                self._buf = buf
                return []
            self._started = True
            self._buf = buf[3:] if buf.startswith(b"\xef\xbb\xbf") else buf
            data = b""
        buf = self._buf + data if data else self._buf
        events: list[SSEEvent] = []
        pos = 0
        for match in _LINE_END.finditer(buf):
            line = buf[pos : match.start()]
            pos = match.end()
            if self._discarding:
                self._discarding = False
                continue
            self._line(line, events)
        rest = buf[pos:]
        if rest == b"" and buf.endswith(b"\r"):
            self._skip_lf = True
        if self._discarding:
            rest = b""
        elif len(rest) > self.max_line:
            self.overlong_lines += 1
            self._discarding = True
            rest = b""
        self._buf = rest
        return events

    def flush(self) -> list[SSEEvent]:
        """End of body: the unterminated last line and any pending event (see module doc)."""
        events: list[SSEEvent] = []
        if self._buf and not self._discarding:
            self._line(self._buf, events)
        self._buf = b""
        self._discarding = False
        self._dispatch(events)
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            self._dispatch(events)
            return
        if raw[:1] == b":":
            return
        if len(raw) > self.max_line:
            self.overlong_lines += 1
            return
        line = raw.decode("utf-8", "replace")
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name != "retry":
            self.invalid_lines += 1

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._data:
            events.append(SSEEvent(self._event, "\n".join(self._data), self._id))
        self._event = None
        self._data = []
