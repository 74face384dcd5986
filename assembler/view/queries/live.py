"""What a live page polls: the session's last change."""

from __future__ import annotations

import sqlite3
from typing import Any

from assembler.view.queries.common import tables


def live_state(conn: sqlite3.Connection) -> dict[str, Any]:
    """What changes while a session records: a page reloads when this does."""
    found = tables(conn)
    state: dict[str, Any] = {}
    for table in ("model_calls", "tool_responses", "mcp_calls", "fs_events", "proc_anomalies"):
        if table in found:
            state[table] = conn.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}").fetchone()[0]
    return state
