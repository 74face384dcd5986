"""The framing of a streamed JSON array of objects (Gemini's `:streamGenerateContent` without
`alt=sse`): `JSONArrayDecoder`, one event per top-level element; registered as "json-array" in
`addons.framing.FRAMERS` (the `Framer` shape that module describes)."""

from __future__ import annotations

import re

from addons.framing import FRAMERS, SSEEvent
from addons.possessive import compile_possessive as _compile

__all__ = ["JSONArrayDecoder"]

_OUTSIDE = re.compile(rb"[^ \t\r\n,\[\]]")  # between elements: the next byte that is not , [ ] or space
_IN_ELEMENT = _compile(rb'[^"{}\[\]]*+(?:"[^"\\]*+(?:\\.[^"\\]*+)*+"[^"{}\[\]]*+)*+', re.DOTALL)
"""In an element, outside strings: the run of bytes and whole strings before the next bracket (or
before a string not closed in this chunk), in one scan."""
_IN_STRING = re.compile(rb'["\\]')


def _element_pattern(levels: int) -> re.Pattern[bytes]:
    """A whole element nested at most `levels` deep, as the decoder reads one: from its `{` to the
    bracket that closes it, any bracket counting (`{`, `[` open, `}`, `]` close), strings skipped."""
    string = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
    inner = rb'(?:[^"{}\[\]]++|' + string + rb")*+"
    for _ in range(levels):
        inner = rb'(?:[^"{}\[\]]++|' + string + rb"|[{\[]" + inner + rb"[}\]])*+"
    return _compile(rb"\{" + inner + rb"[}\]]", re.DOTALL)


_ELEMENT = _element_pattern(12)
"""A whole element in one scan (Gemini's nest about 6 deep); others are read bracket by bracket."""


class JSONArrayDecoder:
    """Top-level objects of a streamed JSON array (`[{...}\\n,\\r\\n{...}]`), one event each.

    Tracks string and escape state and bracket depth inside elements, so brackets and braces
    inside strings never confuse it; it jumps from one bracket to the next with regular
    expressions, over whole strings (linear time, a Python step per bracket, not per byte). Anything outside the array's
    elements other than `[`, `]`, `,` and whitespace is counted as invalid.
    """

    def __init__(self, max_element: int = 64 * 1024 * 1024) -> None:
        self.max_element = max_element
        self.invalid_lines = 0
        self.overlong_lines = 0
        self._elem = bytearray()
        self._depth = 0
        self._in_str = False
        self._escape = False

    def feed(self, data: bytes) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        elem, depth, in_str, escape = self._elem, self._depth, self._in_str, self._escape
        start = 0 if depth else None
        stray = False
        pos, end = 0, len(data)
        while pos < end:
            if depth == 0:
                match = _OUTSIDE.search(data, pos)
                if match is None:
                    break
                pos = match.start()
                if data[pos] == 0x7B:  # "{" starts an element
                    whole = _ELEMENT.match(data, pos)
                    if whole is not None:  # all of it is here: one event, no step per bracket
                        events.append(SSEEvent(None, data[pos : whole.end()].decode("utf-8", "replace")))
                        pos = whole.end()
                        continue
                    depth, start = 1, pos
                else:
                    stray = True
                pos += 1
            elif escape:
                escape, pos = False, pos + 1
            elif in_str:
                match = _IN_STRING.search(data, pos)
                if match is None:
                    break
                pos = match.start()
                if data[pos] == 0x5C:
                    escape = True
                else:
                    in_str = False
                pos += 1
            else:
                pos = _IN_ELEMENT.match(data, pos).end()  # type: ignore[union-attr]  (always matches)
                if pos == end:
                    break
                byte = data[pos]
                if byte == 0x22:
                    in_str = True
                elif byte in (0x7B, 0x5B):
                    depth += 1
                else:
                    depth -= 1
                    if depth == 0:
                        elem += data[start : pos + 1]
                        events.append(SSEEvent(None, elem.decode("utf-8", "replace")))
                        elem, start = bytearray(), None
                pos += 1
        if depth and start is not None:
            elem += data[start:]
            if len(elem) > self.max_element:
                self.overlong_lines += 1
                elem, depth, in_str, escape = bytearray(), 0, False, False
        self._elem, self._depth, self._in_str, self._escape = elem, depth, in_str, escape
        if stray:
            self.invalid_lines += 1
        return events

    def flush(self) -> list[SSEEvent]:
        """A cut-off last element is returned as is (its JSON will not parse: counted there)."""
        if self._depth and self._elem:
            text = self._elem.decode("utf-8", "replace")
            self._elem, self._depth = bytearray(), 0
            return [SSEEvent(None, text)]
        return []


FRAMERS["json-array"] = JSONArrayDecoder
