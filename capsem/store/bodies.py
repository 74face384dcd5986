"""The body-piece format and its reader: how a whole body is cut into pieces, and how a stored
body is read back from `event_body_blobs`, `body_chunks` and `content_frames` (the writing side,
which packs pieces and items into frames, is `addons/recorder/bodies.py`).

A body is cut into pieces at the start of every JSON object that names a role, a type or a name
(`{"role"`, `{"type"`, `{"name"`…; these bytes cannot occur inside a JSON string, where `"` is
escaped) and at most `MAX_PIECE` bytes apart; each piece is keyed by the first `DIGEST` bytes of
its SHA-256. A body's list of keys is stored as runs of earlier bodies' lists (`runs`, JSON: an
integer n takes the next n keys of the row's own `chunks`, `[base_id, start, count]` takes keys
start..start+count of body base_id); `read_body` follows them and joins the pieces.
"""

from __future__ import annotations

import json
import re
import sqlite3

import zstandard

MAX_PIECE = 64 * 1024
CUT = re.compile(rb'\{(?=\s*"(?:role|type|name|parts|text|functionCall|functionResponse|call_id)"\s*:)')
"""Where a piece starts: the `{` of such an object (matched, not looked ahead for: `re` then scans
for the literal `{`, ~7x faster on a long request)."""
DIGEST = 16
"""Bytes of SHA-256 kept per piece key (128 bits)."""


def segments(body: bytes) -> list[bytes]:
    """`body` cut where a JSON object names a role, a type or a name (outside every JSON string:
    no secret spans two segments)."""
    cuts = [m.start() for m in CUT.finditer(body)]
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b > a]


def cut(data: bytes) -> list[bytes]:
    """`data` cut every `MAX_PIECE` bytes."""
    return [data[i : i + MAX_PIECE] for i in range(0, len(data), MAX_PIECE)]


def pieces(body: bytes) -> list[bytes]:
    """The pieces a request holding no secret is stored as: its segments, each cut every `MAX_PIECE`
    bytes (a request holding one is cut the same way after each segment is scrubbed)."""
    return [piece for segment in segments(body) for piece in cut(segment)]


def known_pieces(conn: sqlite3.Connection) -> set[bytes]:
    """The keys of the pieces a session.db already holds."""
    return {row[0] for row in conn.execute("SELECT hash FROM body_chunks")}


def _blob(conn: sqlite3.Connection, where: str, params: tuple) -> dict | None:
    cursor = conn.execute(f"SELECT * FROM event_body_blobs WHERE {where}", params)
    found = cursor.fetchone()
    return None if found is None else dict(zip([d[0] for d in cursor.description], found, strict=True))


def _runs(blob: dict) -> list:
    """A body's runs; a row of a session.db written before m016 (the leading `base_pieces` keys of
    `base_id`, then its own) as the same runs."""
    if "runs" in blob:
        return json.loads(blob["runs"])
    own = len(blob["chunks"]) // DIGEST
    return [own] if blob["base_id"] is None else [[blob["base_id"], 0, blob["base_pieces"]], own]


def _keys(conn: sqlite3.Connection, blob: dict) -> list[bytes]:
    """A body's whole list of piece keys, following its runs to earlier bodies (in a loop, so a
    chain of thousands of bodies does not exhaust the stack)."""
    chain = {blob["id"]: (blob, _runs(blob))}
    todo = [blob["id"]]
    while todo:
        row_id = todo.pop()
        for run in chain[row_id][1]:
            if isinstance(run, list) and run[0] not in chain:
                if run[0] >= row_id:
                    raise ValueError(f"body {row_id} is built on body {run[0]}, which is not earlier")
                base = _blob(conn, "id = ?", (run[0],))
                if base is None:
                    raise ValueError(f"body {row_id} is built on body {run[0]}, which is missing")
                chain[run[0]] = (base, _runs(base))
                todo.append(run[0])
    last_use = {
        run[0]: row_id for row_id in sorted(chain) for run in chain[row_id][1] if isinstance(run, list)
    }
    lists: dict[int, list[bytes]] = {}
    for row_id in sorted(chain):  # a body is built only on earlier ones
        row, found = chain[row_id]
        own, at, keys = bytes(row["chunks"]), 0, []
        for run in found:
            if isinstance(run, list):
                keys += lists[run[0]][run[1] : run[1] + run[2]]
            else:
                keys += [own[i : i + DIGEST] for i in range(at, at + run * DIGEST, DIGEST)]
                at += run * DIGEST
        lists[row_id] = keys
        for run in found:  # a list no later body takes from is let go
            if isinstance(run, list) and last_use.get(run[0]) == row_id:
                lists.pop(run[0], None)
    return lists[blob["id"]]


def read_body(conn: sqlite3.Connection, row_id: int, direction: str = "request",
              source_table: str = "model_calls") -> tuple[bytes, dict] | None:  # fmt: skip
    """A stored body (as stored: scrubbed spans replaced) and its `event_body_blobs` row, or None."""
    blob = _blob(conn, "source_table = ? AND row_id = ? AND direction = ?", (source_table, row_id, direction))
    if blob is None:
        return None
    keys = _keys(conn, blob)
    unique = list(dict.fromkeys(keys))
    if "data" in {r[1] for r in conn.execute("PRAGMA table_info(body_chunks)")}:
        return _read_unframed(conn, keys, unique, f"{direction} body of {source_table} {row_id}"), blob
    where: dict[bytes, tuple[int, int, int]] = {}
    for batch in _batches(unique):
        sql = (
            f"SELECT hash, frame, start, size FROM body_chunks WHERE hash IN ({', '.join('?' * len(batch))})"
        )
        for key, frame, start, size in conn.execute(sql, batch):
            where[bytes(key)] = (frame, start, size)
    missing = [k for k in unique if k not in where]
    frames: dict[int, bytes] = {}
    decompress = zstandard.ZstdDecompressor().decompress
    for batch in _batches(list({f for f, _, _ in where.values()})):
        sql = f"SELECT id, data FROM content_frames WHERE id IN ({', '.join('?' * len(batch))})"
        frames.update((frame, decompress(data)) for frame, data in conn.execute(sql, batch))
    missing += [k for k, (frame, _, _) in where.items() if frame not in frames]
    if missing:
        raise ValueError(
            f"{len(missing)} pieces of the {direction} body of {source_table} {row_id} are missing"
        )
    return b"".join(frames[f][start : start + size] for f, start, size in map(where.__getitem__, keys)), blob


def _read_unframed(conn: sqlite3.Connection, keys: list[bytes], unique: list[bytes], what: str) -> bytes:
    """A body of a session.db written before content frames (m011: each piece compressed on its
    own), read as it is: readers open sessions read-only and never migrate them."""
    decompress = zstandard.ZstdDecompressor().decompress
    data: dict[bytes, bytes] = {}
    for batch in _batches(unique):
        sql = f"SELECT hash, data FROM body_chunks WHERE hash IN ({', '.join('?' * len(batch))})"
        data.update((bytes(key), decompress(stored)) for key, stored in conn.execute(sql, batch))
    missing = [k for k in unique if k not in data]
    if missing:
        raise ValueError(f"{len(missing)} pieces of the {what} are missing")
    return b"".join(map(data.__getitem__, keys))


def _batches(values: list, size: int = 500) -> list[list]:
    return [values[i : i + size] for i in range(0, len(values), size)]
