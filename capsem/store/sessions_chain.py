"""main.db's chain of sessions: each session's head when its writer ends (`end`) and each
session retention removes (`cull`), chained and signed like a session's rows, so a session
whose folder disappears, or whose last batches are cut, is noticed (`capsem verify`).

An entry's `chain` = SHA-256(previous chain ‖ msgpack([seq, kind, session_id, batch, head, at])),
from `GENESIS`; its signature covers `ENTRY_TAG` + that chain value.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import msgspec

from capsem.ids import utc_now
from capsem.store.keys import SigningKey, signing_key
from capsem.store.ledger import Head
from capsem.store.schema import connect

logger = logging.getLogger(__name__)

GENESIS = hashlib.sha256(b"capsem-ledger-sessions-v1").digest()
ENTRY_TAG = b"capsem-ledger-sessions-v1\n"
_encode = msgspec.msgpack.Encoder().encode


@dataclass(frozen=True)
class Entry:
    seq: int
    kind: str
    session_id: str
    batch: int | None
    head: bytes | None
    at: str
    chain: bytes
    key_id: str
    signature: bytes


def entry_chain(previous: bytes, seq: int, kind: str, session_id: str, batch: int | None, head: bytes | None,
                at: str) -> bytes:  # fmt: skip
    return hashlib.sha256(previous + _encode([seq, kind, session_id, batch, head, at])).digest()


def append(main: sqlite3.Connection, kind: str, session_id: str, head: Head | None,
           key: SigningKey | None = None) -> None:  # fmt: skip
    """Add an entry (one transaction of its own; another session may be appending at once)."""
    key = key or signing_key()
    batch, value = (head.batch, head.head) if head else (None, None)
    own = not main.in_transaction
    if own:
        main.execute("BEGIN IMMEDIATE")
    try:
        last = main.execute("SELECT seq, chain FROM ledger_sessions ORDER BY seq DESC LIMIT 1").fetchone()
        seq, previous = (last[0] + 1, last[1]) if last else (1, GENESIS)
        at = utc_now()
        chain = entry_chain(previous, seq, kind, session_id, batch, value, at)
        main.execute("INSERT INTO ledger_sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (seq, kind, session_id, batch, value, at, chain, key.key_id, key.sign(ENTRY_TAG + chain)))  # fmt: skip
        if own:
            main.execute("COMMIT")
    except BaseException:
        if own:
            main.execute("ROLLBACK")
        raise


def record(main: sqlite3.Connection, kind: str, session_id: str, head: Head | None) -> None:
    """`append`, logged instead of raised: the record of a session never fails its stop."""
    try:
        append(main, kind, session_id, head)
    except (sqlite3.Error, OSError, ValueError) as exc:
        logger.warning(
            "capsem: main.db's chain of sessions could not record %s %s: %s", kind, session_id, exc
        )


def record_end(main: sqlite3.Connection, session_id: str, db_path: Path) -> None:
    """Record a session's end in main.db's chain with the last head its session.db holds."""
    head = None
    if db_path.is_file():
        try:
            conn = connect(db_path, readonly=True)
            try:
                head = last_head(conn)
            finally:
                conn.close()
        except sqlite3.Error as exc:
            logger.warning("capsem: reading the ledger head of %s failed: %s", db_path, exc)
    record(main, "end", session_id, head)


def last_head(conn: sqlite3.Connection) -> Head | None:
    """A session.db's last signed head (None: no ledger, or nothing chained)."""
    try:
        row = conn.execute(
            "SELECT batch, last_seq, head, final FROM ledger_heads ORDER BY batch DESC LIMIT 1"
        ).fetchone()
    except sqlite3.Error:
        return None
    return Head(row[0], row[1], row[2], bool(row[3])) if row else None


def entries(main: sqlite3.Connection) -> list[Entry]:
    try:
        return [Entry(*r) for r in main.execute("SELECT * FROM ledger_sessions ORDER BY seq")]
    except sqlite3.Error:
        return []
