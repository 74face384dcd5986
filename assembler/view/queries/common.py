"""What every page model shares: the page size, the breakdown parts, the tables a session.db has."""

from __future__ import annotations

import sqlite3

PAGE_SIZE = 200
"""Model calls per session page: a 5,000-call session is read and drawn a page at a time."""

PARTS = ("system", "tool_definitions", "mcp_tool_definitions", "history", "tool_results", "new_input")
"""The `input_breakdown` parts in the order the stacked bars draw them."""


class IncompleteDatabase(RuntimeError):
    """A session.db without the tables the pages read (cut short, or not a capsem session)."""


def tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def check_session_db(conn: sqlite3.Connection) -> set[str]:
    """The session.db's tables, once it is known to be one (its first page is read here).

    Raises:
        IncompleteDatabase: `model_calls` is missing.
        sqlite3.DatabaseError: the file is not a database or is damaged.
    """
    found = tables(conn)
    if "model_calls" not in found:
        raise IncompleteDatabase(
            "this session.db has no model_calls table: it was cut short or is not capsem's"
        )
    return found
