"""Finding and opening databases for the offline commands (read-only, gzipped or not).

The offline commands' way to a session's data (`session.db`, or `session.db.gz` once a finished
session was vacuumed: opened by `capsem.store.reading`) and the one place that opens main.db for
reading. Every reader (list, inspect, query, cost-report,
retention) goes through here.
"""

from __future__ import annotations

import glob
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from capsem.paths import main_db_path, session_dir, sessions_dir
from capsem.store.reading import DB_NAME as DB_NAME  # the readers' names, re-exported for the commands
from capsem.store.reading import GZ_NAME as GZ_NAME
from capsem.store.reading import SessionDbError as SessionDbError
from capsem.store.reading import db_file as db_file
from capsem.store.reading import open_path as open_path
from capsem.store.schema import MAIN_MIGRATIONS, connect, open_main_db


class SessionNotFound(LookupError):
    """No such session, or no database on disk for it."""


class MainDbMissing(FileNotFoundError):
    """main.db does not exist yet (nothing was recorded under this CAPSEM_HOME)."""


@contextmanager
def open_main() -> Iterator[sqlite3.Connection]:
    """A read-only connection to main.db.

    Raises:
        MainDbMissing: when main.db does not exist.
    """
    path = main_db_path()
    if not path.is_file():
        raise MainDbMissing(f"no main.db at {path} (no session recorded yet)")
    _upgrade_main(path)
    conn = connect(path, readonly=True)
    try:
        yield conn
    finally:
        conn.close()


def _upgrade_main(path: Path) -> None:
    """Apply main.db migrations a newer capsem added (one short write; skipped when the file is
    read-only or busy: readers then see the older columns)."""
    try:
        conn = connect(path, readonly=True)
        try:
            done = {r[0] for r in conn.execute("SELECT name FROM _capsem_migrations")}
        finally:
            conn.close()
        if {name for name, _ in MAIN_MIGRATIONS} <= done:
            return
        open_main_db(path).close()
    except (sqlite3.Error, OSError, RuntimeError):
        pass


def main_row(session_id: str) -> dict | None:
    """The session's main.db row, or None (also when main.db does not exist)."""
    try:
        with open_main() as conn:
            row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
    except MainDbMissing:
        return None
    return dict(row) if row else None


def newest_session_with_db() -> str:
    """The most recent session that still has a database on disk (plain or gzipped)."""
    candidates: list[str] = []
    try:
        with open_main() as conn:
            candidates = [
                r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY created_at DESC, id DESC")
            ]
    except MainDbMissing:
        pass
    if sessions_dir().is_dir():
        on_disk = sorted((p.name for p in sessions_dir().iterdir() if p.is_dir()), reverse=True)
        candidates += [s for s in on_disk if s not in candidates]
    for session_id in candidates:
        if db_file(session_id) is not None:
            return session_id
    raise SessionNotFound(f"no session with a database under {sessions_dir()}")


def resolve(session_id: str | None) -> str:
    """`session_id` (or the one session whose id it starts) checked to have a database, or the
    newest session that has one.

    Raises:
        SessionNotFound: naming the directory that was looked at.
    """
    if session_id is None:
        return newest_session_with_db()
    if "/" in session_id or session_id in ("", ".", ".."):
        raise SessionNotFound(f"{session_id!r} is not a session id")
    if db_file(session_id) is None and main_row(session_id) is None:
        session_id = _by_prefix(session_id)
    if db_file(session_id) is None:
        row = main_row(session_id)
        gone = row is not None and row["status"] in ("culled", "terminated")
        why = f" (culled by retention: {row.get('culled_reason') or 'reason not recorded'})" if gone else ""
        raise SessionNotFound(
            f"no {DB_NAME} or {GZ_NAME} for session {session_id!r} in {session_dir(session_id)}{why}"
        )
    return session_id


def _by_prefix(prefix: str) -> str:
    """The one session whose id starts with `prefix` (or `prefix` itself when none does).

    Raises:
        SessionNotFound: when several do, naming them.
    """
    found = {p.name for p in sessions_dir().glob(f"{glob.escape(prefix)}*") if p.is_dir()}
    try:
        with open_main() as conn:
            found |= {r[0] for r in conn.execute("SELECT id FROM sessions WHERE substr(id, 1, ?) = ?",
                                                 (len(prefix), prefix))}  # fmt: skip
    except MainDbMissing:
        pass
    if len(found) > 1:
        shown = ", ".join(sorted(found)[:5]) + (", ..." if len(found) > 5 else "")
        raise SessionNotFound(f"{prefix!r} matches {len(found)} sessions ({shown}): give more of the id")
    return found.pop() if found else prefix


@contextmanager
def open_session(session_id: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection to a session's database, transparently decompressing `.gz`.

    Raises:
        SessionNotFound: the session has no database on disk.
        SessionDbError: the database (or its archive) cannot be opened.
    """
    path = db_file(session_id)
    if path is None:
        raise SessionNotFound(
            f"no {DB_NAME} or {GZ_NAME} for session {session_id!r} in {session_dir(session_id)}"
        )
    with open_path(path) as conn:
        yield conn


def disk_usage(path: Path) -> int:
    """Bytes allocated on disk under `path` (blocks x 512; symlinks are not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path, followlinks=False):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += getattr(st, "st_blocks", 0) * 512 or st.st_size
    return total
