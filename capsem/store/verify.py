"""Recomputing a session's chain and main.db's chain of sessions (`capsem verify`), read-only.

A session verifies when every chained row's current value hashes to its latest entry, no row is
missing or unchained, the chain links from the session's genesis to every head, every head's
signature holds under `ledger.pub`, nothing follows the last signed head, a session that says it
stopped ends with a final head, and the heads main.db's chain recorded for it are in it. Each
failure is a `Problem` naming the table and key of the first row changed, removed or added.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from capsem.store.keys import signature_holds
from capsem.store.ledger import Head, genesis, head_message, key_column, link, row_matches, shape_hash, unpack
from capsem.store.sessions_chain import ENTRY_TAG, GENESIS, Entry, entry_chain

NOT_CHAINED = ("ledger", "ledger_shapes", "ledger_heads", "_capsem_migrations")
ENDED = ("stopped", "terminated")
"""Statuses of a session that says it stopped: its chain must end with a signed final head."""


@dataclass(frozen=True)
class Problem:
    what: str
    """changed, removed, added, chain, signature, unsigned, cut, missing, uncovered."""
    table: str | None = None
    key: Any = None
    detail: str = ""
    order: int = 0
    key_name: str = "id"

    def __str__(self) -> str:
        where = f"{self.table} {self.key_name} {_key_text(self.key)}: " if self.table else ""
        return f"{where}{self.what}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class Verdict:
    session_id: str
    problems: list[Problem] = field(default_factory=list)
    rows: int = 0
    batches: int = 0
    last: Head | None = None
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first(self) -> Problem | None:
        return min(self.problems, key=lambda p: p.order) if self.problems else None


def _key_text(key: Any) -> str:
    return key.hex()[:16] if isinstance(key, bytes) else str(key)


# Long: one pass over the entries, one over the heads, one over the rows, each small.
def verify_session(conn: sqlite3.Connection, session_id: str, public: Ed25519PublicKey | None, *,
                   status: str | None = None, recorded: list[Entry] = ()) -> Verdict:  # fmt: skip
    """Recompute one session.db's chain (an open read-only connection)."""
    out = Verdict(session_id)
    try:
        shapes = {
            sid: (t, tuple(msgspec.json.decode(c)))
            for sid, t, c in conn.execute("SELECT * FROM ledger_shapes")
        }
        heads = conn.execute("SELECT batch, last_seq, head, final, at, key_id, signature FROM ledger_heads "
                             "ORDER BY batch").fetchall()  # fmt: skip
    except sqlite3.Error:
        out.problems.append(Problem("uncovered", detail="no ledger: recorded before capsem kept one"))
        return out
    wanted = {h[1] for h in heads}
    tables = {sid: table for sid, (table, _) in shapes.items()}
    chain_at: dict[int, bytes] = {0: genesis(session_id)}
    latest: dict[tuple[str, Any], tuple[int, int, bytes]] = {}
    previous, expected = chain_at[0], 1
    for first, packed in conn.execute("SELECT first_seq, entries FROM ledger ORDER BY batch"):
        if first != expected:
            out.problems.append(
                Problem("chain", detail=f"ledger entries {expected}..{first - 1} removed", order=expected)
            )
        try:
            entries = unpack(packed, tables)
        except (ValueError, TypeError, KeyError, msgspec.DecodeError) as exc:
            out.problems.append(
                Problem("chain", detail=f"ledger entries from {first} unreadable: {exc}", order=first)
            )
            continue
        for seq, (table, key, shape, digest, chain) in enumerate(entries, first):
            previous = link(previous, digest)
            if chain is not None and previous != chain:  # stored by files written before `PACKED`
                out.problems.append(
                    Problem("chain", table, key, f"entry {seq} does not link to the one before", seq)
                )
            if seq in wanted:
                chain_at[seq] = previous
            latest[(table, key)] = (seq, shape, digest)
            out.rows += 1
            expected = seq + 1
    last_seq = expected - 1
    _check_heads(out, session_id, heads, chain_at, public, last_seq)
    _check_rows(out, conn, shapes, latest)
    _check_end(out, status, recorded)
    return out


def _check_heads(out: Verdict, session_id: str, heads: list, chain_at: dict[int, bytes],
                 public: Ed25519PublicKey | None, last_seq: int) -> None:  # fmt: skip
    for i, (batch, seq, head, final, at, _key_id, signature) in enumerate(heads, 1):
        if batch != i:
            out.problems.append(Problem("chain", detail=f"signed heads {i}..{batch - 1} removed", order=-1))
        if chain_at.get(seq) != head:
            out.problems.append(
                Problem("chain", detail=f"head of batch {batch} does not match the chain", order=-1)
            )
        message = head_message(session_id, batch, seq, head, bool(final), at)
        if public is None or not signature:
            out.problems.append(Problem("signature", detail=f"batch {batch} is not signed", order=-2))
        elif not signature_holds(public, signature, message):
            out.problems.append(Problem("signature", detail=f"the signature of batch {batch} does not hold "
                                        "under ledger.pub", order=-2))  # fmt: skip
        out.last = Head(batch, seq, head, bool(final))
    out.batches = len(heads)
    signed = out.last.last_seq if out.last else 0
    if last_seq > signed:
        out.problems.append(Problem("unsigned", detail=f"entries {signed + 1}..{last_seq} follow the last signed "
                                    "head", order=signed + 1))  # fmt: skip


def _check_rows(out: Verdict, conn: sqlite3.Connection, shapes: dict[int, tuple[str, tuple[str, ...]]],
                latest: dict[tuple[str, Any], tuple[int, int, bytes]]) -> None:  # fmt: skip
    by_shape: dict[int, list[tuple[Any, int, bytes]]] = defaultdict(list)
    for (_table, key), (seq, shape, digest) in latest.items():
        by_shape[shape].append((key, seq, digest))
    claimed: dict[tuple[str, str], set] = defaultdict(set)
    for shape, wanted in by_shape.items():
        table, columns = shapes.get(shape, ("?", ()))
        k = key_column(conn, table, columns) if columns else None
        if k is None:
            out.problems.append(
                Problem("chain", detail=f"shape {shape} of {table} unknown or without a key", order=-1)
            )
            continue
        claimed[(table, columns[k])].update(key for key, _, _ in wanted)
        start, cols = shape_hash(table, columns), ", ".join(f'"{c}"' for c in columns)
        try:
            current = {r[k]: r for r in map(tuple, conn.execute(f'SELECT {cols} FROM "{table}"'))}
        except sqlite3.Error as exc:
            current, detail = {}, str(exc)
            out.problems.append(Problem("removed", detail=f"{table}: {detail}", order=-1))
        for key, seq, digest in wanted:
            row = current.get(key)
            if row is None:
                out.problems.append(
                    Problem("removed", table, key, f"chained as entry {seq}", seq, columns[k])
                )
            elif not row_matches(start, row, digest):
                out.problems.append(
                    Problem("changed", table, key, f"does not match entry {seq}", seq, columns[k])
                )
    _check_added(out, conn, claimed)


def _check_added(out: Verdict, conn: sqlite3.Connection, claimed: dict[tuple[str, str], set]) -> None:
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                         "AND name NOT LIKE 'sqlite_%'")]  # fmt: skip
    for table in tables:
        if table in NOT_CHAINED:
            continue
        info = list(conn.execute(f'PRAGMA table_info("{table}")'))
        pk = [r[1] for r in info if r[5]]
        ident = pk[0] if len(pk) == 1 else "rowid"
        has_event = any(r[1] == "event_id" for r in info)
        by_id, by_event = claimed.get((table, ident), set()), claimed.get((table, "event_id"), set())
        sql = f'SELECT "{ident}", {"event_id" if has_event else "NULL"} FROM "{table}"'
        for ident_value, event_id in conn.execute(sql):
            if ident_value not in by_id and (event_id is None or event_id not in by_event):
                out.problems.append(Problem("added", table, ident_value, "no ledger entry", 1 << 62, ident))
                break  # the first of each table is enough to name


def _check_end(out: Verdict, status: str | None, recorded: list[Entry]) -> None:
    last = out.last
    ends = [e for e in recorded if e.kind == "end" and e.batch is not None]
    for entry in ends:
        if last is None or entry.batch > last.batch:
            out.problems.append(Problem("cut", detail=f"main.db's chain recorded batch {entry.batch}; the session "
                                        f"ends at batch {last.batch if last else 0}", order=0))  # fmt: skip
        elif entry.batch == last.batch and entry.head != last.head:
            out.problems.append(Problem("cut", detail=f"batch {entry.batch} differs from the head main.db's "
                                        "chain recorded", order=0))  # fmt: skip
    if status in ENDED and (last is None or not last.final):
        where = f"batch {last.batch}" if last else "its start"
        out.problems.append(Problem("cut", detail=f"the session says it stopped but its signed end is missing; "
                                    f"the record ends at {where}", order=0))  # fmt: skip
    elif last is not None and not last.final:
        out.note = (
            f"no signed end ({status or 'unknown'}): verified up to batch {last.batch}, entry {last.last_seq}"
        )


def verify_sessions_chain(entries: list[Entry], public: Ed25519PublicKey | None) -> list[Problem]:
    """main.db's chain: linked from GENESIS, numbered without gaps, every entry signed."""
    problems, previous = [], GENESIS
    for expected, e in enumerate(entries, 1):
        if e.seq != expected:
            problems.append(
                Problem(
                    "chain", "ledger_sessions", expected, "entries removed from main.db's chain", -1, "seq"
                )
            )
        previous = entry_chain(previous, e.seq, e.kind, e.session_id, e.batch, e.head, e.at)
        if previous != e.chain:
            problems.append(
                Problem("chain", "ledger_sessions", e.seq, "does not link to the entry before", -1, "seq")
            )
        if public is None or not signature_holds(public, e.signature, ENTRY_TAG + e.chain):
            problems.append(Problem("signature", "ledger_sessions", e.seq, "its signature does not hold under ledger.pub",
                                    -2, "seq"))  # fmt: skip
    return problems
