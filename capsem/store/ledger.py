"""The hash chain over every row written to a session.db, fed by the writer inside its commit.

Each row the writer inserts (and each `session_meta` value it sets) becomes one `ledger` entry in
commit order: its table, its key (the table's primary key when the row carries it, else its
`event_id`), the SHA-256 of its canonical encoding (`row_digest`) and the running digest `chain`
= SHA-256(previous chain ‖ digest), starting from `genesis(session_id)`. At the end of every
commit batch (and when a writer closes: `final`) the head (the last chain value) is signed with
the ledger key and stored in `ledger_heads` in the same transaction, so a committed batch is
always a signed one.

The canonical encoding of a row is what the writer inserts, after scrubbing: the shape (table and
column names) and the values, msgpack-encoded, where a number is written as the text SQLite's
affinities cannot change (`canonical`), so the values read back from the file encode the same.

Three triggers still update `tool_calls` after its insert (see `capsem/session_schema.py`). The
tool calls a batch's `tool_responses` and `mcp_calls` rows touch are read back before the commit
and chained again whole (the shape of every column): a key's latest entry is the one its current
row must match. `session_meta` values overwritten in place are handled the same way.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from capsem.ids import utc_now
from capsem.store.keys import SigningKey

logger = logging.getLogger(__name__)

_encode = msgspec.msgpack.Encoder().encode
_sha256 = hashlib.sha256
HEAD_TAG = b"capsem-ledger-head-v1\n"
TRIGGERED = "tool_calls"
"""The table the triggers update after its insert."""


def genesis(session_id: str) -> bytes:
    """The chain's value before its first entry: bound to the session, so a chain cannot be moved."""
    return _sha256(b"capsem-ledger-v1\0" + session_id.encode()).digest()


def canonical(values: Iterable[Any]) -> list[Any]:
    """Values as SQLite gives them back whatever the column's affinity: NULL, bytes and text as
    they are, every number as its text (an integral float as an integer: 1.0 and 1 are one)."""
    return [
        v if (t := type(v)) is str or t is bytes or v is None
        else (repr(v) if t is float and not v.is_integer() else str(int(v)))
        for v in values
    ]  # fmt: skip


def shape_hash(table: str, columns: Sequence[str]) -> Any:
    """The running hash every row of a shape starts from (copied per row)."""
    return _sha256(_encode([table, list(columns)]))


def row_digest(start: Any, values: Iterable[Any]) -> bytes:
    h = start.copy()
    h.update(_encode(canonical(values)))
    return h.digest()


def link(previous: bytes, digest: bytes) -> bytes:
    return _sha256(previous + digest).digest()


def head_message(session_id: str, batch: int, last_seq: int, head: bytes, final: bool, at: str) -> bytes:
    """What a head's signature covers."""
    return HEAD_TAG + _encode([session_id, batch, last_seq, head, int(final), at])


def key_column(conn: sqlite3.Connection, table: str, columns: Sequence[str]) -> int | None:
    """Index in `columns` of the row's key: the single primary key column when given, else `event_id`."""
    pk = [r[1] for r in conn.execute(f"PRAGMA table_info({table})") if r[5]]
    if len(pk) == 1 and pk[0] in columns:
        return list(columns).index(pk[0])
    return list(columns).index("event_id") if "event_id" in columns else None


@dataclass
class _Shape:
    id: int
    start: Any
    key: int | None
    stored: bool


@dataclass(frozen=True)
class Head:
    batch: int
    last_seq: int
    head: bytes
    final: bool


class Ledger:
    """One writer's side of a session's chain (not thread-safe: the writer's thread owns it)."""

    def __init__(self, session_id: str, key: SigningKey | None) -> None:
        self.session_id = session_id
        self.key = key
        self._shapes: dict[tuple[str, tuple[str, ...]], _Shape] = {}
        self._entries: list[tuple] = []
        self._touched_ids: set[int] = set()
        self._touched_call_ids: set[str] = set()
        self._loaded = False
        self.seq = 0
        self.batch = 0
        self.chain = genesis(session_id)
        self.last: Head | None = None
        self._saved: tuple = ()

    def load(self, conn: sqlite3.Connection) -> None:
        """Continue the chain the file holds (a restarted recorder, an offline writer)."""
        for sid, table, columns in conn.execute("SELECT id, tbl, columns FROM ledger_shapes"):
            names = tuple(msgspec.json.decode(columns))
            self._shapes[(table, names)] = _Shape(
                sid, shape_hash(table, names), key_column(conn, table, names), True
            )
        row = conn.execute("SELECT seq, chain FROM ledger ORDER BY seq DESC LIMIT 1").fetchone()
        if row:
            self.seq, self.chain = row[0], row[1]
        row = conn.execute(
            "SELECT batch, last_seq, head, final FROM ledger_heads ORDER BY batch DESC LIMIT 1"
        ).fetchone()
        if row:
            self.batch = row[0]
            self.last = Head(row[0], row[1], row[2], bool(row[3]))
        self._loaded = True

    def begin(self, conn: sqlite3.Connection) -> None:
        """Start a commit batch (inside the writer's transaction)."""
        if not self._loaded:
            self.load(conn)
        self._saved = (self.seq, self.batch, self.chain, self.last)
        self.batch += 1

    def rows(self, conn: sqlite3.Connection, table: str, columns: tuple[str, ...], rows: list[tuple]) -> None:
        """Chain rows as written (scrubbed), in the order they were inserted."""
        shape = self._shape(conn, table, columns)
        start, k, sid, batch = shape.start, shape.key, shape.id, self.batch
        seq, chain, out = self.seq, self.chain, self._entries
        for row in rows:
            h = start.copy()
            h.update(_encode(canonical(row)))
            digest = h.digest()
            chain = _sha256(chain + digest).digest()
            seq += 1
            out.append((seq, batch, table, None if k is None else row[k], sid, digest, chain))
        self.seq, self.chain = seq, chain
        if table == "tool_responses" and "call_id" in columns:
            i = columns.index("call_id")
            self._touched_call_ids.update(r[i] for r in rows if r[i] is not None)
        elif table == "mcp_calls" and "tool_call_id" in columns:
            i = columns.index("tool_call_id")
            self._touched_ids.update(r[i] for r in rows if r[i] is not None)

    def seal(self, conn: sqlite3.Connection, *, final: bool = False) -> None:
        """Chain again the tool calls the triggers changed, write the entries and the signed head."""
        self._rechain_triggered(conn)
        new = [
            (s.id, t, msgspec.json.encode(list(c)).decode())
            for (t, c), s in self._shapes.items()
            if not s.stored
        ]
        if new:
            conn.executemany("INSERT INTO ledger_shapes VALUES (?, ?, ?)", new)
        if self._entries:
            conn.executemany("INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?)", self._entries)
        at = utc_now()
        message = head_message(self.session_id, self.batch, self.seq, self.chain, final, at)
        signature = self.key.sign(message) if self.key else b""
        conn.execute("INSERT INTO ledger_heads VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (self.batch, self.seq, self.chain, int(final), at, self.key.key_id if self.key else "",
                      signature))  # fmt: skip
        self.last = Head(self.batch, self.seq, self.chain, final)

    def committed(self) -> None:
        for shape in self._shapes.values():
            shape.stored = True
        self._entries.clear()
        self._saved = ()

    def rolled_back(self) -> None:
        """The transaction failed: forget this batch (the writer keeps its rows for the next try)."""
        if self._saved:  # (nothing to undo when the transaction failed before the batch began)
            self.seq, self.batch, self.chain, self.last = self._saved
            self._saved = ()
        self._entries.clear()
        self._touched_ids.clear()
        self._touched_call_ids.clear()
        self._shapes = {k: s for k, s in self._shapes.items() if s.stored}

    def _shape(self, conn: sqlite3.Connection, table: str, columns: tuple[str, ...]) -> _Shape:
        shape = self._shapes.get((table, columns))
        if shape is None:
            sid = max((s.id for s in self._shapes.values()), default=0) + 1
            shape = self._shapes[(table, columns)] = _Shape(sid, shape_hash(table, columns),
                                                            key_column(conn, table, columns), False)  # fmt: skip
        return shape

    def _rechain_triggered(self, conn: sqlite3.Connection) -> None:
        if not (self._touched_ids or self._touched_call_ids):
            return
        ids, call_ids = sorted(self._touched_ids), sorted(self._touched_call_ids)
        self._touched_ids.clear()
        self._touched_call_ids.clear()
        cur = conn.execute(
            f"SELECT * FROM {TRIGGERED} WHERE id IN (SELECT value FROM json_each(?)) "
            "OR call_id IN (SELECT value FROM json_each(?)) ORDER BY id",
            (msgspec.json.encode(ids).decode(), msgspec.json.encode(call_ids).decode()),
        )
        columns = tuple(d[0] for d in cur.description)
        rows = [tuple(r) for r in cur.fetchall()]
        if rows:
            self.rows(conn, TRIGGERED, columns, rows)
