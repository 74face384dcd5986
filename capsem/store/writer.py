"""The one write path into session.db: scrubbed, batched, retried, and honest about losses.

Everything that writes session.db goes through a `SessionWriter`: the recorder's, the one
writer while a session runs (capture tables, and `capsem run`'s `fs_events`, `proc_samples` and
`proc_anomalies`, which reach it through its inbox, `addons/recorder/inbox.py`), or, when no
recorder runs the session, one of `assembler/offline_write.py`. Every string passes the
session's `Scrubber` when it is written (not when it is queued, so a secret learned from a later
header in the same batch is caught too), so no secret reaches the file by any path.

Rows are queued and written by `commit()` in one transaction, table by table with
`executemany` (the recorder commits at least every `commit_interval`). When a commit fails
(a full disk, a locked or read-only file) the transaction is rolled back and the rows stay
queued for the next attempt; only when more than `max_queued_rows` wait are the oldest
dropped, and counted. `health` says what happened; it is stored in `session_meta`
(`capture_*` keys) so that the rollup, `inspect-session` and `list-sessions` can report it.

Every row written (as scrubbed) and every `session_meta` value enters the session's hash chain in
the same transaction, and the batch's head is signed with the ledger key
(`capsem/store/ledger.py`); `close()` seals the chain with a final head.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from operator import attrgetter
from pathlib import Path
from typing import Any

from capsem.redact import Scrubber
from capsem.store.keys import signing_key
from capsem.store.ledger import Head, Ledger
from capsem.store.rows import LINKED_TABLES, Row, new_event_id
from capsem.store.schema import open_session_db

logger = logging.getLogger(__name__)

# Insert order inside one commit: a trigger on mcp_calls points tool_calls at it, so tool calls go first.
_ORDER = ("net_events", "model_calls", "tool_calls", "tool_responses", "mcp_calls", "fs_events",
          "proc_samples", "proc_anomalies", "content_frames", "body_chunks", "event_body_blobs", "item_data", "model_items",
          "model_item_lists", "input_breakdown", "substitution_events", "cache_breaks", "compactions",
          "approvals", "response_chunks")  # fmt: skip


@dataclass
class CaptureHealth:
    """What the writer could not do. All zero and None on a healthy session."""

    commit_failures: int = 0
    rows_lost: int = 0
    """Rows dropped for good: they waited through failed commits beyond the queue's bound."""
    last_error: str | None = None

    def meta(self) -> dict[str, str]:
        out = {"capture_commit_failures": str(self.commit_failures), "capture_rows_lost": str(self.rows_lost)}
        if self.last_error:
            out["capture_last_error"] = self.last_error
        return out


class _Table:
    """Queued rows of one table, with the statement that writes them."""

    __slots__ = ("columns", "name", "rows", "sql")

    def __init__(self, name: str, columns: tuple[str, ...]) -> None:
        self.name = name
        self.columns = columns
        self.rows: list[tuple[Any, ...]] = []
        marks = ", ".join("?" * len(columns))
        self.sql = f"INSERT INTO {name} ({', '.join(columns)}) VALUES ({marks})"


class SessionWriter:
    """Writes one session.db. Not thread-safe: one owner thread (or process) per writer."""

    def __init__(self, path: Path, scrubber: Scrubber | None = None, *, max_queued_rows: int = 200_000,
                 timeout: float = 5.0, ledger: bool = True) -> None:  # fmt: skip
        self.path = path
        self.scrubber = scrubber or Scrubber()
        self.max_queued_rows = max_queued_rows
        self.conn: sqlite3.Connection = open_session_db(path, timeout=timeout)
        self.schema = {
            table: {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")} for table in _ORDER
        }
        self.health = CaptureHealth()
        self.written = 0
        self.commits = 0
        self._tables: dict[tuple[str, tuple[str, ...]], _Table] = {}
        self._getters: dict[type, tuple[tuple[str, ...], attrgetter]] = {}
        self._meta: dict[str, str] = {}
        self._queued = 0
        self.ledger = Ledger(path.parent.name, _key()) if ledger else None

    # -- queueing ------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Rows and meta values waiting for `commit()`."""
        return self._queued + len(self._meta)

    def add(self, rows: Iterable[Row]) -> None:
        """Queue typed rows (see capsem/store/rows.py)."""
        for row in rows:
            columns, get = self._getter(type(row))
            self._queue(row.TABLE, columns, get(row))

    def add_dicts(self, table: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Queue rows given as column -> value mappings (each gets an `event_id` if it has none)."""
        known = self.schema[table]
        for row in rows:
            values = dict(row)
            values.setdefault("event_id", new_event_id())
            unknown = set(values) - known
            if unknown:
                raise KeyError(f"{table} has no columns {sorted(unknown)}")
            self._queue(table, tuple(values), tuple(values.values()))

    def set_meta(self, **values: str) -> None:
        """Queue `session_meta` values (written, scrubbed, with the next commit)."""
        self._meta.update(values)

    def _getter(self, cls: type) -> tuple[tuple[str, ...], attrgetter]:
        found = self._getters.get(cls)
        if found is None:
            names = tuple(f.name for f in fields(cls))
            unknown = set(names) - self.schema[cls.TABLE]  # type: ignore[attr-defined]
            if unknown:
                raise KeyError(f"{cls.TABLE} has no columns {sorted(unknown)}")  # type: ignore[attr-defined]
            found = self._getters[cls] = (names, attrgetter(*names))
        return found

    def _queue(self, table: str, columns: tuple[str, ...], values: tuple[Any, ...]) -> None:
        key = (table, columns)
        target = self._tables.get(key)
        if target is None:
            target = self._tables[key] = _Table(table, columns)
        target.rows.append(values)
        self._queued += 1
        if self._queued > self.max_queued_rows:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        """Over the bound (commits keep failing): drop the oldest queued rows of the fullest table."""
        target = max(self._tables.values(), key=lambda t: len(t.rows))
        excess = max(1, self._queued - self.max_queued_rows)
        del target.rows[:excess]
        self._queued -= excess
        self.health.rows_lost += excess

    # -- writing -------------------------------------------------------------------------------

    def commit(self) -> bool:
        """Write everything queued in one transaction. False (rows kept for the next try) on failure."""
        if not self.pending:
            return True
        if self.health.commit_failures or self.health.rows_lost:
            self._meta.update(self.health.meta())
        tables = sorted(self._tables.values(), key=lambda t: _rank(t.sql))
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            ledger = self.ledger
            if ledger is not None:
                ledger.begin(self.conn)
            scrub = self.scrubber.scrub  # at commit, not when queued: secrets learned meanwhile count too
            for table in tables:
                if table.rows:
                    rows = [tuple([scrub(v) if type(v) is str else v for v in row]) for row in table.rows]
                    self.conn.executemany(table.sql, rows)
                    if ledger is not None:
                        ledger.rows(self.conn, table.name, table.columns, rows)
            if self._meta:
                scrub = self.scrubber.scrub
                meta = [(k, scrub(v)) for k, v in self._meta.items()]
                self.conn.executemany(
                    "INSERT INTO session_meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    meta,
                )
                if ledger is not None:
                    ledger.rows(self.conn, "session_meta", ("key", "value"), meta)
            if ledger is not None:
                ledger.seal(self.conn)
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            if self.ledger is not None:
                self.ledger.rolled_back()
            self.health.commit_failures += 1
            if self.health.last_error != str(exc):
                logger.warning("capsem: writing %s failed (%s); %d rows kept for the next try",
                               self.path, exc, self._queued)  # fmt: skip
            self.health.last_error = str(exc)
            return False
        self.written += self._queued
        self.commits += 1
        if self.ledger is not None:
            self.ledger.committed()
        for table in tables:
            table.rows.clear()
        self._queued = 0
        self._meta.clear()
        return True

    def max_ids(self) -> dict[str, int]:
        """The largest id of each linked table (where `IdMinter` starts)."""
        return {
            t: self.conn.execute(f"SELECT COALESCE(MAX(id), 0) FROM {t}").fetchone()[0] for t in LINKED_TABLES
        }

    def close(self, attempts: int = 3, *, checkpoint: bool = True, end: bool = False) -> None:
        """Commit (a few tries), record the health, seal the chain with a final head (`end`: the
        recorder's end of the session; another writer seals only when it wrote something),
        checkpoint the WAL into the main file (the recorder's job at the end of the session;
        other writers pass `checkpoint=False`), close."""
        try:
            for _ in range(attempts):
                if self.commit():
                    break
            if self.pending:
                self.health.rows_lost += self._queued
                logger.warning("capsem: %d rows could not be written to %s: %s", self._queued, self.path,
                               self.health.last_error)  # fmt: skip
            if self.health.commit_failures or self.health.rows_lost:
                self._tables.clear()
                self._queued = 0
                self._meta = self.health.meta()
                self.commit()
            if end or self.commits:
                self._seal_final()
            if checkpoint:
                try:
                    self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error as exc:
                    logger.warning("capsem: checkpointing %s failed: %s", self.path, exc)
        finally:
            self.conn.close()

    @property
    def head(self) -> Head | None:
        """The chain's last signed head (None: nothing chained yet, or no ledger)."""
        return self.ledger.last if self.ledger is not None else None

    def _seal_final(self) -> None:
        """The writer's end: a signed head marked final (a session that says it stopped has one)."""
        if self.ledger is None:
            return
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            self.ledger.begin(self.conn)
            self.ledger.seal(self.conn, final=True)
            self.conn.execute("COMMIT")
            self.ledger.committed()
        except sqlite3.Error as exc:
            self._rollback()
            self.ledger.rolled_back()
            logger.warning("capsem: sealing the ledger of %s failed: %s", self.path, exc)

    def _rollback(self) -> None:
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _key():
    """The ledger key of `$CAPSEM_HOME` (None, logged, when it cannot be read or made: rows are
    still chained, and `capsem verify` reports the heads unsigned)."""
    try:
        return signing_key()
    except (OSError, ValueError) as exc:
        logger.warning("capsem: the ledger key cannot be read or made (%s); heads are not signed", exc)
        return None


def _rank(sql: str) -> int:
    table = sql.split()[2]
    return _ORDER.index(table) if table in _ORDER else len(_ORDER)
