"""Exact bodies, stored once: every model and MCP call's whole request and response, linear in
the conversation, not quadratic.

An agent resends its whole history every turn, so a naive store grows with the square of the
number of turns. Here a body is cut into pieces at the start of every JSON object that names a
role, a type or a name (`{"role"`, `{"type"`, `{"name"`…: a message, a content block, a tool
definition; these bytes cannot occur inside a JSON string, where `"` is escaped) and at most
`MAX_PIECE` bytes apart. Each piece is stored once per session (`body_chunks`, keyed by the
SHA-256 of its bytes, zstd-compressed); a body is the list of its pieces' keys
(`event_body_blobs.chunks`). A turn therefore costs about what is new in it, and reading any
body back is one query for its pieces, however long the session.

Concatenating the pieces gives the decoded body exactly, except the spans the scrubber replaced
(a piece is scrubbed before it is stored; a secret, always inside a JSON string, never spans
two pieces). Bodies are kept up to `capture.max_body_bytes`; beyond, `truncated = 1`.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3

import zstandard

from addons.rows import BodyBlob, BodyChunk, new_event_id
from capsem.redact import Scrubber

MAX_PIECE = 64 * 1024
_CUT = re.compile(rb'(?=\{\s*"(?:role|type|name|parts|text|functionCall|functionResponse|call_id)"\s*:)')
_DIGEST = 16
"""Bytes of SHA-256 kept per piece key (128 bits)."""


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


class BodyStore:
    """Turns bodies into rows: new pieces (scrubbed, compressed) and the body's list of pieces."""

    def __init__(self, scrubber: Scrubber, known: set[bytes] | None = None, *, level: int = 3) -> None:
        self.scrubber = scrubber
        self.known: set[bytes] = known if known is not None else set()
        """Keys of the pieces already stored in this session."""
        self._zstd = zstandard.ZstdCompressor(level=level)

    def keep(self, body: bytes, *, owner: str, source_table: str, row_id: int | None, direction: str,
             truncated: bool = False, content_type: str | None = None) -> list[BodyChunk | BodyBlob]:  # fmt: skip
        """The rows that store `body` (decoded) as belonging to row `owner` (its event_id)."""
        rows: list[BodyChunk | BodyBlob] = []
        keys = bytearray()
        whole = hashlib.sha256()
        size = 0
        for piece in pieces(body):
            key = hashlib.sha256(piece).digest()[:_DIGEST]
            keys += key
            if key in self.known:
                stored = None
            else:
                text = piece.decode("utf-8", "surrogateescape")
                stored = (self.scrubber.scrub(text) or "").encode("utf-8", "surrogateescape")
                rows.append(BodyChunk(key, len(stored), self._zstd.compress(stored)))
                self.known.add(key)
            size += len(stored) if stored is not None else 0
            whole.update(piece)
        rows.append(
            BodyBlob(
                event_id=new_event_id(), owner_event_id=owner, source_table=source_table, row_id=row_id,
                direction=direction, size=len(body), sha256=whole.hexdigest(), truncated=int(truncated),
                content_type=content_type, chunks=bytes(keys),
            )
        )  # fmt: skip
        return rows


def known_pieces(conn: sqlite3.Connection) -> set[bytes]:
    """The keys of the pieces a session.db already holds."""
    return {row[0] for row in conn.execute("SELECT hash FROM body_chunks")}


def read_body(conn: sqlite3.Connection, row_id: int, direction: str = "request",
              source_table: str = "model_calls") -> tuple[bytes, dict] | None:  # fmt: skip
    """A stored body (as stored: scrubbed spans replaced) and its `event_body_blobs` row, or None."""
    cursor = conn.execute(
        "SELECT * FROM event_body_blobs WHERE source_table = ? AND row_id = ? AND direction = ?",
        (source_table, row_id, direction),
    )
    found = cursor.fetchone()
    if found is None:
        return None
    blob = dict(zip([d[0] for d in cursor.description], found, strict=True))
    keys = [blob["chunks"][i : i + _DIGEST] for i in range(0, len(blob["chunks"]), _DIGEST)]
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
