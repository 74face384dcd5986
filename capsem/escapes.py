"""Scrubbing what a text means, not how it is escaped: the decoded view of a text.

An escape can hide a secret from every pattern: in a JSON string `\\nAKIA…` glues the key to the
`n` of the escape (no word boundary before it), `\\u0073k-ant-…` spells a letter of the key as an
escape, and a value ends at the backslash of `ab\\/cd` or `ab\\u00e4cd`; in URL-encoded text
`sk%2Dant-…` does the same. So the scrubber reads a view of the text in which those escapes say
what they mean, and writes each redaction back over the whole raw span it covers, escapes
included (`DecodedView.write_back`):

- JSON's whitespace escapes (`\\n`, `\\r`, `\\t`, `\\f`, `\\b`: nearly all of the escapes of a
  real body) become two characters that mean the same, so no position moves: `\\n` a line break
  as Windows writes it (`\\r\\n`: a line still ends right there, `$` and `\\r?\\n` see it), `\\r`
  two carriage returns, `\\t` and `\\f` a blank and the character, `\\b` two blanks;
- `\\/`, `\\uXXXX` (a surrogate pair as one character) and `%XX` of an unreserved URL character
  (a letter, a digit, `-`, `.`, `_`, `~`) become that character (a non-ASCII one: `NON_ASCII`);
  the view is shorter there, and a table of those places maps each view position back to the raw
  one.

`\\"` and `\\\\` stay as they are: they are the structure by which the scrubber reads a quoted
value at any JSON escaping depth whole (`capsem.secret_names`), and no pattern stops inside a key
at a backslash (a rule's end accepts one). `\\u0022`, `\\u005c`, a lone surrogate and an escaped
control character below a blank stay too. `+` is not read as a blank: a form's value keeps its
extent (`password=a+b` is one value). The view is built only when the text holds a backslash or
a `%` (one `memchr` each), and the shorter decode only where such escapes are.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass

from capsem import native
from capsem.markers import redacted
from capsem.stream_scrub import marker_spans

_PAIRED = frozenset("nrtfb")
NON_ASCII = "\x7f"
"""What a non-ASCII character written as `\\uXXXX` reads as: one character that continues a value
and ends a key, so that an ASCII text's view stays ASCII (Python's `re`, the encoding and
Hyperscan's offsets are several times faster on an ASCII string)."""
_SAME_LENGTH = {"r": "\r\r", "t": " \t", "f": " \f", "b": "  "}
_JSON_ESCAPE_RE = re.compile(
    r"\\(?:[rtfb/]|u(?P<u>[0-9a-fA-F]{4})(?:\\u(?P<low>[dD][c-fC-F][0-9a-fA-F]{2}))?)"
)
_PERCENT_RE = re.compile(r"%(?P<pct>[0-9A-Fa-f]{2})")
"""Each starts with its one literal character: Python's `re` then looks for it, not at every position."""
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _decoded(m: re.Match[str]) -> str | None:
    """What an escape stands for in the view, or None to keep it as it is."""
    if m.re is _PERCENT_RE:
        char = chr(int(m.group("pct"), 16))
        return char if char in _UNRESERVED else None
    if m.group("u") is None:
        letter = m.group(0)[1]
        return "/" if letter == "/" else _SAME_LENGTH[letter]
    code = int(m.group("u"), 16)
    if 0xD800 <= code < 0xDC00:
        return NON_ASCII if m.group("low") else None  # a surrogate pair: one character
    if (code < 0x20 and code not in (9, 10, 13)) or code in (0x22, 0x5C) or 0xDC00 <= code < 0xE000:
        return None
    return chr(code) if code < 0x80 else NON_ASCII


_NON_ASCII_RE = re.compile("[^\x00-\x7f]")


def ascii_view(text: str) -> str:
    """`text` with each non-ASCII character read as `NON_ASCII` (same length, same places): as
    gitleaks' RE2 patterns read it (their `\\w`, `\\s` and `\\b` are ASCII), and several times faster
    to scan than a text of two- or four-byte characters."""
    if text.isascii():
        return text
    return native.ascii_view(text) if native.ascii_view is not None else _NON_ASCII_RE.sub(NON_ASCII, text)


@dataclass(frozen=True)
class DecodedView:
    """A text as the scrubber reads it, and where its shorter decodes are."""

    text: str
    places: tuple[int, ...] = ()
    """View positions of the characters decoded from a longer escape, in order."""
    shifts: tuple[int, ...] = ()
    """Per place: how many raw characters lie before the next view position, beyond the view's."""

    def raw(self, position: int) -> int:
        """The raw position of a view position (of the start of the escape it was decoded from)."""
        i = bisect.bisect_left(self.places, position)
        return position + (self.shifts[i - 1] if i else 0)

    def write_back(self, raw: str, scrubbed: str) -> str | None:
        """`raw` with the redactions that turned the view into `scrubbed` made over the raw spans
        they cover (each marker the one the scrubber wrote); None when they cannot be placed."""
        spans = marker_spans(self.text, scrubbed)
        if spans is None:
            return None
        out, done = [], 0
        for start, end in spans:
            raw_start, raw_end = self.raw(start), self.raw(end)
            if raw_start > 0 and raw[raw_start - 1] == "\\" and raw[raw_start] in _PAIRED:
                raw_start -= 1  # never half an escape: `\\n` is two characters of the view
            if 0 < raw_end < len(raw) and raw[raw_end - 1] == "\\" and raw[raw_end] in _PAIRED:
                raw_end += 1
            out += [raw[done:raw_start], redacted(self.text[start:end])]
            done = raw_end
        return "".join(out) + raw[done:]


def decoded_view(text: str) -> DecodedView | None:
    """The view of `text` (see module doc), or None when no escape changes it (in one pass of
    `capsem.native.decoded_view` when it is built, else `python_view`)."""
    if native.decoded_view is None:
        return python_view(text)
    found = native.decoded_view(text)
    return None if found is None else DecodedView(*found)


def python_view(text: str) -> DecodedView | None:
    """`decoded_view` in Python: the reference."""
    has_backslash, has_percent = "\\" in text, "%" in text
    if not (has_backslash or has_percent):
        return None
    view = text.replace("\\n", "\r\n") if has_backslash else text  # the common escape, in C
    matches = list(_JSON_ESCAPE_RE.finditer(view)) if has_backslash else []
    if has_percent:
        matches = sorted([*matches, *_PERCENT_RE.finditer(view)], key=lambda m: m.start())
    out: list[str] = []
    places: list[int] = []
    shifts: list[int] = []
    done = length = shift = 0
    for m in matches:
        replacement = _decoded(m) if m.start() >= done else None
        if replacement is None:
            continue
        out.append(view[done : m.start()])
        length += m.start() - done
        if len(replacement) < m.end() - m.start():
            places.append(length)
            shift += m.end() - m.start() - len(replacement)
            shifts.append(shift)
        out.append(replacement)
        length += len(replacement)
        done = m.end()
    if not out:
        return DecodedView(view) if view is not text else None
    out.append(view[done:])
    return DecodedView("".join(out), tuple(places), tuple(shifts))


def scrub_decoded(
    text: str, scrub: Callable[[str], str], rounds: int = 1, holds: Callable[[str], bool] | None = None
) -> str:
    """`scrub` applied to what `text` means (its decoded view) until it holds (at most `rounds`
    times), the redactions written back over the raw escapes they cover; on `text` itself when
    nothing in it is escaped. (The view of the written-back text is the scrubbed view, markers
    holding no escape: later rounds run on it, and the redactions are written back once.)
    `holds(scrubbed)`, when given, may say a changed text holds without a whole round more."""
    view = decoded_view(text)
    current = text if view is None else view.text
    for _ in range(rounds):
        scrubbed = scrub(current)
        if scrubbed == current:
            break
        current = scrubbed
        if holds is not None and holds(current):
            break
    if view is None or current == view.text:
        return current if view is None else text
    written = view.write_back(text, current)
    if written is not None:
        return written
    for _ in range(rounds):  # a later round's marker over an earlier one's: write back round by round
        view = decoded_view(text)
        scrubbed = scrub(text if view is None else view.text)
        written = scrubbed if view is None else view.write_back(text, scrubbed)
        if written is None or written == text:
            return scrub(text) if written is None else text
        text = written
    return text
