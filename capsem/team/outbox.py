"""The local outbox: which sessions wait to be pushed to the team, how far each one got, and why
the last attempt failed. A small SQLite file of its own, `$CAPSEM_HOME/team/outbox.db` (0600),
rather than main.db tables: it is written by the pusher every few seconds while main.db's writers
(recorder, rollup, spend ledger) stay undisturbed, it can be deleted to start over (`capsem team
push --all` re-sends, the keys make that harmless), and main.db's migrations stay free of it.

The rows themselves wait where they already are, in each session.db; the outbox keeps per session
the last row id pushed of each table (`cursors`). A push commits in PostgreSQL first and moves the
cursors after, so a crash between the two re-sends rows the server already has: its keys
(machine, session, row id) make that a no-op, never a double count.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from capsem.ids import utc_now
from capsem.paths import capsem_home
from capsem.store.schema import connect


def outbox_path() -> Path:
    return capsem_home() / "team" / "outbox.db"


@dataclass
class Entry:
    session_id: str
    state: str
    """`waiting` (not pushed whole yet) or `done` (pushed after the session ended)."""
    cursors: dict[str, int] = field(default_factory=dict)
    pushed_at: str | None = None
    rows: int = 0
    attempts: int = 0
    """Failed attempts since the last success."""
    error: str | None = None


def open_outbox(path: Path | None = None) -> sqlite3.Connection:
    conn = connect(path or outbox_path())
    conn.execute("""CREATE TABLE IF NOT EXISTS queue (
        session_id TEXT PRIMARY KEY, state TEXT NOT NULL DEFAULT 'waiting', enqueued_at TEXT NOT NULL,
        cursors TEXT NOT NULL DEFAULT '{}', pushed_at TEXT, rows INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0, error TEXT)""")  # fmt: skip
    return conn


def enqueue(conn: sqlite3.Connection, session_ids: list[str], *, again: bool = False) -> None:
    """Sessions to push; `again`: from their first row, even those already pushed."""
    for session_id in session_ids:
        conn.execute("INSERT INTO queue (session_id, enqueued_at) VALUES (?, ?) ON CONFLICT (session_id) DO "
                     + ("UPDATE SET state = 'waiting', cursors = '{}'" if again else "UPDATE SET state = 'waiting'"),
                     (session_id, utc_now()))  # fmt: skip


def entries(conn: sqlite3.Connection, *, waiting: bool = False) -> list[Entry]:
    sql = "SELECT session_id, state, cursors, pushed_at, rows, attempts, error FROM queue"
    sql += " WHERE state = 'waiting'" if waiting else ""
    return [Entry(r[0], r[1], json.loads(r[2]), r[3], r[4], r[5], r[6])
            for r in conn.execute(sql + " ORDER BY enqueued_at, session_id")]  # fmt: skip


def pushed(
    conn: sqlite3.Connection, session_id: str, cursors: dict[str, int], rows: int, final: bool
) -> None:
    """A push committed: the cursors move on; `final`: the session had ended, it is done."""
    conn.execute("UPDATE queue SET cursors = ?, pushed_at = ?, rows = rows + ?, attempts = 0, error = NULL, "
                 "state = ? WHERE session_id = ?",
                 (json.dumps(cursors), utc_now(), rows, "done" if final else "waiting", session_id))  # fmt: skip


def failed(conn: sqlite3.Connection, session_id: str, error: str) -> None:
    conn.execute("UPDATE queue SET attempts = attempts + 1, error = ? WHERE session_id = ?",
                 (error[:500], session_id))  # fmt: skip
