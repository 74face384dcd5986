"""Which sessions a file export reads: named ones (ids or unique prefixes), or every session with a
database on disk (plain or gzipped) created on or after a date."""

from __future__ import annotations

import sqlite3
from datetime import date

from assembler.sessiondb import MainDbMissing, db_file, open_main, resolve
from capsem.paths import sessions_dir


class BadDate(ValueError):
    """A `--since` that is not a date."""


def parse_since(value: str | None) -> str | None:
    """`--since` as an ISO day (`2026-11-01`), checked.

    Raises:
        BadDate: when it is not a date.
    """
    if value is None:
        return None
    try:
        return date.fromisoformat(value[:10]).isoformat()
    except ValueError:
        raise BadDate(f"--since {value!r} is not a date (YYYY-MM-DD)") from None


def _day(session_id: str, created_at: str | None) -> str:
    """The UTC day a session started: from main.db, else from its id (`YYYYMMDD-HHMMSS-…`)."""
    if created_at:
        return created_at[:10]
    d = session_id[:8]
    return f"{d[:4]}-{d[4:6]}-{d[6:8]}" if d.isdigit() else ""


def all_sessions(since: str | None = None) -> list[str]:
    """Every session with a database on disk, oldest first (those started before `since` left out)."""
    created: dict[str, str | None] = {}
    try:
        with open_main() as conn:
            for row in conn.execute("SELECT id, created_at FROM sessions"):
                created[row[0]] = row[1]
    except MainDbMissing:
        pass
    if sessions_dir().is_dir():
        for folder in sessions_dir().iterdir():
            if folder.is_dir():
                created.setdefault(folder.name, None)
    chosen = [
        s for s, at in created.items() if db_file(s) is not None and (since is None or _day(s, at) >= since)
    ]
    return sorted(chosen, key=lambda s: (_day(s, created[s]), created[s] or "", s))


def named_sessions(ids: tuple[str, ...] | list[str]) -> list[str]:
    """The named sessions (ids or unique prefixes), each checked to have a database; the newest
    session when none is named.

    Raises:
        SessionNotFound: naming the session that has none.
    """
    if not ids:
        return [resolve(None)]
    return list(dict.fromkeys(resolve(s) for s in ids))


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the database has this table or view (sessions recorded by an older capsem lack the newer ones)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None
