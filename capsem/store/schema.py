"""Opening capsem's two databases: session.db (`capsem.store.session_schema`) and main.db
(`capsem.store.main_schema`), each migrated on open (`capsem.store.migrations`); readers open read-only and
never migrate.
"""

from __future__ import annotations

import contextlib
import sqlite3
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
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    register_packed(conn)
    conn.row_factory = sqlite3.Row
    return conn


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
