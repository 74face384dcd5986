"""A streamed response as the recorder reads it: its reader, when its content started, where each
chunk ends in the decoded body and when it came (`response_chunks`, for `capsem replay`), and the
chunks held back once the content started, to be decoded, framed and parsed in one pass."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from addons.body import ResponseReader
from capsem import native

MAX_CHUNKS = 100_000
"""Chunks of one response whose timing is kept (`response_chunks`); the rest arrive with the last."""


@dataclass(slots=True)
class StreamRead:
    reader: ResponseReader
    started: float = 0.0
    """When the request was sent (chunk times count from it)."""
    first_content: float | None = None
    chunks: list[tuple[int, int]] = field(default_factory=list)
    """(decoded end, ms after the request) of each chunk (`response_chunks`)."""
    held: list[bytes] = field(default_factory=list)
    """Chunks that came after the content started, fed together at the end of their batch: the
    bytes of each message, one after the other (a `Chunks` message holds several chunks)."""
    held_sizes: list[int] = field(default_factory=list)
    """The length of each held chunk."""
    held_at: list[float] = field(default_factory=list)
    """When each held chunk came."""

    def take(self, data: bytes, at: float) -> bool:
        """Feed a chunk until the content starts (its time is that chunk's), then hold it for
        `feed_held`; True when this chunk is the first one held since the last feed."""
        if self.first_content is not None:
            return self._hold(data, [len(data)], [at])
        self.reader.feed(data)
        self._note(self.reader.decoded_bytes, at)
        if self.reader.content_started:
            self.first_content = at
        return False

    def take_many(self, data: bytes, sizes: list[int], times: list[float]) -> bool:
        """`take` for the chunks of one `Chunks` message (`data` joined, `sizes` of each): once the
        content started (the common case), all held in one step."""
        if self.first_content is not None:
            return self._hold(data, sizes, times)
        start = 0
        for i, size in enumerate(sizes):
            if self.first_content is not None:
                return self._hold(data[start:], sizes[i:], times[i:])
            self.take(data[start : start + size], times[i])
            start += size
        return False

    def _hold(self, data: bytes, sizes: list[int], times: list[float]) -> bool:
        self.held.append(data)
        self.held_sizes += sizes
        self.held_at += times
        return len(self.held) == 1

    def feed_held(self) -> None:
        """Feed the held chunks at once: decoding and framing several chunks in one pass costs less
        than one by one, and gives the same result (each is decoded on its own, so its end is known)."""
        held, sizes, times = self.held, self.held_sizes, self.held_at
        self.held, self.held_sizes, self.held_at = [], [], []
        noted, started = self.chunks, self.started
        ends = self.reader.feed_joined(held[0] if len(held) == 1 else b"".join(held), sizes)
        if native.note_ends is not None:  # the loop below, compiled
            native.note_ends(noted, ends, times, started, MAX_CHUNKS)
            return
        last = noted[-1][0] if noted else -1
        for end, at in zip(ends, times, strict=True):  # `_note`, inlined
            if end > last and len(noted) < MAX_CHUNKS:
                noted.append((end, max(0, round((at - started) * 1000))))
                last = end

    def _note(self, end: int, at: float) -> None:
        if len(self.chunks) < MAX_CHUNKS and (not self.chunks or end > self.chunks[-1][0]):
            self.chunks.append((end, max(0, round((at - self.started) * 1000))))


def chunks_json(chunks: list[tuple[int, int]]) -> str:
    """A `response_chunks.chunks` value: JSON [[end, ms], ...]."""
    return msgspec.json.encode(chunks).decode()
