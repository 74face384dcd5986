"""The session.db writer: one connection, used by the recorder thread only.

Rows are written inside an open transaction that the recorder commits at least every
`commit_interval` (and at shutdown), so a crash loses at most that window. Every text value
passes through the session's `Scrubber` on its way in: secrets never reach the file.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from capsem.redact import Scrubber
from capsem.schema import SESSION_TABLES, open_session_db


class SessionStore:
    def __init__(self, path: Path, scrubber: Scrubber) -> None:
        self.path = path
        self.scrubber = scrubber
        self.conn: sqlite3.Connection = open_session_db(path)
        self._columns = {
            table: [r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")]
            for table in SESSION_TABLES
        }
        self.pending = 0

    def set_meta(self, **values: str) -> None:
        self._begin()
        self.conn.executemany(
            "INSERT INTO session_meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            list(values.items()),
        )
        self.pending += 1  # so the writer commits it soon and never holds the write lock while idle

    def insert(self, table: str, row: dict[str, Any]) -> int:
        """Insert one row (unknown keys are a programming error) and return its id."""
        unknown = set(row) - set(self._columns[table])
        if unknown:
            raise KeyError(f"{table} has no columns {sorted(unknown)}")
        self._begin()
        names = list(row)
        values = [self.scrubber.scrub(v) if isinstance(v, str) else v for v in row.values()]
        cur = self.conn.execute(
            f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})", values
        )
        self.pending += 1
        return int(cur.lastrowid or 0)

    def update(self, table: str, row_id: int, values: dict[str, Any]) -> None:
        """Set columns of one row (strings scrubbed like `insert`)."""
        self._begin()
        sets = ", ".join(f"{k} = ?" for k in values)
        scrubbed = [self.scrubber.scrub(v) if isinstance(v, str) else v for v in values.values()]
        self.conn.execute(f"UPDATE {table} SET {sets} WHERE id = ?", [*scrubbed, row_id])
        self.pending += 1

    def _begin(self) -> None:
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN")

    def commit(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")
        self.pending = 0

    def close(self) -> None:
        """Commit, checkpoint the WAL into the main file, and close."""
        try:
            self.commit()
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            self.conn.close()
