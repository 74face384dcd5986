"""What every page model shares: the page size, the breakdown parts, the tables a session.db has, a
cache break in a sentence."""

from __future__ import annotations

import sqlite3
from typing import Any

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


def break_sentence(found: dict[str, Any]) -> str:
    """A cache break in one line: `cache broke here: tool definition Bash changed, +$0.0414`."""
    why = {"changed": f"{found.get('item') or 'an item'} changed", "model": "another model",
           "expired": "the cache expired", "unknown": "cause unknown"}.get(found["cause"], found["cause"])  # fmt: skip
    cost = found.get("extra_cost_usd")
    extra = f", +${cost:.4f}" if cost else ""
    return (f"cache broke here: {why}{extra} (read {found['read_tokens']:,} of the {found['cached_tokens']:,} "
            f"tokens call {found['earlier_call_id']} left cached)")  # fmt: skip
