"""One response body, read incrementally: decode → frame → interpret.

`ResponseReader` is pure (bytes in, a `ResponseSummary` out) so that tests can feed it the
same wire bytes split at every point and compressed every way. It keeps the first decoded
bytes as the preview. The caller decides the framing once (`stream_framing`, from the
protocol, content type and path) and the reader follows it: a streamed body (SSE, NDJSON,
JSON array, binary event stream) is framed and interpreted as it arrives; a whole body
(`framing=None`: JSON, an HTML error page...) is collected, up to a cap, and parsed at the end.

A stream whose framer had to drop a line longer than its limit is recorded incomplete: part
of the answer is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate

import addons.eventstream
import addons.framing_array  # noqa: F401  (registers the "json-array" framer: Gemini without SSE)
from addons.decode import BodyDecoder
from addons.framing import Framer, SSEDecoder, make_framer
from addons.messages import CUT_MARGIN
from addons.providers.base import ProtocolParser, StreamInterpreter
from addons.records import ResponseSummary


def cut_note(more: int) -> str:
    """What ends a text cut short: how many bytes were left out. ASCII: an ellipsis would make
    CPython hold a capped megabyte of ASCII text at two bytes a character, and every later step
    (the scrubber's and SQLite's encodings) pay for it."""
    return f"\n[... {more} more bytes]"


Scrub = Callable[[str], str | None]
"""A scrubber's pass over a text (`Scrubber.scrub`, `scrub_stream`): the text with its secrets
redacted."""


def cap_text(text: str | None, limit: int, scrub: Scrub | None = None) -> str | None:
    """`text` cut to at most `limit` UTF-8 bytes on a character boundary, with a note (`cut_note`).
    With `scrub`, a text that is cut is scrubbed first around the cut, `CUT_MARGIN` characters
    either side (the writer scrubs what is stored again, all of it; a text that fits is left to it)."""
    if text is None:
        return None
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    return _cut(text, limit, len(data) - limit, scrub, _character_at(text, data, limit))


def _character_at(text: str, data: bytes, offset: int) -> int:
    """The position in `text` of the character byte `offset` of `data` (`text` in UTF-8) is in."""
    if len(data) == len(text):  # ASCII: a byte a character
        return offset
    while offset and data[offset] & 0xC0 == 0x80:  # back to the first byte of the character
        offset -= 1
    return len(data[:offset].decode("utf-8", "surrogatepass"))


def _cut(text: str, limit: int, more: int, scrub: Scrub | None, at: int | None = None) -> str:
    """The first `limit` UTF-8 bytes of `text` (which has more) cut on a character boundary, and
    the note of the `more` bytes left out. With `scrub`, the text up to `CUT_MARGIN` characters
    past the cut is scrubbed first (with `at`, the character the cut falls in: only from
    `CUT_MARGIN` characters before it), so that a secret across the cut is redacted whole, not cut
    into a part no rule knows. The writer scrubs all that is kept again; a secret longer than the
    margin before the cut has a rule for its part (a private key cut off: its base64 so far)."""
    window = text[: limit + CUT_MARGIN]  # at least `limit` bytes: a character is one or more
    if scrub is not None:
        start = 0 if at is None else max(0, at - CUT_MARGIN)
        part = window[start:] if at is None else window[start : at + CUT_MARGIN]
        window = window[:start] + (scrub(part) or part)
    return window.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore") + cut_note(more)


class Preview:
    """The first `limit` bytes of a body, and its total size. It keeps `CUT_MARGIN` bytes more,
    for the scrubber to read across the cut (`text`)."""

    __slots__ = ("buf", "keep", "limit", "total")

    def __init__(self, limit: int) -> None:
        self.buf = bytearray()
        self.limit = limit
        self.keep = limit + CUT_MARGIN
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.keep - len(self.buf)
        if room > 0:
            self.buf += data[:room]

    def text(self, scrub: Scrub | None = None) -> str:
        """The preview as text, cut on a UTF-8 boundary, with a note when it was truncated. With
        `scrub`, a preview cut short is scrubbed with the margin past the cut first (`cap_text`)."""
        shown = min(len(self.buf), self.limit)
        if self.total <= shown:
            return bytes(self.buf).decode("utf-8", "replace")
        more = self.total - shown
        if scrub is not None:
            return _cut(bytes(self.buf).decode("utf-8", "replace"), self.limit, more, scrub)
        text = bytes(self.buf[: self.limit]).decode("utf-8", "replace")
        return (text.rstrip("\ufffd") if len(self.buf) >= self.limit else text) + cut_note(more)


class ResponseReader:
    """Reads one model response for a protocol parser, whatever its framing and encoding."""

    def __init__(
        self,
        parser: ProtocolParser,
        *,
        framing: str | None,
        content_encoding: str | None,
        status: int,
        preview_bytes: int = 65536,
        max_parse_bytes: int = 64 * 1024 * 1024,
        keep_bytes: int = 0,
    ) -> None:
        """`framing` names the stream framer (see `stream_framing`); None reads a whole body.
        `keep_bytes`: keep the decoded body whole up to that size (`body`, `body_truncated`)."""
        self.parser = parser
        self.status = status
        self.decoder = BodyDecoder(content_encoding, sniff=True, max_output=max_parse_bytes)
        self.preview = Preview(preview_bytes)
        self.raw_bytes = 0
        self.decoded_bytes = 0
        """Decoded bytes so far (where the next chunk starts in the decoded body)."""
        self.max_parse_bytes = max_parse_bytes
        self._sse: Framer | None = None
        self._interp: StreamInterpreter | None = None
        if framing is not None:
            self._sse = make_framer(framing)
            self._interp = parser.stream()
            if isinstance(self._sse, SSEDecoder):  # the compiled framer may read its text deltas
                self._sse.native_kind = getattr(self._interp, "native_kind", 0)
                self._sse.native_state = getattr(self._interp, "native_state", None)
        self._body = bytearray()
        self._overflow = False
        self._summary: ResponseSummary | None = None
        self._keep = keep_bytes
        self._kept: list[bytes] = []
        """The decoded stream's pieces kept (`body` joins them: a growing buffer moved its bytes
        again each time it grew past its room, a flood's megabytes several times over)."""
        self._kept_bytes = 0
        self.body_truncated = False
        """More decoded bytes arrived than `keep_bytes` (or than the decoder's cap)."""

    @property
    def body(self) -> bytes:
        """The decoded body kept (a whole body, or the decoded event stream as received), at most
        `keep_bytes`; `body_truncated` says whether more came."""
        if self._sse is not None:
            return b"".join(self._kept)
        if len(self._body) > self._keep:
            self.body_truncated = True
        return bytes(self._body[: self._keep])

    @property
    def streaming(self) -> bool:
        return self._interp is not None

    @property
    def content_started(self) -> bool:
        return self._interp is not None and self._interp.summary.content_started

    @property
    def decode_error(self) -> str | None:
        return self.decoder.error

    def feed(self, chunk: bytes) -> None:
        """Consume the next raw (still content-encoded) body bytes."""
        if not chunk or self._summary is not None:
            return
        size = len(chunk)
        self.raw_bytes += size
        self._consume(chunk if self.decoder.passes(size) else self.decoder.decode(chunk))

    def feed_many(self, chunks: list[bytes]) -> list[int]:
        """Consume several raw chunks in one pass through framer and parser (each is decoded on
        its own); returns where each ends in the decoded body."""
        return self.feed_joined(chunks[0] if len(chunks) == 1 else b"".join(chunks), list(map(len, chunks)))

    def feed_joined(self, data: bytes, sizes: list[int]) -> list[int]:
        """`feed_many` for chunks already joined (a `Chunks` message): `data` holds them one after
        the other, `sizes` gives the length of each."""
        if self._summary is not None:
            return [self.decoded_bytes] * len(sizes)
        if len(sizes) == 1:
            self.feed(data)
            return [self.decoded_bytes]
        size = len(data)
        self.raw_bytes += size
        if self.decoder.passes(size):  # nothing to undo (most streams): no step per chunk
            ends = list(accumulate(sizes, initial=self.decoded_bytes))
            self._consume(data)
            return ends[1:]
        ends, parts, end, start = [], [], self.decoded_bytes, 0
        for length in sizes:
            chunk = data[start : start + length]
            start += length
            decoded = self.decoder.decode(chunk) if chunk else b""
            if decoded:
                parts.append(decoded)
                end += len(decoded)
            ends.append(end)
        self._consume(parts[0] if len(parts) == 1 else b"".join(parts))
        return ends

    def _consume(self, data: bytes) -> None:
        size = len(data)
        if not size:
            return
        self.decoded_bytes += size
        preview = self.preview
        if len(preview.buf) < preview.keep:
            preview.add(data)
        else:  # (full: only counted)
            preview.total += size
        if self._keep and self._sse is not None:  # a whole body is kept in `_body` anyway
            room = self._keep - self._kept_bytes
            if size <= room:
                self._kept.append(bytes(data))  # (a copy only of a buffer that is not `bytes`)
                self._kept_bytes += size
            else:
                if room > 0:
                    self._kept.append(bytes(data[:room]))
                    self._kept_bytes += room
                if size > room:
                    self.body_truncated = True
        if self._sse is not None and self._interp is not None:
            self._interp.feed(self._sse.feed(data))
        elif len(self._body) + len(data) <= self.max_parse_bytes:
            self._body += data
        else:
            self._overflow = True

    def finish(self) -> ResponseSummary:
        """End of body: flush everything and return the summary (idempotent)."""
        if self._summary is not None:
            return self._summary
        self._consume(self.decoder.flush())
        if self.decoder.error and "exceeds" in self.decoder.error:
            self.body_truncated = True
        if self._sse is not None and self._interp is not None:
            self._interp.feed(self._sse.flush())
            summary = self._interp.finish()
            summary.parse_errors += self._sse.invalid_lines + self._sse.overlong_lines
            if self._sse.overlong_lines:
                summary.complete = False  # a dropped line is a missing part of the answer
        elif self._overflow:
            summary = ResponseSummary(parse_errors=1, error_message="body too large to parse")
            self.body_truncated = True
        else:
            summary = self.parser.parse_response(bytes(self._body), self.status)
        self._summary = summary
        return summary
