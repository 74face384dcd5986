"""Exact bodies and conversation items, stored once: every model and MCP call's whole request and
response, linear in the conversation, not quadratic.

An agent resends its whole history every turn, so a naive store grows with the square of the
number of turns. Here a body is cut into pieces at the start of every JSON object that names a
role, a type or a name (`{"role"`, `{"type"`, `{"name"`…: a message, a content block, a tool
definition; these bytes cannot occur inside a JSON string, where `"` is escaped) and at most
`MAX_PIECE` bytes apart. Each piece is stored once per session (`body_chunks`, keyed by the
SHA-256 of its bytes); a body is the list of its pieces' keys. The list itself grows with the
history, and the change of a turn often lies in its middle (Claude Code sends `messages` before
`system` and `tools`, and moves its cache marker every turn), so it is stored as runs of the lists
of the last few bodies (`event_body_blobs.runs`, JSON: `[base_id, start, count]`) and the keys no
earlier body lists (`chunks`, taken `n` at a time where `runs` holds the integer `n`): a turn costs
its new keys and a few runs. A list is stored whole once it would follow `MAX_DEPTH` links.

What one call adds (its new conversation items, the new pieces of its request, its response) is
compressed together as one zstd frame (`content_frames`, at most `FRAME_BYTES` before
compression): the items and the pieces are mostly the same text, so together they cost about
what one of them would. A piece (`body_chunks`) and an item (`item_data`) name their frame, where
they start in it and their size; the `item_contents` view reads items as text with `unzstd`.
A turn therefore costs about what is new in it, and reading any body back follows at most
`MAX_DEPTH` links, one query for its pieces and one for their frames, however long the session.

Concatenating the pieces gives the decoded body exactly, except the spans the scrubber replaced
(every part is scrubbed before it is stored, after the flow's headers taught the scrubber: a
request piece on its own, since a secret, always inside a JSON string, never spans two; a
response whole, before it is cut). Bodies are kept up to `capture.max_body_bytes`; beyond,
`truncated = 1`.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import zstandard

from addons.items import Item
from addons.messages import CUT_MARGIN
from capsem.markers import content_hex
from capsem.redact import Scrubber, is_stream_type
from capsem.store.bodies import DIGEST, cut, segments
from capsem.store.rows import BodyBlob, BodyChunk, ContentFrame, IdMinter, ItemContent, Row, new_event_id

FRAME_BYTES = 1024 * 1024
"""Bytes (before compression) after which a call's content goes on in a new frame: reading one
piece decompresses its whole frame."""
SMALL_FRAME = 32 * 1024
SMALL_LEVEL, LARGE_LEVEL = 12, 3
"""zstd levels for frames up to `SMALL_FRAME` bytes (a turn's new content: ~0.4 ms, about 10 % smaller
than level 3 on conversation JSON) and for larger ones (a streamed answer of 160 KB: 0.5 ms at level 3,
6.5 ms at 12 for 9 % less)."""
MAX_DEPTH = 256
"""Links a body's list of pieces may follow to earlier bodies before one is stored whole."""
_RECENT = 8
"""Earlier bodies (per direction) a new one may take runs of pieces from."""
_MIN_RUN = 2
"""Keys a run must cover to be worth its ~15 bytes of JSON (a key listed costs 16)."""
_PLACES = 4
"""Places of one key remembered per earlier body (a piece repeated within a body)."""
_SEGMENTS_KEPT = 200_000
"""Request segments remembered (~100 bytes each) before the memory starts over."""


@dataclass(frozen=True, slots=True)
class Body:
    """A decoded body to keep: its direction (`request` or `response`) and bytes."""

    direction: str
    data: bytes
    truncated: bool = False
    content_type: str | None = None


class _Recent:
    """A body stored lately: its id, its whole list of keys, how many links its list follows, and
    where each key occurs in it (`first`; up to `_PLACES` places of a key it repeats, `more`)."""

    __slots__ = ("depth", "first", "id", "keys", "more")

    def __init__(self, row_id: int, keys: list[bytes], depth: int) -> None:
        self.id, self.keys, self.depth = row_id, keys, depth
        self.first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1), strict=True))  # earliest wins
        self.more: dict[bytes, list[int]] = {}
        if len(self.first) < len(keys):  # some key repeats
            first, more = self.first, self.more
            for i, key in enumerate(keys):
                if first[key] != i:
                    at = more.get(key)
                    if at is None:
                        more[key] = [first[key], i]
                    elif len(at) < _PLACES:
                        at.append(i)

    def places(self, key: bytes) -> Sequence[int]:
        """Where `key` occurs (at most `_PLACES` places, earliest first)."""
        at = self.more.get(key)
        if at is not None:
            return at
        start = self.first.get(key)
        return () if start is None else (start,)


def _match(a: list[bytes], i: int, b: list[bytes], j: int) -> int:
    """How many keys of `a` from `i` equal those of `b` from `j` (galloping over slices)."""
    n, step = 0, 8
    limit = min(len(a) - i, len(b) - j)
    while n < limit:
        step = min(step, limit - n)
        if a[i + n : i + n + step] == b[j + n : j + n + step]:
            n, step = n + step, step * 2
        elif step > 1:
            step //= 2
        else:
            break
    return n


def runs(keys: list[bytes], recent: Sequence[_Recent]) -> tuple[list, list[bytes]]:
    """`keys` as runs of the lists of `recent` bodies (newest first): the runs (`[base_id, start,
    count]`, or `n` for the next n keys listed) and the keys listed. Greedy: at each place, the
    longest run any earlier body offers."""
    out: list = []
    listed: list[bytes] = []
    i, n = 0, len(keys)
    while i < n:
        best, base, start = 0, None, 0
        for body in recent:
            for j in body.places(keys[i]):
                length = _match(keys, i, body.keys, j)
                if length > best:
                    best, base, start = length, body, j
            if best == n - i:
                break
        if best >= _MIN_RUN and base is not None:
            out.append([base.id, start, best])
            i += best
            continue
        listed.append(keys[i])
        if out and isinstance(out[-1], int):
            out[-1] += 1
        else:
            out.append(1)
        i += 1
    return out, listed


class _Frames:
    """The frames one call's new content goes into: parts appended, compressed when full or done."""

    def __init__(
        self, ids: IdMinter, small: zstandard.ZstdCompressor, large: zstandard.ZstdCompressor
    ) -> None:
        self.ids, self._small, self._large = ids, small, large
        self.rows: list[ContentFrame] = []
        self._parts: list[bytes] = []
        self._size = 0
        self._id = 0

    def add(self, data: bytes) -> tuple[int, int]:
        """Append `data`; return its frame's id and where it starts in it."""
        if not self._id or (self._size and self._size + len(data) > FRAME_BYTES):
            self.close()
            self._id = self.ids.next("content_frames")
        start = self._size
        self._parts.append(data)
        self._size += len(data)
        return self._id, start

    def close(self) -> None:
        if self._parts:
            data = b"".join(self._parts)
            zstd = self._small if len(data) <= SMALL_FRAME else self._large
            self.rows.append(ContentFrame(self._id, len(data), zstd.compress(data)))
            self._parts, self._size = [], 0


class BodyStore:
    """Turns a call's bodies and new items into rows: one or more compressed frames of what is new,
    the pieces and items in them, and each body's list of pieces."""

    def __init__(self, scrubber: Scrubber, ids: IdMinter, known: set[bytes] | None = None) -> None:
        self.scrubber = scrubber
        self.ids = ids
        self.known: set[bytes] = known if known is not None else set()
        """Keys of the pieces already stored in this session."""
        self._small = zstandard.ZstdCompressor(level=SMALL_LEVEL)
        self._large = zstandard.ZstdCompressor(level=LARGE_LEVEL)
        self._recent: dict[str, deque[_Recent]] = {}
        self._segments: dict[bytes, tuple[int, tuple[bytes, ...]]] = {}
        """Request segments seen lately (SHA-256 of the raw bytes) -> (scrubber generation, piece keys)."""
        self._frames = _Frames(ids, self._small, self._large)
        self._rows: list[Row] = []

    def cut(self, data: bytes, limit: int) -> bytes:
        """`data` cut to at most `limit` bytes, before any secret that crosses `limit` (found in the
        `CUT_MARGIN` bytes either side): the part of it the cut would leave is no key to any rule
        (the first 15 characters of a `ghp_` token), so it would be stored as it came."""
        if len(data) <= limit:
            return data
        start = max(0, limit - CUT_MARGIN)
        window = data[start : limit + CUT_MARGIN].decode("latin-1")  # a character a byte: offsets
        spans = self.scrubber.secret_spans(window)
        if spans is None:  # not placed: keep none of the window
            return data[:start]
        crossing = [begin for begin, end in spans if begin < limit - start < end]
        return data[: start + min(crossing)] if crossing else data[:limit]

    def _scrubbed(self, data: bytes, content_type: str | None = None) -> bytes:
        text = data.decode("utf-8", "surrogateescape")
        scrub = self.scrubber.scrub_stream if is_stream_type(content_type) else self.scrubber.scrub
        return (scrub(text) or "").encode("utf-8", "surrogateescape")

    def _segment(self, segment: bytes) -> tuple[bytes, ...]:
        """The keys of a request segment's pieces: scrubbed whole, then cut every `MAX_PIECE` bytes
        (so no cut falls inside a secret); new pieces are stored. A segment seen before is not
        scrubbed again unless a credential learned since occurs in it."""
        raw = hashlib.sha256(segment).digest()[:DIGEST]
        seen = self._segments.get(raw)
        generation = self.scrubber.generation
        if seen is not None and seen[0] != generation:
            fresh = self.scrubber.learned_since(seen[0])
            text = segment.decode("utf-8", "surrogateescape")
            seen = None if any(value in text for value in fresh) else (generation, seen[1])
        if seen is None:
            scrubbed = self._scrubbed(segment)
            keys = tuple(map(self._piece, cut(scrubbed)))
            seen = (generation, keys)
        if len(self._segments) >= _SEGMENTS_KEPT:
            self._segments.clear()
        self._segments[raw] = seen
        return seen[1]

    def _piece(self, stored: bytes) -> bytes:
        """The key of a scrubbed piece (the SHA-256 of what is stored: no secret is hashed raw),
        put in the current frame when the session does not hold it yet."""
        key = hashlib.sha256(stored).digest()[:DIGEST]
        if key not in self.known:
            frame, start = self._frames.add(stored)
            self._rows.append(BodyChunk(key, len(stored), frame, start))
            self.known.add(key)
        return key

    def keep(self, *, owner: str, source_table: str, row_id: int | None, bodies: Sequence[Body] = (),
             items: Sequence[Item] = ()) -> list[Row]:  # fmt: skip
        """The rows that store a call's `bodies` (decoded) and its `items` new to the session, as
        belonging to row `owner` (its event_id).

        Requests are cut where JSON objects start and stored piece by piece (history repeats);
        responses are new every time: scrubbed whole, then cut every `MAX_PIECE` bytes.
        """
        self._frames = _Frames(self.ids, self._small, self._large)
        self._rows = []
        for entry in items:
            stored = (self.scrubber.scrub(entry.content) or "").encode("utf-8", "surrogatepass")
            frame, start = self._frames.add(stored)
            self._rows.append(ItemContent(entry.hash, entry.kind, len(stored), frame, start))
        for body in bodies:
            self._body(body, owner=owner, source_table=source_table, row_id=row_id)
        self._frames.close()
        return [*self._frames.rows, *self._rows]

    def _body(self, body: Body, *, owner: str, source_table: str, row_id: int | None) -> None:
        known = len(self.known)
        if body.direction == "request":
            keys = [key for segment in segments(body.data) for key in self._segment(segment)]
        else:
            scrubbed = self._scrubbed(body.data, body.content_type)
            keys = list(map(self._piece, cut(scrubbed)))
        recent = self._recent.setdefault(f"{source_table}/{body.direction}", deque(maxlen=_RECENT))
        bases = [r for r in reversed(recent) if r.depth < MAX_DEPTH]
        if len(self.known) - known == len(keys):  # all new (an answer): no earlier body lists one
            found, listed = [len(keys)] if keys else [], keys
        else:
            found, listed = runs(keys, bases)
        used = {run[0] for run in found if isinstance(run, list)}
        depth = 1 + max((r.depth for r in bases if r.id in used), default=-1)
        blob_id = self.ids.next("event_body_blobs")
        self._rows.append(
            BodyBlob(
                id=blob_id, event_id=new_event_id(), owner_event_id=owner, source_table=source_table, row_id=row_id,
                direction=body.direction, size=len(body.data), sha256=content_hex(body.data, 64),
                truncated=int(body.truncated), content_type=body.content_type, chunks=b"".join(listed),
                runs=json.dumps(found, separators=(",", ":")),
            )
        )  # fmt: skip
        recent.append(_Recent(blob_id, keys, depth))
