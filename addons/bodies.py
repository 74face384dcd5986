"""Exact bodies, stored once: every model and MCP call's whole request and response, linear in
the conversation, not quadratic.

An agent resends its whole history every turn, so a naive store grows with the square of the
number of turns. Here a body is cut into pieces at the start of every JSON object that names a
role, a type or a name (`{"role"`, `{"type"`, `{"name"`…: a message, a content block, a tool
definition; these bytes cannot occur inside a JSON string, where `"` is escaped) and at most
`MAX_PIECE` bytes apart. Each piece is stored once per session (`body_chunks`, keyed by the
SHA-256 of its bytes, zstd-compressed); a body is the list of its pieces' keys
(`event_body_blobs.chunks`). The list itself grows with the history, so it is stored as the
leading pieces of an earlier body (`base_id`, `base_pieces`: the one of the last few bodies that
shares the longest prefix) plus the keys of the rest, with a full list every `MAX_DEPTH` links.
A turn therefore costs about what is new in it, and reading any body back follows at most
`MAX_DEPTH` lists and one query for its pieces, however long the session.

Concatenating the pieces gives the decoded body exactly, except the spans the scrubber replaced
(a request's piece is scrubbed before it is stored: a secret, always inside a JSON string, never
spans two; a response is scrubbed whole before it is cut). Bodies are kept up to
`capture.max_body_bytes`; beyond, `truncated = 1`.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections import deque

import zstandard

from addons.rows import BodyBlob, BodyChunk, IdMinter, new_event_id
from capsem.redact import Scrubber

MAX_PIECE = 64 * 1024
_CUT = re.compile(rb'(?=\{\s*"(?:role|type|name|parts|text|functionCall|functionResponse|call_id)"\s*:)')
_DIGEST = 16
"""Bytes of SHA-256 kept per piece key (128 bits)."""
MAX_DEPTH = 64
"""Links a body's list of pieces may follow to earlier bodies before one is stored whole."""
_RECENT = 8
"""Earlier bodies (per direction) a new one may take its leading pieces from."""


def pieces(body: bytes) -> list[bytes]:
    """`body` cut where a JSON object names a role, a type or a name, and every `MAX_PIECE` bytes."""
    cuts = [m.start() for m in _CUT.finditer(body)]
    out: list[bytes] = []
    start = 0
    for end in [*cuts, len(body)]:
        while end - start > MAX_PIECE:
            out.append(body[start : start + MAX_PIECE])
            start += MAX_PIECE
        if end > start:
            out.append(body[start:end])
            start = end
    return out


class _Recent:
    """A body stored lately: its id, its whole list of keys, and how many links its list follows."""

    __slots__ = ("depth", "id", "keys")

    def __init__(self, row_id: int, keys: list[bytes], depth: int) -> None:
        self.id, self.keys, self.depth = row_id, keys, depth


def _common(a: list[bytes], b: list[bytes]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class BodyStore:
    """Turns bodies into rows: new pieces (scrubbed, compressed) and the body's list of pieces."""

    def __init__(self, scrubber: Scrubber, ids: IdMinter, known: set[bytes] | None = None, *,
                 level: int = 3) -> None:  # fmt: skip
        self.scrubber = scrubber
        self.ids = ids
        self.known: set[bytes] = known if known is not None else set()
        """Keys of the pieces already stored in this session."""
        self._zstd = zstandard.ZstdCompressor(level=level)
        self._recent: dict[str, deque[_Recent]] = {}

    def keep(self, body: bytes, *, owner: str, source_table: str, row_id: int | None, direction: str,
             truncated: bool = False, content_type: str | None = None) -> list[BodyChunk | BodyBlob]:  # fmt: skip
        """The rows that store `body` (decoded) as belonging to row `owner` (its event_id).

        Requests are cut where JSON objects start and stored piece by piece (history repeats);
        responses are new every time: scrubbed whole, then cut every `MAX_PIECE` bytes.
        """
        rows: list[BodyChunk | BodyBlob] = []
        keys: list[bytes] = []
        if direction == "request":
            cut = [(p, None) for p in pieces(body)]
        else:
            text = self.scrubber.scrub(body.decode("utf-8", "surrogateescape")) or ""
            scrubbed = text.encode("utf-8", "surrogateescape")
            cut = [(p, p) for p in (scrubbed[i : i + MAX_PIECE] for i in range(0, len(scrubbed), MAX_PIECE))]
        for piece, stored in cut:
            key = hashlib.sha256(piece).digest()[:_DIGEST]
            keys.append(key)
            if key not in self.known:
                if stored is None:
                    text = piece.decode("utf-8", "surrogateescape")
                    stored = (self.scrubber.scrub(text) or "").encode("utf-8", "surrogateescape")
                rows.append(BodyChunk(key, len(stored), self._zstd.compress(stored)))
                self.known.add(key)
        recent = self._recent.setdefault(f"{source_table}/{direction}", deque(maxlen=_RECENT))
        base, shared = max(((r, _common(r.keys, keys)) for r in recent if r.depth < MAX_DEPTH),
                           key=lambda pair: pair[1], default=(None, 0))  # fmt: skip
        if base is None or shared == 0:
            base, shared = None, 0
        blob_id = self.ids.next("event_body_blobs")
        rows.append(
            BodyBlob(
                id=blob_id, event_id=new_event_id(), owner_event_id=owner, source_table=source_table, row_id=row_id,
                direction=direction, size=len(body), sha256=hashlib.sha256(body).hexdigest(), truncated=int(truncated),
                content_type=content_type, base_id=base.id if base else None, base_pieces=shared,
                chunks=b"".join(keys[shared:]),
            )
        )  # fmt: skip
        recent.append(_Recent(blob_id, keys, base.depth + 1 if base else 0))
        return rows


def known_pieces(conn: sqlite3.Connection) -> set[bytes]:
    """The keys of the pieces a session.db already holds."""
    return {row[0] for row in conn.execute("SELECT hash FROM body_chunks")}


def _blob(conn: sqlite3.Connection, where: str, params: tuple) -> dict | None:
    cursor = conn.execute(f"SELECT * FROM event_body_blobs WHERE {where}", params)
    found = cursor.fetchone()
    return None if found is None else dict(zip([d[0] for d in cursor.description], found, strict=True))


def _keys(conn: sqlite3.Connection, blob: dict) -> list[bytes]:
    """A body's whole list of piece keys, following its links to earlier bodies (in a loop, so a
    chain of thousands of bodies does not exhaust the stack)."""
    chain = [blob]
    while chain[-1]["base_id"] is not None:
        base = _blob(conn, "id = ?", (chain[-1]["base_id"],))
        if base is None:
            raise ValueError(
                f"body {chain[-1]['id']} is built on body {chain[-1]['base_id']}, which is missing"
            )
        chain.append(base)
    keys: list[bytes] = []
    for link in reversed(chain):
        own = bytes(link["chunks"])
        keys = (keys[: link["base_pieces"]] if link["base_id"] is not None else []) + [
            own[i : i + _DIGEST] for i in range(0, len(own), _DIGEST)
        ]
    return keys


def read_body(conn: sqlite3.Connection, row_id: int, direction: str = "request",
              source_table: str = "model_calls") -> tuple[bytes, dict] | None:  # fmt: skip
    """A stored body (as stored: scrubbed spans replaced) and its `event_body_blobs` row, or None."""
    blob = _blob(conn, "source_table = ? AND row_id = ? AND direction = ?", (source_table, row_id, direction))
    if blob is None:
        return None
    keys = _keys(conn, blob)
    data: dict[bytes, bytes] = {}
    unique = list(dict.fromkeys(keys))
    decompress = zstandard.ZstdDecompressor().decompress
    for start in range(0, len(unique), 500):
        batch = unique[start : start + 500]
        marks = ", ".join("?" * len(batch))
        for key, stored in conn.execute(f"SELECT hash, data FROM body_chunks WHERE hash IN ({marks})", batch):
            data[bytes(key)] = decompress(stored)
    missing = [k for k in unique if k not in data]
    if missing:
        raise ValueError(
            f"{len(missing)} pieces of the {direction} body of {source_table} {row_id} are missing"
        )
    return b"".join(data[k] for k in keys), blob
