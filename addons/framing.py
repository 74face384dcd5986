"""Incremental framing of decoded response bodies into events.

Framers share one shape: `feed(bytes) -> list[SSEEvent]`, `flush() -> list[SSEEvent]`, and an
`invalid_lines` counter. Server-Sent Events (`SSEDecoder`) carry most provider streams;
`NDJSONDecoder` reads one JSON document per line (Ollama); `JSONArrayDecoder` reads a streamed
JSON array of objects (Gemini's `:streamGenerateContent` without `alt=sse`). Binary framings
register themselves in `FRAMERS` from their own module. `make_framer(name)` picks one.

SSE details:

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["FRAMERS", "Framer", "JSONArrayDecoder", "NDJSONDecoder", "SSEDecoder", "SSEEvent", "make_framer"]

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
        # the common case is LF only, where a plain split is several times faster than the regex
        lines = _LINE_END.split(buf) if b"\r" in buf else buf.split(b"\n")
        rest = lines.pop()
        for line in lines:
            if self._discarding:
                self._discarding = False
                continue
            self._line(line, events)
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


class Framer(Protocol):
    invalid_lines: int
    overlong_lines: int

    def feed(self, data: bytes) -> list[SSEEvent]: ...

    def flush(self) -> list[SSEEvent]: ...


class NDJSONDecoder:
    """One JSON document per line (`\\n` or `\\r\\n`); each non-empty line is an event's data."""

    def __init__(self, max_line: int = 32 * 1024 * 1024) -> None:
        self.max_line = max_line
        self.invalid_lines = 0
        self.overlong_lines = 0
        self._buf = b""
        self._discarding = False

    def feed(self, data: bytes) -> list[SSEEvent]:
        buf = self._buf + data
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        events = []
        for line in lines:
            if self._discarding:
                self._discarding = False
                continue
            events.extend(self._event(line))
        if len(self._buf) > self.max_line:
            self.overlong_lines += 1
            self._discarding = True
            self._buf = b""
        return events

    def flush(self) -> list[SSEEvent]:
        line, self._buf = self._buf, b""
        return [] if self._discarding else self._event(line)

    @staticmethod
    def _event(line: bytes) -> list[SSEEvent]:
        text = line.strip().decode("utf-8", "replace")
        return [SSEEvent(None, text)] if text else []


class JSONArrayDecoder:
    """Top-level objects of a streamed JSON array (`[{...}\\n,\\r\\n{...}]`), one event each.

    Tracks string and escape state and bracket depth byte by byte only inside elements, so
    brackets and braces inside strings never confuse it. Anything outside the array's
    elements other than `[`, `]`, `,` and whitespace is counted as invalid.
    """

    _WS = frozenset(b" \t\r\n")

    def __init__(self, max_element: int = 64 * 1024 * 1024) -> None:
        self.max_element = max_element
        self.invalid_lines = 0
        self.overlong_lines = 0
        self._elem = bytearray()
        self._depth = 0
        self._in_str = False
        self._escape = False
        self._stray = False

    def feed(self, data: bytes) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        elem, depth, in_str, escape = self._elem, self._depth, self._in_str, self._escape
        start = 0 if depth else None
        for i, byte in enumerate(data):
            if depth == 0:
                if byte == 0x7B:  # "{" starts an element
                    depth, start = 1, i
                elif byte not in self._WS and byte not in (0x2C, 0x5B, 0x5D):  # whitespace , [ ]
                    self._stray = True
                continue
            if in_str:
                if escape:
                    escape = False
                elif byte == 0x5C:
                    escape = True
                elif byte == 0x22:
                    in_str = False
            elif byte == 0x22:
                in_str = True
            elif byte in (0x7B, 0x5B):
                depth += 1
            elif byte in (0x7D, 0x5D):
                depth -= 1
                if depth == 0:
                    elem += data[start : i + 1]
                    events.append(SSEEvent(None, elem.decode("utf-8", "replace")))
                    elem = bytearray()
                    start = None
        if depth and start is not None:
            elem += data[start:]
            if len(elem) > self.max_element:
                self.overlong_lines += 1
                elem, depth, in_str, escape = bytearray(), 0, False, False
        self._elem, self._depth, self._in_str, self._escape = elem, depth, in_str, escape
        if self._stray:
            self.invalid_lines += 1
            self._stray = False
        return events

    def flush(self) -> list[SSEEvent]:
        """A cut-off last element is returned as is (its JSON will not parse: counted there)."""
        if self._depth and self._elem:
            text = self._elem.decode("utf-8", "replace")
            self._elem, self._depth = bytearray(), 0
            return [SSEEvent(None, text)]
        return []


FRAMERS: dict[str, Callable[[], Framer]] = {
    "sse": SSEDecoder,
    "ndjson": NDJSONDecoder,
    "json-array": JSONArrayDecoder,
}


def make_framer(name: str) -> Framer:
    """A fresh framer by name (`sse`, `ndjson`, `json-array`, or one a module registered)."""
    return FRAMERS[name]()
