"""Incremental framing of decoded response bodies into events.

Framers share one shape: `feed(bytes) -> list[SSEEvent]`, `flush() -> list[SSEEvent]`, and an
`invalid_lines` counter. Server-Sent Events (`SSEDecoder`) carry most provider streams;
`NDJSONDecoder` reads one JSON document per line (Ollama); `addons.framing_array.JSONArrayDecoder`
reads a streamed JSON array of objects (Gemini's `:streamGenerateContent` without `alt=sse`).
It and the binary framings register themselves in `FRAMERS` from their own modules;
`make_framer(name)` picks one.

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
from typing import Protocol

import msgspec

from addons.possessive import compile_possessive as _compile
from capsem import native

__all__ = ["FRAMERS", "Framer", "NDJSONDecoder", "SSEDecoder", "SSEEvent", "make_framer"]

_LINE_END = re.compile(rb"\r\n|\r|\n")
_LONE_CR = re.compile(rb"\r(?!\n)")
"""A CR that is not part of a CRLF (or ends the chunk: its LF may start the next one)."""
_PLAIN_EVENT = _compile(r"(event: ([^\n]*+)\n)?data: ([^\n]*+)\n\n")
"""An ordinary event: `data: ` and its one line, maybe after `event: ` and its line, then a blank line."""
_PLAIN_EVENTS = _compile(r"\n*+(?:(?:event: [^\n]*+\n)?data: [^\n]*+\n\n++)*+")
"""Text made of ordinary events only (extra blank lines dispatch nothing)."""
_BOM = b"\xef\xbb\xbf"
_HOLD = 64 * 1024
"""The compiled path holds back the complete lines of an event not yet ended up to this size, so
that the event is read whole in the next pass (not line by line now, then again as a pending one)."""


class SSEEvent(msgspec.Struct):
    """One dispatched Server-Sent Event (a msgspec Struct: a dataclass built several times faster)."""

    event: str | None
    """The `event:` field, or None when the event had no `event:` line."""
    data: str
    """The `data:` lines joined with newlines."""
    id: str | None = None


class SSEDecoder:
    """Split a byte stream into SSE events, whatever the chunking, in time linear in its size.

    Bytes of a line not yet ended wait in `_tail`; a chunk without any line end is only
    appended there, so a huge line fed in small pieces is never re-scanned. A line longer
    than `max_line` is dropped (counted in `overlong_lines`) as soon as it is known to be.

    For speed, line ends are first made LF (CRLF and lone CR are line ends too, so this
    changes no line), the text is cut into events at blank lines by `bytes.split`, and an
    ordinary event (one `data:` line, maybe after an `event:` line) is read without a
    Python step per line; anything else goes line by line through the same rules.
    """

    def __init__(self, max_line: int = 32 * 1024 * 1024) -> None:
        self.max_line = max_line
        self.overlong_lines = 0
        self.invalid_lines = 0
        """Lines with an unknown field name (garbage in the stream); counted, then ignored."""
        self._tail = bytearray()
        self._held = b""
        """(compiled path) The complete lines of an event not yet ended, read before `_tail`."""
        self._skip_lf = False
        self._discarding = False
        self._started = False
        self._event: str | None = None
        self._data: list[str] = []
        self._id: str | None = None
        self.native_kind = 0
        """Which text chunks the compiled fast path reads itself (1: Anthropic, 2: OpenAI Chat, 3:
        OpenAI Responses, 4: Gemini); they then come back as lists among the events (see
        capsem/native). 0 for plain events only."""
        self.native_state: Callable[[], object] | None = None
        """The reader's state the fast path compares chunks with (for OpenAI Chat and Gemini: the
        id and model it last said), asked before each native pass; None when it needs none."""

    def feed(self, data: bytes) -> list[SSEEvent]:
        if not data:
            return []
        if not self._started:
            data = self._start(data)
        elif self._skip_lf:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        if self._discarding:
            data = self._discard(data)
        if not data:
            return []
        if self._tail or self._held:
            if b"\n" not in data and b"\r" not in data:
                self._tail += data
                events: list[SSEEvent] = []
                self._check_tail(events)
                return events
            data = self._held + bytes(self._tail) + data
            self._held = b""
        if b"\r" in data:
            lf = native.crlf_to_lf(data) if native.frame_plain is not None else None  # type: ignore[misc]
            if lf is not None:  # CRLF line ends only (Gemini's), made LF in one native pass
                data = lf
            elif _LONE_CR.search(data) is None:  # the same, without the fast path: drop the CRs
                data = data.translate(None, b"\r")
            else:
                self._skip_lf = data.endswith(b"\r")  # a CRLF may be split across chunks
                data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        events = []
        rest = self._lines(data, events)
        if rest:
            self._tail = bytearray(rest)
            self._check_tail(events)
        elif self._tail:
            self._tail = bytearray()
        return events

    def flush(self) -> list[SSEEvent]:
        """End of body: the unterminated last line and any pending event (see module doc)."""
        events: list[SSEEvent] = []
        self._release(events)
        if self._tail and not self._discarding:
            self._raw_line(bytes(self._tail), events)
        self._tail = bytearray()
        self._discarding = False
        self._dispatch(events)
        return events

    def _start(self, data: bytes) -> bytes:
        """Drop a UTF-8 byte order mark at the very start (held back until it is certain)."""
        buf = bytes(self._tail) + data
        if len(buf) < 3 and _BOM.startswith(buf):
            self._tail = bytearray(buf)
            return b""
        self._started = True
        self._tail = bytearray()
        return buf[3:] if buf.startswith(_BOM) else buf

    def _discard(self, data: bytes) -> bytes:
        """Skip the rest of an overlong line: what follows its line end."""
        match = _LINE_END.search(data)
        if match is None:
            return b""
        self._discarding = False
        if match.group() == b"\r" and match.end() == len(data):
            self._skip_lf = True
        return data[match.end() :]

    def _check_tail(self, events: list[SSEEvent]) -> None:
        if len(self._tail) > self.max_line:
            self._release(events)  # the lines before the dropped one
            self.overlong_lines += 1
            self._discarding = True
            self._tail = bytearray()

    def _release(self, events: list[SSEEvent]) -> None:
        """Read the lines held back (`_held`) now."""
        if self._held:
            held, self._held = self._held, b""
            for line in held.decode("utf-8", "replace").split("\n")[:-1]:
                self._line(line, events)

    def _lines(self, buf: bytes, events: list[SSEEvent]) -> bytes:
        """Read the complete lines of `buf` (LF line ends only); return the unterminated rest."""
        cut = buf.rfind(b"\n") + 1
        if cut > self.max_line:  # some line may be too long: measure each in bytes
            lines = buf.split(b"\n")
            for line in lines[:-1]:
                self._raw_line(line, events)
            return lines[-1]
        # every line is short enough: decode once (a line end never splits a UTF-8 sequence)
        whole = buf if cut == len(buf) else buf[:cut]
        if native.frame_plain is not None:
            last = self._native_events(whole, events)
        else:
            last = self._python_events(whole.decode("utf-8", "replace"), events)
        if last:
            for line in last.split("\n")[:-1]:
                self._line(line, events)
        return buf[cut:] if cut < len(buf) else b""

    def _python_events(self, text: str, events: list[SSEEvent]) -> str:
        """The events of complete lines up to their last blank line; returns the lines after it."""
        start, end = 0, text.rfind("\n\n") + 2  # just after the last blank line
        if end > 1 and (self._data or self._event is not None):  # the first block ends the pending event
            start = text.find("\n\n") + 2
            self._block(text[: start - 2], events)
        one = _PLAIN_EVENT.fullmatch(text, start, end) if end > 1 else None
        if one is not None:  # exactly one ordinary event (most chunks of a paced stream)
            events.append(SSEEvent(one[2] if one[1] else None, one[3], self._id))
            return text[end:]
        if end > 1 and _PLAIN_EVENTS.fullmatch(text, start, end):
            # only ordinary events up to there: read by two regex scans, no Python step per event
            ident = self._id
            found = _PLAIN_EVENT.findall(text, start, end)
            events += [SSEEvent(name if line else None, data, ident) for line, name, data in found]
            return text[end:]
        return self._blocks(text[start:], events)

    def _native_events(self, whole: bytes, events: list[SSEEvent]) -> str:
        """What `_lines` does with complete lines, the ordinary events read by the compiled fast
        path (byte offsets: every cut is at an ASCII newline, so each slice decodes as in `_lines`)."""
        start, end = 0, whole.rfind(b"\n\n") + 2
        if end < 2:
            return self._hold(whole)
        if self._data or self._event is not None:  # the first block ends the pending event
            start = whole.find(b"\n\n") + 2
            self._block(whole[: start - 2].decode("utf-8", "replace"), events)
        state = self.native_state() if self.native_state is not None else None
        read = native.frame_plain(whole, start, end, self._id, SSEEvent, self.native_kind, state)  # type: ignore[misc]
        if read is None:  # not only ordinary events: the Python reader
            return self._blocks(whole[start:].decode("utf-8", "replace"), events)
        events += read
        return self._hold(whole[end:])

    def _hold(self, lines: bytes) -> str:
        """Complete lines after the last blank line: held back whole when short and nothing is
        pending (`_held`: the next pass reads their event whole), else returned to be read now."""
        if len(lines) <= _HOLD and not self._data and self._event is None:
            self._held = lines
            return ""
        return lines.decode("utf-8", "replace")

    def _blocks(self, text: str, events: list[SSEEvent]) -> str:
        """The events of `text` (complete lines) up to its last blank line; returns the lines after it."""
        blocks = text.split("\n\n")  # each ends with a blank line
        last = blocks.pop()
        if blocks and (self._data or self._event is not None):
            self._block(blocks.pop(0), events)  # it continues the pending event
        for block in blocks:  # the usual events first: one data line, maybe after an event line
            if block[:7] == "event: ":
                end = block.find("\n")
                if block[end + 1 : end + 7] == "data: " and block.find("\n", end + 1) < 0:
                    events.append(SSEEvent(block[7:end], block[end + 7 :], self._id))
                    continue
            elif block[:6] == "data: " and "\n" not in block:
                events.append(SSEEvent(None, block[6:], self._id))
                continue
            elif not block:  # more blank lines: nothing pending, nothing to dispatch
                continue
            self._block(block, events)
        return last

    def _block(self, block: str, events: list[SSEEvent]) -> None:
        """The lines before a blank line, then the blank line."""
        for line in block.split("\n"):
            self._line(line, events)
        self._dispatch(events)

    def _raw_line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if len(raw) > self.max_line and raw[:1] != b":":  # a comment is ignored whatever its size
            self.overlong_lines += 1
        else:
            self._line(raw.decode("utf-8", "replace"), events)

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line[0] == ":":
            return
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
    """One JSON document per line (`\\n` or `\\r\\n`); each non-empty line is an event's data.

    Like `SSEDecoder`, an unterminated line waits in a buffer that a chunk without a newline
    only extends (linear time); one longer than `max_line` is dropped and counted.
    """

    def __init__(self, max_line: int = 32 * 1024 * 1024) -> None:
        self.max_line = max_line
        self.invalid_lines = 0
        self.overlong_lines = 0
        self._tail = bytearray()
        self._discarding = False

    def feed(self, data: bytes) -> list[SSEEvent]:
        if self._discarding:
            end = data.find(b"\n")
            if end < 0:
                return []
            self._discarding = False
            data = data[end + 1 :]
        if b"\n" not in data:
            self._tail += data
            self._check_tail()
            return []
        if self._tail:
            data = bytes(self._tail) + data
        lines = data.split(b"\n")
        self._tail = bytearray(lines.pop())
        self._check_tail()
        return [event for line in lines for event in self._event(line)]

    def flush(self) -> list[SSEEvent]:
        line, self._tail = bytes(self._tail), bytearray()
        return [] if self._discarding else self._event(line)

    def _check_tail(self) -> None:
        if len(self._tail) > self.max_line:
            self.overlong_lines += 1
            self._discarding = True
            self._tail = bytearray()

    @staticmethod
    def _event(line: bytes) -> list[SSEEvent]:
        text = line.strip().decode("utf-8", "replace")
        return [SSEEvent(None, text)] if text else []


FRAMERS: dict[str, Callable[[], Framer]] = {
    "sse": SSEDecoder,
    "ndjson": NDJSONDecoder,
}


def make_framer(name: str) -> Framer:
    """A fresh framer by name (`sse`, `ndjson`, `json-array`, or one a module registered)."""
    return FRAMERS[name]()
