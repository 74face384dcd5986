"""Opening capsem's two databases: session.db (`capsem.store.session_schema`) and main.db
(`capsem.store.main_schema`), each migrated on open (`capsem.store.migrations`); readers open read-only and
never migrate.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

from capsem.packed import register as register_packed
from capsem.private import private_dir, private_file
from capsem.store.main_schema import MAIN as MAIN_MIGRATIONS
from capsem.store.migrations import Migration, migrate
from capsem.store.session_schema import SESSION as SESSION_MIGRATIONS
from capsem.store.session_schema import SESSION_TABLES, STORAGE_TABLES

__all__ = ["MAIN_MIGRATIONS", "SESSION_MIGRATIONS", "SESSION_TABLES", "STORAGE_TABLES", "Migration", "connect",
           "migrate", "open_main_db", "open_session_db"]  # fmt: skip


def connect(path: Path, *, readonly: bool = False, timeout: float = 5.0) -> sqlite3.Connection:
    """Open a database with capsem's settings (WAL for writers, read-only URI for readers)."""
    if readonly:
        uri = f"{Path(path).resolve().as_uri()}?mode=ro"  # as_uri escapes '?', '#' and '%' in the path
        conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None)
        conn.execute("PRAGMA query_only = ON")
    else:
        private_dir(path.parent)
        with contextlib.suppress(OSError):  # (SQLite says why it cannot open it)
            private_file(path)  # 0600 before SQLite makes it: its -wal and -shm get the same mode
        conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
        _wal(conn, timeout)
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    register_packed(conn)
    conn.row_factory = sqlite3.Row
    return conn


def _wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Put the file in WAL mode, waiting up to `timeout` for the lock that takes: SQLite answers
    `database is locked` at once, without its busy handler, while another connection holds the
    write lock of a file still in rollback mode (the recorder and `capsem run`'s workspace watcher
    open and migrate a new session.db together)."""
    deadline, pause = time.monotonic() + timeout, 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                conn.close()
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def open_session_db(path: Path, *, timeout: float = 5.0) -> sqlite3.Connection:
    conn = connect(path, timeout=timeout)
    try:
        migrate(conn, SESSION_MIGRATIONS)
    except BaseException:
        conn.close()  # (a damaged file: leave no connection, nor its -wal and -shm, behind)
        raise
    return conn


def open_main_db(path: Path) -> sqlite3.Connection:
    conn = connect(path)
    migrate(conn, MAIN_MIGRATIONS)
    return conn
