"""`capsem tail`: follow a session as it is recorded, one line per event.

The session database is read (read-only, WAL: the recorder keeps writing) every `interval`
seconds for rows newer than the last ones seen: model calls (tokens, cost, stop reason or error),
the tools they asked for, requests that failed without a model call (connections that never
reached the provider included), and workspace file changes. Following ends when main.db says the
session is no longer `running` (or its process is gone).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from assembler.costs import call_usage
from assembler.sessiondb import main_row, open_session
from capsem.rollup import CALL_USAGE_SQL, process_alive


@dataclass(frozen=True)
class Event:
    at: str
    """HH:MM:SS (UTC) of the row's timestamp."""
    kind: str
    """`model`, `tool`, `error`, `file`."""
    text: str
    failed: bool = False


@dataclass
class Cursor:
    """The last row id seen per table."""

    seen: dict[str, int] = field(default_factory=dict)


def _clock(ts: str | None) -> str:
    return (ts or "")[11:19] or "--:--:--"


def _call(r: sqlite3.Row) -> Event:
    u = call_usage(r)
    tokens = f"in {u.uncached_input:,}"
    if u.cache_write_tokens:
        tokens += f" · cache write {u.cache_write_tokens:,}"
    if u.cache_read_tokens:
        tokens += f" · cache read {u.cache_read_tokens:,}"
    tokens += f" · out {u.output_tokens:,}"
    status = r["status_code"]
    failed = status is None or status >= 400 or r["error_type"] is not None
    if failed:
        why = " ".join(x for x in (f"HTTP {status}" if status else "no response", r["error_type"],
                                   " ".join((r["error_message"] or "").split())) if x)  # fmt: skip
        return Event(
            _clock(r["timestamp"]), "model", f"#{r['id']} {r['provider']}/{r['model'] or '?'} {why}", True
        )
    cost = f"${u.cost:.4f}" if r["estimated_cost_usd"] is not None else "unpriced"
    stop = r["stop_reason"] or ("" if r["complete"] else "truncated")
    return Event(_clock(r["timestamp"]), "model",
                 f"#{r['id']} {r['provider']}/{r['model'] or '?'} {tokens} {cost} {stop}".rstrip())  # fmt: skip


_QUERIES: dict[str, tuple[str, Callable[[sqlite3.Row], Event]]] = {
    "model_calls": (CALL_USAGE_SQL + " WHERE id > ? ORDER BY id", _call),
    "tool_calls": (
        "SELECT id, timestamp, model_call_id, tool_name, arguments FROM tool_calls WHERE id > ? ORDER BY id",
        lambda r: Event(_clock(r["timestamp"]), "tool",
                        f"#{r['model_call_id']} {r['tool_name']} {' '.join((r['arguments'] or '').split())}"),
    ),
    "net_events": (
        "SELECT n.id, n.timestamp, n.method, n.domain, n.port, n.path, n.error FROM net_events n WHERE n.id > ? "
        "AND n.decision = 'error' AND NOT EXISTS (SELECT 1 FROM model_calls m WHERE m.net_event_id = n.id) "
        "ORDER BY n.id",
        lambda r: Event(_clock(r["timestamp"]), "error",
                        f"{r['method']} {r['domain']}:{r['port']}{'' if r['method'] == 'CONNECT' else r['path']} "
                        f"{' '.join((r['error'] or '').split())}", True),
    ),
    "fs_events": (
        "SELECT id, timestamp, action, path FROM fs_events WHERE id > ? ORDER BY id",
        lambda r: Event(_clock(r["timestamp"]), "file", f"{r['action']} {r['path']}"),
    ),
}  # fmt: skip


def new_events(conn: sqlite3.Connection, cursor: Cursor) -> list[Event]:
    """Events for the rows added since `cursor` (which moves on), in time order.

    A failed request that has no model call yet may get one a moment later (the recorder writes
    a flow's rows together), so each table is read up to the same commit."""
    out: list[tuple[str, Event]] = []
    conn.execute("BEGIN")  # one snapshot for every table
    try:
        for table, (sql, make) in _QUERIES.items():
            for r in conn.execute(sql, (cursor.seen.get(table, 0),)):
                cursor.seen[table] = r["id"]
                out.append((r["timestamp"] or "", make(r)))
    finally:
        conn.execute("COMMIT")
    return [e for _, e in sorted(out, key=lambda x: x[0])]


def still_running(session_id: str) -> bool:
    """main.db says `running` and the process that registered it is alive."""
    row = main_row(session_id)
    return bool(row and row["status"] == "running" and process_alive(row["pid"], row["pid_started_at"]))


def follow(
    session_id: str,
    on_event: Callable[[Event], None],
    *,
    interval: float = 1.0,
    last: int | None = None,
    running: Callable[[str], bool] = still_running,
) -> int:
    """Print the session's events as they are recorded until it stops; return how many.

    `last` shows only the last N events already recorded (None: all of them).
    """
    cursor, count, first = Cursor(), 0, True
    with open_session(session_id) as conn:
        while True:
            alive = running(session_id)  # asked before reading: the last rows are read after it stops
            events = new_events(conn, cursor)
            if first and last is not None:
                events = events[-last:] if last else []
            first = False
            for event in events:
                on_event(event)
            count += len(events)
            if not alive:
                return count
            time.sleep(interval)
