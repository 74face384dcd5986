"""What one session sends to the team's PostgreSQL, read from its session.db and main.db: one
`Table` per pushed table, each a SELECT of the columns the team sees.

`share: metadata` is decided here, once, by what the SELECTs name: counts, tokens, costs,
names, decisions and times, never a text the agent or a model wrote (no prompt, answer, system
prompt, tool argument or result, body preview, error message, request path or file path; of
the command only the program's name). `redacted` adds each call's conversation items as
session.db keeps them (scrubbed); `full` adds the whole request and response bodies.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import PurePath

from capsem.rollup import CALL_USAGE_SQL, cache_break_costs, read_totals
from capsem.store.bodies import read_body


@dataclass(frozen=True)
class Table:
    name: str
    """The team table (`capsem.<name>`) and, but for `content`, the session.db table."""
    columns: tuple[str, ...]
    """Its columns after (machine, session_id), in the SELECT's order."""
    select: str
    """Rows of session.db with `id > ?`, in id order."""
    upsert: bool = False
    """A row that changes after its insert (a tool call's result, decision, duration): re-sent rows
    update it; others are written once (`ON CONFLICT DO NOTHING`)."""


def _table(name: str, select: str, columns: str, *, upsert: bool = False) -> Table:
    return Table(name, tuple(c.strip() for c in columns.split(",")), select, upsert)


# fmt: off
TABLES = (
    _table("model_calls", CALL_USAGE_SQL + """ WHERE id > ? ORDER BY id""",
           "id, ts, provider, model, host, protocol, status_code, stream, input_tokens, output_tokens, "
           "cache_read_tokens, cache_write_tokens, reasoning_tokens, cost, input_cost, cache_write_cost, "
           "cache_read_cost, output_cost, reasoning_cost, duration_ms, ttft_ms, stop_reason, error_type, "
           "trace_id, price_source"),
    _table("tool_calls", "SELECT id, model_call_id, timestamp, tool_name, origin, status, decision, duration_ms, "
           "server_name FROM tool_calls WHERE id > ? ORDER BY id",
           "id, model_call_id, ts, tool_name, origin, status, decision, duration_ms, server_name", upsert=True),
    _table("mcp_calls", "SELECT id, timestamp, server_name, method, tool_name, decision, duration_ms, "
           "error_message IS NOT NULL FROM mcp_calls WHERE id > ? ORDER BY id",
           "id, ts, server_name, method, tool_name, decision, duration_ms, failed"),
    _table("net_events", "SELECT id, timestamp, domain, method, status_code, decision, matched_rule, error, "
           "provider, duration_ms FROM net_events WHERE id > ? ORDER BY id",
           "id, ts, domain, method, status_code, decision, matched_rule, error, provider, duration_ms"),
    _table("cache_breaks", "SELECT id, model_call_id, cause, cached_tokens, read_tokens, extra_cost_usd "
           "FROM cache_breaks WHERE id > ? ORDER BY id",
           "id, model_call_id, cause, cached_tokens, read_tokens, extra_cost_usd"),
    _table("approvals", "SELECT id, rule, asked_at, decision, decided_by, waited_ms, host, mcp_server, tool "
           "FROM approvals WHERE id > ? ORDER BY id",
           "id, rule, asked_at, decision, decided_by, waited_ms, host, mcp_server, tool"),
)
# fmt: on
"""The tables every share sends."""

_CALL_COLUMNS = ("id", "timestamp", "provider", "model", "host", "protocol", "status_code", "stream", "input_tokens",
                 "output_tokens", "cache_read", "cache_write", "reasoning", "estimated_cost_usd", "input_cost",
                 "cache_write_cost", "cache_read_cost", "output_cost", "reasoning_cost", "duration_ms", "ttft_ms",
                 "stop_reason", "error_type", "trace_id", "price_source")  # fmt: skip

CONTENT = ("kind", "ref", "body")


def rows_after(conn: sqlite3.Connection, table: Table, after: int) -> list[tuple]:
    """The table's rows of session.db with an id above `after` (none when session.db lacks the table)."""
    try:
        cursor = conn.execute(table.select, (after,))
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    if table.name != "model_calls":
        return [tuple(r) for r in cursor]
    out = []
    for r in cursor:
        row = [r[c] for c in _CALL_COLUMNS]
        row[3] = row[3] or ""  # the model, as ai_usage keys it
        row[7] = bool(row[7])
        out.append(tuple(row))
    return out


def items_after(conn: sqlite3.Connection, after: int) -> list[tuple]:
    """`redacted`: each conversation item new in a call (model_items id above `after`), its content
    as session.db keeps it (scrubbed), as `content` rows (`item`, id, JSON)."""
    try:
        cursor = conn.execute(
            "SELECT i.id, i.model_call_id, i.kind, i.direction, i.item_index, i.role, i.tool_name, c.content "
            "FROM model_items i JOIN item_contents c ON c.hash = i.content_hash WHERE i.id > ? ORDER BY i.id",
            (after,),
        )
    except sqlite3.OperationalError:
        return []
    return [("item", r[0], json.dumps({"call": r[1], "kind": r[2], "direction": r[3], "index": r[4], "role": r[5],
                                       "tool": r[6], "content": r[7]}))
            for r in cursor]  # fmt: skip


def bodies_of(conn: sqlite3.Connection, call_ids: list[int]) -> list[tuple]:
    """`full`: the stored request and response bodies of these calls, as `content` rows
    (`request`/`response`, call id, text)."""
    out = []
    for call_id in call_ids:
        for direction in ("request", "response"):
            try:
                found = read_body(conn, call_id, direction)
            except (sqlite3.Error, ValueError):
                found = None
            if found is not None:
                out.append((direction, call_id, found[0].decode("utf-8", "replace")))
    return out


SESSION_COLUMNS = ("user", "mode", "program", "status", "created_at", "day", "stopped_at", "emulated", "replay_of",
                   "name", "project", "git_branch", "tags", "total_requests", "denied_requests", "warned_requests",
                   "total_errors", "total_model_calls", "total_tool_calls", "total_mcp_calls", "unpriced_calls",
                   "total_input_tokens", "total_output_tokens", "total_estimated_cost", "lost_to_cache_breaks",
                   "share")  # fmt: skip


def program(command: str | None) -> str | None:
    """The program a command ran (`claude`), never its arguments (a prompt may be one)."""
    if not command:
        return None
    try:
        first = json.loads(command)[0] if command.startswith("[") else command.split()[0]
    except (ValueError, IndexError, TypeError):
        first = command.split()[0] if command.split() else ""
    return PurePath(str(first)).name or None


def session_row(main: sqlite3.Connection, conn: sqlite3.Connection, session_id: str, user: str,
                share: str) -> tuple | None:  # fmt: skip
    """The session's `sessions` row for the team (its totals read from session.db), or None when
    main.db does not know it."""
    s = main.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if s is None:
        return None
    keys = s.keys()
    tags = [r[0] for r in main.execute("SELECT tag FROM session_tags WHERE session_id = ? ORDER BY rowid",
                                       (session_id,))]  # fmt: skip
    totals = read_totals(conn)
    lost = sum(cache_break_costs(conn).values())

    def col(name: str) -> object:
        return s[name] if name in keys else None

    return (user, col("mode"), program(col("command")), s["status"], s["created_at"], s["created_at"][:10],
            col("stopped_at"), bool(col("emulated")), col("replay_of"), col("name"), col("project"),
            col("git_branch"), tags, totals["total_requests"], totals["denied_requests"],
            totals.get("warned_requests", 0), totals.get("total_errors", 0), totals["total_model_calls"],
            totals["total_tool_calls"], totals["total_mcp_calls"], totals["unpriced_calls"],
            totals["total_input_tokens"], totals["total_output_tokens"], totals["total_estimated_cost"], lost,
            share)  # fmt: skip
