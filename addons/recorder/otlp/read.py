"""What an export step reads from session.db: the rows after a watermark, as `spans.Rows`."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from addons.items import call_items
from addons.recorder.otlp.spans import Rows, call_end, nanos, turn_key


@dataclass(frozen=True)
class Mark:
    """How far a session's export got (main.db `otlp_exports`)."""

    model_call_id: int = 0
    mcp_call_id: int = 0
    done: bool = False
    spans: int = 0


@dataclass(frozen=True)
class Step:
    rows: Rows
    mark: Mark
    """The watermark once these rows' spans are accepted."""


def _has(conn: sqlite3.Connection, table: str) -> bool:
    """Whether the session has `table` (sessions recorded before it was added do not)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone() is not None


def _dicts(conn: sqlite3.Connection, sql: str, params: tuple = ()) -> list[dict]:
    cur = conn.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur]


# Long on purpose: the rows of one batch after the watermark (calls, the tool results they
# carried, MCP calls, the parents these need) are read together, each query a few lines.
def step(conn: sqlite3.Connection, session_id: str, mark: Mark, *, finished: bool, content: bool = False,
         limit: int = 200) -> Step | None:  # fmt: skip
    """The next rows to export after `mark` (at most `limit` calls of each kind); the turns too once
    the session is `finished` and every call is past the mark. None when nothing is left."""
    if mark.done:
        return None
    rows = Rows(session_id)
    breaks = ("b.cause AS cache_break_cause, b.item AS cache_break_item, b.extra_cost_usd AS cache_break_cost_usd"
              if _has(conn, "cache_breaks") else "NULL AS cache_break_cause")  # fmt: skip
    joined = " LEFT JOIN cache_breaks b ON b.model_call_id = m.id" if _has(conn, "cache_breaks") else ""
    rows.calls = _dicts(conn, f"""SELECT m.*, n.port, {breaks} FROM model_calls m
                                  LEFT JOIN net_events n ON n.id = m.net_event_id{joined}
                                  WHERE m.id > ? ORDER BY m.id LIMIT ?""", (mark.model_call_id, limit))  # fmt: skip
    rows.mcp = _dicts(
        conn, "SELECT * FROM mcp_calls WHERE id > ? ORDER BY id LIMIT ?", (mark.mcp_call_id, limit)
    )
    last_call = rows.calls[-1]["id"] if rows.calls else mark.model_call_id
    last_mcp = rows.mcp[-1]["id"] if rows.mcp else mark.mcp_call_id
    if rows.calls:
        rows.tools = _dicts(
            conn,
            """SELECT t.*, r.content_preview AS result, r.is_error AS is_error, a.timestamp AS asked_ts,
                      a.duration_ms AS asked_ms, a.turn_id AS a_turn, a.trace_id AS a_trace,
                      a.event_id AS a_event, a.parent_tool_call_id AS asked_parent, c.timestamp AS carried_ts
               FROM tool_responses r
               JOIN model_calls c ON c.id = r.model_call_id
               JOIN tool_calls t ON t.id = (SELECT MAX(id) FROM tool_calls
                                           WHERE call_id = r.call_id AND model_call_id < r.model_call_id)
               JOIN model_calls a ON a.id = t.model_call_id
               WHERE r.model_call_id > ? AND r.model_call_id <= ? ORDER BY r.id""",
            (mark.model_call_id, last_call),
        )
        for tool in rows.tools:
            asked = {
                "turn_id": tool.pop("a_turn"),
                "trace_id": tool.pop("a_trace"),
                "event_id": tool.pop("a_event"),
            }
            tool["asked_turn"] = turn_key(asked)
            tool["asked_end"] = call_end(
                {"timestamp": tool.pop("asked_ts"), "duration_ms": tool.pop("asked_ms")}
            )
            tool["carried_start"] = nanos(tool.pop("carried_ts"))
    for call in rows.mcp:
        if not call.get("tool_call_id"):  # the tool call came second: the trigger linked it
            ran = conn.execute("SELECT id FROM tool_calls WHERE mcp_call_id = ?", (call["id"],)).fetchone()
            call["tool_call_id"] = ran[0] if ran else None
        if call["tool_call_id"]:
            continue
        before = conn.execute("SELECT turn_id, trace_id, event_id FROM model_calls WHERE timestamp <= ? "
                              "ORDER BY timestamp DESC LIMIT 1", (call["timestamp"],)).fetchone()  # fmt: skip
        call["has_turn"] = before is not None
        call["turn_key"] = (
            turn_key(dict(zip(("turn_id", "trace_id", "event_id"), before, strict=True))) if before else None
        )
    wanted = {c["parent_tool_call_id"] for c in rows.calls if c.get("parent_tool_call_id")}
    wanted |= {t["asked_parent"] for t in rows.tools if t.get("asked_parent")}
    wanted |= {m["tool_call_id"] for m in rows.mcp if m.get("tool_call_id")}
    rows.parents = _parents(conn, wanted)
    if content:
        for call in rows.calls:
            _add_content(conn, call)
    caught_up = len(rows.calls) < limit and len(rows.mcp) < limit
    if finished and caught_up:
        rows.turns = _turns(conn)
    new = Mark(last_call, last_mcp, finished and caught_up, mark.spans)
    if not (rows.calls or rows.mcp or rows.tools or rows.turns) and new == mark:
        return None
    return Step(rows, new)


def _parents(conn: sqlite3.Connection, ids: set[int]) -> dict[int, dict]:
    out = {}
    for tool_id in ids:
        found = conn.execute(
            """SELECT t.event_id, m.turn_id, m.trace_id, m.event_id FROM tool_calls t
               JOIN model_calls m ON m.id = t.model_call_id WHERE t.id = ?""",
            (tool_id,),
        ).fetchone()
        if found is not None:
            key = turn_key({"turn_id": found[1], "trace_id": found[2], "event_id": found[3]})
            out[tool_id] = {"event_id": found[0], "turn_key": key}
    return out


def _turns(conn: sqlite3.Connection) -> list[dict]:
    """Each turn's start and end over all its calls (the root spans, once the session is over)."""
    turns: dict[str, dict] = {}
    for call in _dicts(
        conn, "SELECT turn_id, trace_id, event_id, timestamp, duration_ms FROM model_calls ORDER BY id"
    ):
        key = turn_key(call)
        start, end = nanos(call["timestamp"]), call_end(call)
        turn = turns.setdefault(key, {"key": key, "start": start, "end": end, "calls": 0})
        turn["start"], turn["end"] = min(turn["start"], start), max(turn["end"], end)
        turn["calls"] += 1
    return list(turns.values())


def _add_content(conn: sqlite3.Connection, call: dict) -> None:
    """A call's input items (in order, from `model_item_lists`) and its output tool calls."""
    hashes = call_items(conn, call["id"])
    meta = {r["content_hash"]: r for r in _dicts(
        conn, "SELECT content_hash, kind, role, call_id, tool_name FROM model_items WHERE content_hash IN "
              f"({','.join('?' * len(hashes))})", tuple(hashes))} if hashes else {}  # fmt: skip
    inputs = []
    for digest in hashes:
        found = conn.execute("SELECT kind, content FROM item_contents WHERE hash = ?", (digest,)).fetchone()
        if found is None:
            continue
        info = meta.get(digest, {})
        inputs.append({"kind": found[0], "content": found[1], "role": info.get("role"),
                       "call_id": info.get("call_id"), "tool_name": info.get("tool_name")})  # fmt: skip
    call["inputs"] = inputs
    call["outputs"] = _dicts(
        conn,
        "SELECT call_id, tool_name, arguments FROM tool_calls WHERE model_call_id = ? ORDER BY call_index",
        (call["id"],),
    )
