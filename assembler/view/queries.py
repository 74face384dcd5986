"""What the pages show, read from main.db and a session.db into typed data.

Every function takes an open read-only connection (`capsem.schema.connect`, through
`assembler.sessiondb`) and returns dataclasses; nothing here knows about HTML. Item content is
read only with `SELECT content FROM item_contents WHERE hash = ?`. Costs are the stored
`estimated_cost_usd` values, never recomputed.
"""

from __future__ import annotations

import difflib
import json
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from addons.items import call_items
from assembler.failures import Failure, Intervention, failures, interventions
from assembler.sessions import parse_time as parse_ts

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


# --- sessions list -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionSummary:
    id: str
    created_at: str
    duration: str
    status: str
    command: str
    cost: float
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    model_calls: int
    tool_calls: int
    mcp_calls: int
    file_events: int
    errors: int
    models: list[str]
    has_db: bool
    capture_status: str | None
    anomalies: int | None = None
    """Process anomalies in its session.db (None: gzipped or unreadable, not opened for the list)."""
    unpriced: bool = False
    """Model calls with tokens and no known price, and nothing priced: shown `unpriced`, not `$0.0000`."""
    stepped_in: list[tuple[str, int]] = field(default_factory=list)
    """(kind, n): requests capsem denied, warned or asked about, placeholders it refused."""
    culled_reason: str | None = None
    """Why retention culled it (status `culled`)."""
    name: str | None = None
    project: str | None = None
    branch: str | None = None
    tags: list[str] = field(default_factory=list)


def _stepped_in(row: dict[str, Any]) -> list[tuple[str, int]]:
    keys = (("denied", "denied_requests"), ("warned", "warned_requests"), ("asked", "asked_requests"),
            ("refused", "refused_placeholders"))  # fmt: skip
    return [(kind, row[k]) for kind, k in keys if row.get(k)]


def summaries(rows: list[dict[str, Any]], models: dict[str, list[str]],
              anomalies: dict[str, int | None] | None = None) -> list[SessionSummary]:  # fmt: skip
    """`list_sessions` rows (main.db) as the sessions page shows them."""
    anomalies = anomalies or {}
    from assembler.sessions import duration

    return [
        SessionSummary(
            id=r["id"], created_at=r["created_at"] or "", duration=duration(r), status=r["status"],
            command=r.get("command") or "", cost=r.get("total_estimated_cost") or 0.0,
            input_tokens=r.get("total_input_tokens") or 0, output_tokens=r.get("total_output_tokens") or 0,
            cache_read_tokens=r.get("total_cache_read_tokens") or 0,
            cache_write_tokens=r.get("total_cache_write_tokens") or 0,
            model_calls=r.get("total_model_calls") or 0, tool_calls=r.get("total_tool_calls") or 0,
            mcp_calls=r.get("total_mcp_calls") or 0, file_events=r.get("total_file_events") or 0,
            errors=r.get("total_errors") or 0, stepped_in=_stepped_in(r), name=r.get("name"),
            unpriced=bool(r.get("unpriced_calls")) and not r.get("total_estimated_cost"),
            culled_reason=r.get("culled_reason"),
            project=r.get("project"), branch=r.get("git_branch"), tags=r.get("tags") or [],
            models=models.get(r["id"], []), has_db=bool(r.get("has_db")),
            capture_status=r.get("capture_status"), anomalies=anomalies.get(r["id"]),
        )
        for r in rows
    ]  # fmt: skip


def anomaly_counts(paths: dict[str, str | None]) -> dict[str, int | None]:
    """`proc_anomalies` rows per session, from each plain session.db (a gzipped one is not
    decompressed for a list: None)."""
    from pathlib import Path

    from capsem.schema import connect

    out: dict[str, int | None] = {}
    for sid, path in paths.items():
        out[sid] = None
        if not path or path.endswith(".gz"):
            continue
        try:
            conn = connect(Path(path), readonly=True, timeout=0.5)
            try:
                if "proc_anomalies" in tables(conn):
                    out[sid] = conn.execute("SELECT COUNT(*) FROM proc_anomalies").fetchone()[0]
            finally:
                conn.close()
        except sqlite3.Error:
            continue
    return out


def models_by_session(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """main.db's `ai_usage`: each session's models, most expensive first."""
    out: dict[str, list[str]] = {}
    for r in conn.execute(
        "SELECT session_id, model FROM ai_usage ORDER BY estimated_cost DESC, call_count DESC"
    ):
        if r["model"]:
            out.setdefault(r["session_id"], []).append(r["model"])
    return out


def cost_by_day(sessions: list[SessionSummary]) -> list[tuple[str, float]]:
    """Cost per UTC day (of each session's start), oldest first, days without sessions included."""
    days: dict[str, float] = {}
    for s in sessions:
        moment = parse_ts(s.created_at)
        if moment is not None:
            day = moment.date().isoformat()
            days[day] = days.get(day, 0.0) + s.cost
    if not days:
        return []
    from datetime import date, timedelta

    first, last = date.fromisoformat(min(days)), date.fromisoformat(max(days))
    span = min((last - first).days, 365)
    return [((first + timedelta(d)).isoformat(), days.get((first + timedelta(d)).isoformat(), 0.0))
            for d in range(span + 1)]  # fmt: skip


# --- session page ------------------------------------------------------------------------------


@dataclass
class McpCall:
    id: int
    timestamp: str
    server: str
    method: str
    tool: str | None
    decision: str
    duration_ms: int
    error: str | None
    is_error: bool
    request: str
    response: str


@dataclass
class ToolCall:
    id: int
    call_id: str
    name: str
    arguments: str
    status: str
    decision: str
    duration_ms: int | None
    result: str | None = None
    result_error: bool = False
    result_call: int | None = None
    """The model call whose request carried the result back."""
    mcp: McpCall | None = None
    subagent: list[CallNode] = field(default_factory=list)


@dataclass
class CallNode:
    id: int
    timestamp: str
    offset_s: float
    model: str
    provider: str
    input_tokens: int
    output_tokens: int
    cache_read: int
    cache_write: int
    cost: float
    cumulative_cost: float
    cumulative_tokens: int
    ttft_ms: int | None
    duration_ms: int
    status_code: int | None
    stop_reason: str | None
    error: str | None
    answer: str
    turn_id: str | None
    parent_tool_call_id: int | None
    items_new: int | None
    breakdown: list[tuple[str, int]] = field(default_factory=list)
    tools: list[ToolCall] = field(default_factory=list)
    unpriced: bool = False
    """Tokens but no known price: shown `unpriced`, never `$0.0000`."""


@dataclass
class Turn:
    number: int
    turn_id: str | None
    calls: list[CallNode]

    @property
    def cost(self) -> float:
        return sum(c.cost for c in self.calls) + sum(
            s.cost for c in self.calls for t in c.tools for s in t.subagent
        )


@dataclass(frozen=True)
class Event:
    kind: str
    """file | anomaly | mcp | error"""
    timestamp: str
    offset_s: float
    text: str
    severity: str = "info"
    anchor: str = ""


@dataclass
class SessionView:
    id: str
    main: dict[str, Any]
    status: str
    started: str
    span_s: float
    calls_total: int
    cost: float
    input_tokens: int
    output_tokens: int
    cache_read: int
    cache_write: int
    tool_calls: int
    failed_tools: int
    turns: list[Turn]
    events: list[Event]
    cost_by_model: list[tuple[str, int, float]]
    cumulative: list[tuple[float, float, int]]
    """(seconds since start, cumulative cost, cumulative tokens) for every call, thinned."""
    page: int
    pages: int
    breakdown_total: list[tuple[str, int, float]]
    failures: list[Failure] = field(default_factory=list)
    """Every error, as the run summary and `list-sessions` count them (`assembler.failures`)."""
    interventions: list[Intervention] = field(default_factory=list)
    """Where capsem stepped in: requests denied, warned or asked about, placeholders refused."""


def _usage(row: dict) -> tuple[int, int]:
    try:
        details = json.loads(row.get("usage_details") or "{}")
    except ValueError:
        return 0, 0
    read = details.get("cache_read") or 0
    write = (details.get("cache_write") or 0) + (details.get("cache_write_1h") or 0)
    return int(read), int(write)


def _offset(ts: str | None, start: datetime | None) -> float:
    moment = parse_ts(ts)
    if moment is None or start is None:
        return 0.0
    return max(0.0, (moment - start).total_seconds())


def _session_span(conn: sqlite3.Connection, found: set[str]) -> tuple[datetime | None, float]:
    stamps = ["SELECT MIN(timestamp), MAX(timestamp) FROM model_calls"]
    if "fs_events" in found:
        stamps.append("SELECT MIN(timestamp), MAX(timestamp) FROM fs_events")
    if "mcp_calls" in found:
        stamps.append("SELECT MIN(timestamp), MAX(timestamp) FROM mcp_calls")
    lows, highs = [], []
    for sql in stamps:
        lo, hi = conn.execute(sql).fetchone()
        lows += [t for t in [parse_ts(lo)] if t]
        highs += [t for t in [parse_ts(hi)] if t]
    if not lows:
        return None, 0.0
    start = min(lows)
    last = conn.execute("SELECT timestamp, duration_ms FROM model_calls ORDER BY id DESC LIMIT 1").fetchone()
    end = max(highs)
    if last is not None and parse_ts(last[0]):
        end = max(end, parse_ts(last[0]))  # type: ignore[arg-type]
        return start, max((end - start).total_seconds() + (last[1] or 0) / 1000, 0.001)
    return start, max((end - start).total_seconds(), 0.001)


def _node(row: dict, start: datetime | None, cum_cost: float, cum_tokens: int) -> CallNode:
    read, write = _usage(row)
    error = row.get("error_message") or row.get("error_type")
    if not error and row.get("status_code") and row["status_code"] >= 400:
        error = f"HTTP {row['status_code']}"
    return CallNode(
        id=row["id"], timestamp=row["timestamp"], offset_s=_offset(row["timestamp"], start),
        model=row.get("model") or row.get("response_model") or "?", provider=row["provider"],
        input_tokens=row.get("input_tokens") or 0, output_tokens=row.get("output_tokens") or 0,
        cache_read=read, cache_write=write, cost=row.get("estimated_cost_usd") or 0.0,
        unpriced=row.get("estimated_cost_usd") is None and bool(row.get("input_tokens") or row.get("output_tokens")),
        cumulative_cost=cum_cost, cumulative_tokens=cum_tokens, ttft_ms=row.get("ttft_ms"),
        duration_ms=row.get("duration_ms") or 0, status_code=row.get("status_code"),
        stop_reason=row.get("stop_reason"), error=error, answer=(row.get("text_content") or "")[:400],
        turn_id=row.get("turn_id"), parent_tool_call_id=row.get("parent_tool_call_id"),
        items_new=row.get("items_new"),
    )  # fmt: skip


def _mcp(row: dict) -> McpCall:
    return McpCall(
        id=row["id"], timestamp=row["timestamp"], server=row["server_name"], method=row["method"],
        tool=row.get("tool_name"), decision=row["decision"], duration_ms=row.get("duration_ms") or 0,
        error=row.get("error_message"), is_error=bool(row.get("is_error")) or bool(row.get("error_message")),
        request=row.get("request_preview") or "", response=row.get("response_preview") or "",
    )  # fmt: skip


def _tools_for(conn: sqlite3.Connection, found: set[str], call_ids: list[int]) -> dict[int, list[ToolCall]]:
    """Each model call's tool calls with the result that came back and the MCP call that ran it."""
    if not call_ids or "tool_calls" not in found:
        return {}
    marks = ", ".join("?" * len(call_ids))
    has_status = "status" in columns(conn, "tool_calls")
    sql = f"SELECT * FROM tool_calls WHERE model_call_id IN ({marks}) ORDER BY model_call_id, call_index"
    rows = [dict(r) for r in conn.execute(sql, call_ids)]
    out: dict[int, list[ToolCall]] = {}
    for r in rows:
        tool = ToolCall(
            id=r["id"], call_id=r["call_id"], name=r["tool_name"], arguments=r.get("arguments") or "",
            status=r["status"] if has_status else "observed", decision=r.get("decision") or "allowed",
            duration_ms=r.get("duration_ms"),
        )  # fmt: skip
        result = conn.execute(
            "SELECT model_call_id, content_preview, is_error FROM tool_responses WHERE call_id = ? AND "
            "model_call_id > ? ORDER BY id LIMIT 1", (r["call_id"], r["model_call_id"])).fetchone()  # fmt: skip
        if result is not None:
            tool.result_call, tool.result, tool.result_error = result[0], result[1] or "", bool(result[2])
        if r.get("mcp_call_id") and "mcp_calls" in found:
            mcp = conn.execute("SELECT * FROM mcp_calls WHERE id = ?", (r["mcp_call_id"],)).fetchone()
            if mcp is not None:
                tool.mcp = _mcp(dict(mcp))
        out.setdefault(r["model_call_id"], []).append(tool)
    return out


def _breakdowns(
    conn: sqlite3.Connection, found: set[str], call_ids: list[int]
) -> dict[int, list[tuple[str, int]]]:
    if not call_ids or "input_breakdown" not in found:
        return {}
    marks = ", ".join("?" * len(call_ids))
    out: dict[int, list[tuple[str, int]]] = {}
    for r in conn.execute(f"SELECT model_call_id, part, tokens FROM input_breakdown WHERE model_call_id IN ({marks})"
                          " ORDER BY id", call_ids):  # fmt: skip
        out.setdefault(r[0], []).append((r[1], r[2]))
    order = {p: i for i, p in enumerate(PARTS)}
    return {k: sorted(v, key=lambda p: order.get(p[0], 99)) for k, v in out.items()}


def _thin(points: list[tuple[float, float, int]], most: int = 400) -> list[tuple[float, float, int]]:
    if len(points) <= most:
        return points
    step = len(points) / most
    return [points[int(i * step)] for i in range(most)] + [points[-1]]


def session_view(conn: sqlite3.Connection, session_id: str, main: dict[str, Any] | None, page: int = 1,
                 page_size: int | None = None) -> SessionView:  # fmt: skip
    """The session page: page `page` (1-based, `PAGE_SIZE` calls) of its calls as a tree of turns
    → model calls → tool calls (with results, MCP calls and subagents), plus session-wide totals,
    events (file changes, anomalies, MCP calls no tool call ran, errors) and chart data."""
    found = check_session_db(conn)
    start, span = _session_span(conn, found)
    totals = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(estimated_cost_usd), 0), COALESCE(SUM(input_tokens), 0), "
        "COALESCE(SUM(output_tokens), 0) FROM model_calls").fetchone()  # fmt: skip
    calls_total = totals[0]
    page_size = max(page_size or PAGE_SIZE, 1)
    pages = max(1, -(-calls_total // page_size))
    page = min(max(1, page), pages)
    # cumulative figures over every call (cheap columns only), the page's calls in full
    cumulative: list[tuple[float, float, int]] = []
    cum_at: dict[int, tuple[float, int]] = {}
    cost, tokens, read_total, write_total = 0.0, 0, 0, 0
    by_model: dict[str, list] = {}
    for r in conn.execute("SELECT id, timestamp, model, estimated_cost_usd, input_tokens, output_tokens, "
                          "usage_details FROM model_calls ORDER BY id"):  # fmt: skip
        cost += r[3] or 0.0
        tokens += (r[4] or 0) + (r[5] or 0)
        read, write = _usage(dict(r))
        read_total, write_total = read_total + read, write_total + write
        cum_at[r[0]] = (cost, tokens)
        cumulative.append((_offset(r[1], start), cost, tokens))
        entry = by_model.setdefault(r[2] or "?", [0, 0.0])
        entry[0] += 1
        entry[1] += r[3] or 0.0
    rows = [dict(r) for r in conn.execute("SELECT * FROM model_calls ORDER BY id LIMIT ? OFFSET ?",
                                          (page_size, (page - 1) * page_size))]  # fmt: skip
    ids = [r["id"] for r in rows]
    nodes = {r["id"]: _node(r, start, *cum_at.get(r["id"], (0.0, 0))) for r in rows}
    tools = _tools_for(conn, found, ids)
    breakdown = _breakdowns(conn, found, ids)
    by_tool_id: dict[int, ToolCall] = {}
    for call_id, node in nodes.items():
        node.tools = tools.get(call_id, [])
        node.breakdown = breakdown.get(call_id, [])
        by_tool_id.update({t.id: t for t in node.tools})
    turns: list[Turn] = []
    for node in nodes.values():
        parent = by_tool_id.get(node.parent_tool_call_id) if node.parent_tool_call_id else None
        if parent is not None:
            parent.subagent.append(node)
            continue
        if not turns or node.turn_id is None or turns[-1].turn_id != node.turn_id:
            turns.append(Turn(len(turns) + 1, node.turn_id, []))
        turns[-1].calls.append(node)
    if page > 1 and turns and "turn_id" in columns(conn, "model_calls"):
        before = conn.execute("SELECT COUNT(DISTINCT turn_id) FROM model_calls WHERE id < ? AND "
                              "parent_tool_call_id IS NULL", (ids[0],)).fetchone()[0]  # fmt: skip
        if turns[0].turn_id and conn.execute("SELECT 1 FROM model_calls WHERE turn_id = ? AND id < ? LIMIT 1",
                                             (turns[0].turn_id, ids[0])).fetchone():  # fmt: skip
            before -= 1
        for t in turns:
            t.number += before
    failed, n_tools = 0, 0
    if "tool_responses" in found:
        failed = conn.execute("SELECT COUNT(*) FROM tool_responses WHERE is_error").fetchone()[0]
    if "tool_calls" in found:
        n_tools = conn.execute("SELECT COUNT(*) FROM tool_calls").fetchone()[0]
    main = main or {}
    status = main.get("status") or "unknown"
    breakdown_total: list[tuple[str, int, float]] = []
    if "input_breakdown" in found:
        sql = "SELECT part, SUM(tokens), SUM(cost_usd) FROM input_breakdown GROUP BY part ORDER BY SUM(tokens) DESC"
        breakdown_total = [(r[0], r[1], r[2] or 0.0) for r in conn.execute(sql)]
    return SessionView(
        id=session_id, main=main, status=status, started=start.isoformat() if start else "", span_s=span,
        calls_total=calls_total, cost=totals[1], input_tokens=totals[2], output_tokens=totals[3],
        cache_read=read_total, cache_write=write_total, tool_calls=n_tools, failed_tools=failed, turns=turns,
        events=_events(conn, found, start), cost_by_model=sorted(((m, v[0], v[1]) for m, v in by_model.items()),
                                                                 key=lambda x: -x[2]),
        cumulative=_thin(cumulative), page=page, pages=pages, breakdown_total=breakdown_total,
        failures=failures(conn) if {"model_calls", "net_events", "tool_responses"} <= found else [],
        interventions=interventions(conn) if "net_events" in found else [],
    )  # fmt: skip


def _events(
    conn: sqlite3.Connection, found: set[str], start: datetime | None, most: int = 500
) -> list[Event]:
    """File changes, process anomalies, MCP calls that no model tool call ran, failed requests."""
    events: list[Event] = []
    if "fs_events" in found:
        for r in conn.execute(
            "SELECT timestamp, action, path, size FROM fs_events ORDER BY id LIMIT ?", (most,)
        ):
            size = f" ({r[3]:,} bytes)" if r[3] is not None else ""
            events.append(Event("file", r[0], _offset(r[0], start), f"{r[1]} {r[2]}{size}"))
    if "proc_anomalies" in found:
        for r in conn.execute(
            "SELECT first_ts, kind, severity, name, pid, detail FROM proc_anomalies ORDER BY id"
        ):
            text = f"{r[1]}: {r[3] or '?'} (pid {r[4]})" + (f" — {r[5]}" if r[5] else "")
            events.append(Event("anomaly", r[0] or "", _offset(r[0], start), text, r[2] or "warning"))
    if "mcp_calls" in found:
        linked = "tool_call_id IS NULL AND" if "tool_call_id" in columns(conn, "mcp_calls") else ""
        for r in conn.execute(f"SELECT * FROM mcp_calls WHERE {linked} method != 'notifications/initialized' "
                              "ORDER BY id LIMIT ?", (most,)):  # fmt: skip
            m = _mcp(dict(r))
            what = f"{m.server} {m.method}" + (f" {m.tool}" if m.tool else "")
            sev = "error" if m.is_error or m.decision == "denied" else "info"
            events.append(Event("mcp", m.timestamp, _offset(m.timestamp, start),
                                what + (f" — {m.error}" if m.error else ""), sev, f"mcp-{m.id}"))  # fmt: skip
    if "net_events" in found:
        for r in conn.execute("SELECT timestamp, method, domain, path, status_code, error FROM net_events WHERE "
                              "(status_code >= 400 OR error IS NOT NULL) ORDER BY id LIMIT ?", (most,)):  # fmt: skip
            text = (
                f"{r[1]} {r[2]}{r[3] or ''} → "
                + (str(r[4]) if r[4] else "no response")
                + (f": {r[5]}" if r[5] else "")
            )
            events.append(Event("error", r[0], _offset(r[0], start), text, "error"))
    return sorted(events, key=lambda e: e.timestamp)


# --- call page ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    index: int
    kind: str
    role: str | None
    tool_name: str | None
    call_id: str | None
    text: str
    new: bool
    link: int | None = None
    """For a tool result: the model call that asked for the tool; for a tool call: the one that
    carried its result back."""


@dataclass(frozen=True)
class DiffLine:
    op: str
    """added | removed | same"""
    item: Item


@dataclass
class CallView:
    session_id: str
    call: dict[str, Any]
    node: CallNode
    inputs: list[Item]
    outputs: list[Item]
    tools: list[ToolCall]
    request_headers: dict[str, Any]
    response_headers: dict[str, Any]
    previous: int | None
    next: int | None
    diff: list[DiffLine]
    diff_base: int | None
    has_request: bool
    has_response: bool
    breakdown: list[dict[str, Any]]
    subagent_of: int | None


def readable(kind: str, content: str) -> str:
    """An item's stored JSON as a person reads it: its text where it has one, else indented JSON."""
    try:
        value = json.loads(content)
    except ValueError:
        return content
    text = _text_of(value)
    if text is not None:
        return text
    return json.dumps(value, indent=2, ensure_ascii=False)


def _text_of(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [_text_of(v) for v in value]
        return "\n\n".join(p for p in parts if p) if all(p is not None for p in parts) else None
    if not isinstance(value, dict):
        return None
    kind = value.get("type")
    if kind in ("text", "input_text", "output_text") and isinstance(value.get("text"), str):
        return value["text"]
    if kind == "thinking" and isinstance(value.get("thinking"), str):
        return "(thinking) " + value["thinking"]
    if kind == "redacted_thinking":
        return "(redacted thinking)"
    if kind == "tool_use":
        return f"{value.get('name')}({json.dumps(value.get('input'), ensure_ascii=False)})"
    if kind == "function" and isinstance(value.get("function"), dict):  # a Chat Completions tool call
        return f"{value['function'].get('name')}({value['function'].get('arguments')})"
    if kind == "tool_result" or "tool_call_id" in value:
        inner = _text_of(value.get("content")) if value.get("content") is not None else ""
        return inner if inner is not None else json.dumps(value.get("content"), ensure_ascii=False)
    if "tool_calls" in value and isinstance(value["tool_calls"], list):
        calls = [f"{(c.get('function') or {}).get('name')}({(c.get('function') or {}).get('arguments')})"
                 for c in value["tool_calls"] if isinstance(c, dict)]  # fmt: skip
        return "\n".join(calls)
    if set(value) >= {"name", "arguments"} and "type" not in value:
        return f"{value['name']}({value['arguments']})"
    if "parts" in value and isinstance(value["parts"], list):
        return _text_of(value["parts"])
    if "content" in value and set(value) <= {"content", "role", "name"}:
        return _text_of(value["content"])
    return None


def item_content(conn: sqlite3.Connection, content_hash: str) -> str:
    found = conn.execute("SELECT content FROM item_contents WHERE hash = ?", (content_hash,)).fetchone()
    return found[0] if found else ""


def _items(
    conn: sqlite3.Connection, found: set[str], call_id: int
) -> tuple[list[Item], list[Item], list[str]]:
    """A call's input items (all of them, in order, the new ones marked) and output items."""
    if "model_items" not in found:
        return [], [], []
    rows = [dict(r) for r in conn.execute("SELECT * FROM model_items WHERE model_call_id = ? ORDER BY direction, "
                                          "item_index", (call_id,))]  # fmt: skip
    hashes = call_items(conn, call_id) if "model_item_lists" in found else []
    new_at = {r["item_index"]: r for r in rows if r["direction"] == "input"}
    meta = _item_meta(conn, hashes, new_at)
    inputs = [
        Item(i, m["kind"], m.get("role"), m.get("tool_name"), m.get("call_id"),
             readable(m["kind"], item_content(conn, h)), i in new_at)
        for i, (h, m) in enumerate(zip(hashes, meta, strict=True))
    ]  # fmt: skip
    outputs = [
        Item(r["item_index"], r["kind"], r.get("role"), r.get("tool_name"), r.get("call_id"),
             readable(r["kind"], item_content(conn, r["content_hash"])), False)
        for r in rows if r["direction"] == "output"
    ]  # fmt: skip
    return inputs, outputs, hashes


def _item_meta(conn: sqlite3.Connection, hashes: list[str], new_at: dict[int, dict]) -> list[dict]:
    """Kind, role, tool name of each input item: from this call's own row when it is new, else from
    the row of the call that first sent it."""
    wanted = {h for i, h in enumerate(hashes) if i not in new_at}
    first: dict[str, dict] = {}
    if (
        wanted
    ):  # one pass (model_items has no index on content_hash; a lookup per item would scan it each time)
        for r in conn.execute("SELECT content_hash, kind, role, tool_name, call_id FROM model_items "
                              "WHERE direction = 'input' ORDER BY id"):  # fmt: skip
            if r[0] in wanted and r[0] not in first:
                first[r[0]] = {"kind": r[1], "role": r[2], "tool_name": r[3], "call_id": r[4]}
    out = []
    for i, h in enumerate(hashes):
        if i in new_at:
            out.append(new_at[i])
        elif h in first:
            out.append(first[h])
        else:
            row = conn.execute("SELECT kind FROM item_contents WHERE hash = ?", (h,)).fetchone()
            out.append({"kind": row[0] if row else "?"})
    return out


def _headers(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"(unreadable)": text}
    return value if isinstance(value, dict) else {}


def call_view(conn: sqlite3.Connection, session_id: str, call_id: int) -> CallView | None:
    """One model call as the call page shows it, or None when the session has no such call."""
    found = check_session_db(conn)
    row = conn.execute("SELECT * FROM model_calls WHERE id = ?", (call_id,)).fetchone()
    if row is None:
        return None
    call = dict(row)
    start, _span = _session_span(conn, found)
    cum = conn.execute("SELECT COALESCE(SUM(estimated_cost_usd), 0), COALESCE(SUM(COALESCE(input_tokens, 0) + "
                       "COALESCE(output_tokens, 0)), 0) FROM model_calls WHERE id <= ?", (call_id,)).fetchone()  # fmt: skip
    node = _node(call, start, cum[0], cum[1])
    node.breakdown = _breakdowns(conn, found, [call_id]).get(call_id, [])
    tools = _tools_for(conn, found, [call_id]).get(call_id, [])
    inputs, outputs, hashes = _items(conn, found, call_id)
    inputs = [_link_input(conn, found, it, call_id) for it in inputs]
    outputs = [_link_output(it, tools) for it in outputs]
    base = None
    if "model_item_lists" in found:
        got = conn.execute(
            "SELECT base_call_id FROM model_item_lists WHERE model_call_id = ?", (call_id,)
        ).fetchone()
        base = got[0] if got else None
    diff = _diff(conn, found, base, inputs, hashes) if base is not None else []
    headers = ({}, {})
    if call.get("net_event_id") and "net_events" in found:
        net = conn.execute("SELECT request_headers, response_headers FROM net_events WHERE id = ?",
                           (call["net_event_id"],)).fetchone()  # fmt: skip
        if net is not None:
            headers = (_headers(net[0]), _headers(net[1]))
    bodies: set[str] = set()
    if "event_body_blobs" in found:
        sql = "SELECT direction FROM event_body_blobs WHERE source_table = 'model_calls' AND row_id = ?"
        bodies = {r[0] for r in conn.execute(sql, (call_id,))}
    prev = conn.execute("SELECT MAX(id) FROM model_calls WHERE id < ?", (call_id,)).fetchone()[0]
    nxt = conn.execute("SELECT MIN(id) FROM model_calls WHERE id > ?", (call_id,)).fetchone()[0]
    breakdown = []
    if "input_breakdown" in found:
        breakdown = [dict(r) for r in conn.execute(
            "SELECT part, tokens, cache_read_tokens, cache_write_tokens, cost_usd, estimated FROM input_breakdown "
            "WHERE model_call_id = ? ORDER BY id", (call_id,))]  # fmt: skip
    parent = None
    if call.get("parent_tool_call_id"):
        got = conn.execute(
            "SELECT model_call_id FROM tool_calls WHERE id = ?", (call["parent_tool_call_id"],)
        ).fetchone()
        parent = got[0] if got else None
    return CallView(session_id, call, node, inputs, outputs, tools, headers[0], headers[1], prev, nxt, diff, base,
                    "request" in bodies, "response" in bodies, breakdown, parent)  # fmt: skip


def _link_input(conn: sqlite3.Connection, found: set[str], item: Item, call_id: int) -> Item:
    """A tool result in the history links to the call that asked for the tool."""
    if item.kind != "tool_result" or not item.call_id or "tool_calls" not in found:
        return item
    got = conn.execute("SELECT model_call_id FROM tool_calls WHERE call_id = ? AND model_call_id < ? "
                       "ORDER BY id DESC LIMIT 1", (item.call_id, call_id)).fetchone()  # fmt: skip
    return item if got is None else Item(**{**item.__dict__, "link": got[0]})


def _link_output(item: Item, tools: list[ToolCall]) -> Item:
    """A tool call the model made links to the call that carried its result back."""
    for tool in tools:
        if item.kind == "tool_call" and tool.call_id == item.call_id and tool.result_call:
            return Item(**{**item.__dict__, "link": tool.result_call})
    return item


def _diff(
    conn: sqlite3.Connection, found: set[str], base: int, inputs: list[Item], hashes: list[str]
) -> list[DiffLine]:
    """This call's input items against those of the previous call of its conversation."""
    before = call_items(conn, base)
    matcher = difflib.SequenceMatcher(a=before, b=hashes, autojunk=False)
    out: list[DiffLine] = []
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            if a1 - a0:
                out.append(
                    DiffLine("same", Item(b0, "…", None, None, None, f"{a1 - a0} items unchanged", False))
                )
            continue
        for i in range(a0, a1):
            kind = conn.execute("SELECT kind FROM item_contents WHERE hash = ?", (before[i],)).fetchone()
            out.append(DiffLine("removed", Item(i, kind[0] if kind else "?", None, None, None,
                                                readable("", item_content(conn, before[i])), False)))  # fmt: skip
        out.extend(DiffLine("added", inputs[i]) for i in range(b0, b1) if i < len(inputs))
    return out


# --- live --------------------------------------------------------------------------------------


def live_state(conn: sqlite3.Connection) -> dict[str, Any]:
    """What changes while a session records: a page reloads when this does."""
    found = tables(conn)
    state: dict[str, Any] = {}
    for table in ("model_calls", "tool_responses", "mcp_calls", "fs_events", "proc_anomalies"):
        if table in found:
            state[table] = conn.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}").fetchone()[0]
    return state
