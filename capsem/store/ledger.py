"""The hash chain over every row written to a session.db, fed by the writer inside its commit.

Each row the writer inserts (and each `session_meta` value it sets) becomes one `ledger` entry in
commit order: its table, its key (the table's primary key when the row carries it, else its
`event_id`), the SHA-256 of its canonical encoding (`row_digest`) and the running digest `chain`
= SHA-256(previous chain ‖ digest), starting from `genesis(session_id)`. A batch's entries are
stored as one `ledger` row numbered from its `first_seq` (`pack`): one insert a commit instead of
one a row, which was most of the ledger's cost. Only what cannot be recomputed is stored: each
entry's key and shape (its table is the shape's) and its digest; the chain values follow from the
digests, and the batch's last is its signed head. At
the end of every commit batch (and when a writer closes: `final`) the head (the last chain
value) is signed with the ledger key and stored in `ledger_heads` in the same transaction, so a
committed batch is always a signed one.

The canonical encoding of a row is what the writer inserts, after scrubbing: the shape (table and
column names) and the values, msgpack-encoded as SQLite gives them back (`encoded`: a bool as its
integer, an integral float as an integer), so the values read from the file encode the same;
where a column's affinity changed a value's type (a number in a TEXT column), `row_matches`
tries the other reading.

Three triggers still update `tool_calls` after its insert (see `capsem/store/session_schema.py`). The
tool calls a batch's `tool_responses` and `mcp_calls` rows touch are read back before the commit
and chained again whole (the shape of every column): a key's latest entry is the one its current
row must match. `session_meta` values overwritten in place are handled the same way.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from capsem import native
from capsem.ids import utc_now
from capsem.store.keys import SigningKey

logger = logging.getLogger(__name__)

_encode = msgspec.msgpack.Encoder().encode
_sha256 = hashlib.sha256
HEAD_TAG = b"capsem-ledger-head-v1\n"
TRIGGERED = "tool_calls"
"""The table the triggers update after its insert."""


PACKED = 2
"""The `ledger.entries` format: [2, keys, shapes, digests] (the digests joined, 32 bytes each).
Files written before it hold [[table, key, shape, digest, chain], ...]: 99 bytes an entry, not 45."""


def pack(entries: Sequence[tuple]) -> bytes:
    """A batch's entries (table, key, shape, digest, chain) as stored: keys, shapes, digests."""
    return _encode(
        [PACKED, [e[1] for e in entries], [e[2] for e in entries], b"".join(e[3] for e in entries)]
    )


def unpack(packed: bytes, tables: Mapping[int, str]) -> list[tuple[str, Any, int, bytes, bytes | None]]:
    """A batch's entries in commit order: (table, key, shape, digest, chain); the table from its
    shape (`tables`: shape id to table; "?" for an unknown shape), the chain None where the format
    does not store it (the caller recomputes it from the digests)."""
    data = msgspec.msgpack.decode(packed)
    if not data or data[0] != PACKED:  # written before PACKED: each entry whole
        return [(table, key, shape, digest, chain) for table, key, shape, digest, chain in data]
    _, keys, shapes, digests = data
    if len(digests) != 32 * len(keys) or len(shapes) != len(keys):
        raise ValueError(
            f"a ledger batch of {len(keys)} keys, {len(shapes)} shapes and {len(digests)} digest bytes"
        )
    return [(tables.get(shape, "?"), key, shape, digests[32 * i : 32 * i + 32], None)
            for i, (key, shape) in enumerate(zip(keys, shapes, strict=True))]  # fmt: skip


def genesis(session_id: str) -> bytes:
    """The chain's value before its first entry: bound to the session, so a chain cannot be moved."""
    return _sha256(b"capsem-ledger-v1\0" + session_id.encode()).digest()


_ODD = frozenset((float, bool))


def _number(v: float | bool) -> int | float:
    return int(v) if type(v) is bool or (v.is_integer() and abs(v) < 2**63) else v


def encoded(values: Sequence[Any]) -> bytes:
    """A row's values as SQLite gives them back, msgpack-encoded: a bool as its integer and an
    integral float as an integer (an INTEGER column stores 1.0 as 1, a REAL one 1 as 1.0).
    Most rows hold neither, and are encoded as they are (the check runs in C)."""
    if _ODD.isdisjoint(map(type, values)):
        return _encode(values)
    return _encode([_number(v) if type(v) in _ODD else v for v in values])


_NUMERIC = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def _other_type(v: Any) -> Any:
    """What a value read back may have been written as: a number for numeric text, text for a number."""
    if type(v) is str and _NUMERIC.fullmatch(v):
        return float(v) if "." in v or "e" in v or "E" in v else int(v)
    if type(v) is int:
        return str(v)
    if type(v) is float:
        return str(_number(v))
    return None


def retyped(values: Sequence[Any]) -> list[bytes]:
    """The other encodings a row read back may have had when written, for `capsem verify` when
    the first does not match: a number written to a TEXT column comes back as text, a numeric
    text written to an INTEGER or REAL column as a number. One column at a time (the typed rows
    the recorder writes have none; a row with two such columns does not verify)."""
    out = []
    for i, v in enumerate(values):
        other = _other_type(v)
        if other is not None:
            out.append(encoded([*values[:i], other, *values[i + 1 :]]))
    return out


def shape_prefix(table: str, columns: Sequence[str]) -> bytes:
    """What every row digest of a shape starts with: its table and column names, encoded."""
    return _encode([table, list(columns)])


def shape_hash(table: str, columns: Sequence[str]) -> Any:
    """The running hash every row of a shape starts from (copied per row: `capsem verify`)."""
    return _sha256(shape_prefix(table, columns))


def row_digest(start: Any, values: Sequence[Any]) -> bytes:
    h = start.copy()
    h.update(encoded(values))
    return h.digest()


def row_matches(start: Any, values: Sequence[Any], digest: bytes) -> bool:
    """Whether a row read back hashes to `digest`, as written or as its values' SQLite affinity
    may have changed them (`retyped`)."""
    if row_digest(start, values) == digest:
        return True
    for other in retyped(values):
        h = start.copy()
        h.update(other)
        if h.digest() == digest:
            return True
    return False


def link(previous: bytes, digest: bytes) -> bytes:
    return _sha256(previous + digest).digest()


def _chain(shape: _Shape, table: str, rows: Sequence[tuple], chain: bytes, out: list[tuple]) -> bytes:
    """Chain `rows` onto `chain` (entries appended to `out`); the new chain. What
    `capsem.native.chain_rows` does in C, the reference."""
    prefix, k, sid = shape.prefix, shape.key, shape.id
    odd, encode, sha256 = _ODD.isdisjoint, _encode, _sha256
    for row in rows:  # SHA-256(prefix ‖ values): `row_digest`'s value, without a hash object to copy
        digest = sha256(prefix + (encode(row) if odd(map(type, row)) else encoded(row))).digest()
        chain = sha256(chain + digest).digest()
        out.append((table, None if k is None else row[k], sid, digest, chain))
    return chain


def head_message(session_id: str, batch: int, last_seq: int, head: bytes, final: bool, at: str) -> bytes:
    """What a head's signature covers."""
    return HEAD_TAG + _encode([session_id, batch, last_seq, head, int(final), at])


_PRIMARY: dict[str, list[str]] = {}
"""Each table's primary key columns (fixed by the schema, so read once per process)."""


def key_column(conn: sqlite3.Connection, table: str, columns: Sequence[str]) -> int | None:
    """Index in `columns` of the row's key: the single primary key column when given, else `event_id`."""
    pk = _PRIMARY.get(table)
    if pk is None:
        pk = _PRIMARY[table] = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")') if r[5]]
    if len(pk) == 1 and pk[0] in columns:
        return list(columns).index(pk[0])
    return list(columns).index("event_id") if "event_id" in columns else None


@dataclass
class _Shape:
    id: int
    prefix: bytes
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
        self._shapes.clear()
        for sid, table, columns in conn.execute("SELECT id, tbl, columns FROM ledger_shapes"):
            names = tuple(msgspec.json.decode(columns))
            self._shapes[(table, names)] = _Shape(
                sid, shape_prefix(table, names), key_column(conn, table, names), True
            )
        row = conn.execute(  # a batch's entries and its head are written in one transaction
            "SELECT batch, last_seq, head, final FROM ledger_heads ORDER BY batch DESC LIMIT 1"
        ).fetchone()
        if row:
            self.batch, self.seq, self.chain = row[0], row[1], row[2]
            self.last = Head(row[0], row[1], row[2], bool(row[3]))
        self._loaded = True

    def begin(self, conn: sqlite3.Connection) -> None:
        """Start a commit batch (inside the writer's transaction)."""
        if not self._loaded or self._moved_on(conn):
            self.load(conn)
        self._saved = (self.seq, self.batch, self.chain, self.last)
        self.batch += 1

    def _moved_on(self, conn: sqlite3.Connection) -> bool:
        """Whether another writer committed since (one indexed lookup a commit; the transaction
        the writer holds keeps it so until the commit ends)."""
        row = conn.execute("SELECT MAX(batch) FROM ledger_heads").fetchone()
        return (row[0] or 0) != self.batch

    def rows(self, conn: sqlite3.Connection, table: str, columns: tuple[str, ...], rows: list[tuple]) -> None:
        """Chain rows as written (scrubbed), in the order they were inserted."""
        shape = self._shape(conn, table, columns)
        out, chain, done, compiled = self._entries, self.chain, 0, native.chain_rows
        before = len(out)
        while done < len(rows):
            if compiled is not None:  # up to a row holding a value it does not encode
                chain, done = compiled(shape.prefix, rows, done, -1 if shape.key is None else shape.key, chain,
                                       table, shape.id, out, _sha256)  # fmt: skip
            stop = done + 1 if compiled is not None else len(rows)
            chain = _chain(shape, table, rows[done:stop], chain, out)
            done = stop
        self.seq += len(out) - before
        self.chain = chain
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
            first = self.seq - len(self._entries) + 1
            conn.execute("INSERT INTO ledger VALUES (?, ?, ?)", (self.batch, first, pack(self._entries)))
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
            shape = self._shapes[(table, columns)] = _Shape(sid, shape_prefix(table, columns),
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
