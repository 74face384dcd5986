"""Finding and opening session databases for the offline commands (read-only, gzipped or not).

The one place that knows where a session's data lives: `session.db`, or `session.db.gz` once a
finished session was vacuumed (decompressed to a temporary file, removed on close).
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from capsem.paths import main_db_path, session_dir, sessions_dir
from capsem.schema import connect


class SessionNotFound(LookupError):
    """No such session, or no database on disk for it."""


def db_file(session_id: str) -> Path | None:
    """The session's database file (`session.db`, else `session.db.gz`), if one exists."""
    folder = session_dir(session_id)
    for name in ("session.db", "session.db.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def newest_session_with_db() -> str:
    """The most recent session that still has a database on disk."""
    candidates: list[str] = []
    if main_db_path().is_file():
        conn = connect(main_db_path(), readonly=True)
        try:
            candidates = [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY created_at DESC")]
        finally:
            conn.close()
    if sessions_dir().is_dir():
        on_disk = sorted((p.name for p in sessions_dir().iterdir() if p.is_dir()), reverse=True)
        candidates += [s for s in on_disk if s not in candidates]
    for session_id in candidates:
        if db_file(session_id) is not None:
            return session_id
    raise SessionNotFound(f"no session with a database under {sessions_dir()}")


def resolve(session_id: str | None) -> str:
    """`session_id` checked to have a database, or the newest session that has one."""
    if session_id is None:
        return newest_session_with_db()
    if db_file(session_id) is None:
        raise SessionNotFound(f"no session.db for session {session_id!r} under {session_dir(session_id)}")
    return session_id


@contextmanager
def open_session(session_id: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection to a session's database, transparently decompressing `.gz`."""
    path = db_file(session_id)
    if path is None:
        raise SessionNotFound(f"no session.db for session {session_id!r}")
    tmp: Path | None = None
    if path.suffix == ".gz":
        handle, name = tempfile.mkstemp(prefix=f"capsem-{session_id}-", suffix=".db")
        tmp = Path(name)
        with gzip.open(path, "rb") as src, open(handle, "wb") as dst:
            shutil.copyfileobj(src, dst)
        path = tmp
    conn = connect(path, readonly=True)
    try:
        yield conn
    finally:
        conn.close()
        if tmp is not None:
            tmp.unlink(missing_ok=True)
