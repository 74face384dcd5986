"""The session page: turns, calls, tools and MCP calls on a timeline, a page of calls at a time."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from assembler.failures import Failure, Intervention, failures, interventions
from assembler.sessions import parse_time as parse_ts
from assembler.tool_decision import not_run, said
from assembler.view.queries.common import PAGE_SIZE, PARTS, break_sentence, check_session_db, columns


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
    decision_rule: str | None = None
    verdict: str | None = None
    """The policy's verdict in words (`denied by no-rm-rf: not run`); None when nothing decided."""
    not_run: bool = False
    """A tool rule kept it from the agent (denied, or asked and unanswered): it has no result."""


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
    cache_breaks: dict[int, str] = field(default_factory=dict)
    """Call id -> why its prompt cache broke (`break_sentence`), for every break of the session."""
    lost_to_breaks: float = 0.0
    """What the breaks cost over reading from the cache (USD)."""

    @property
    def cache_read_share(self) -> float | None:
        """The share of the session's input read from the prompt cache."""
        return self.cache_read / self.input_tokens if self.input_tokens else None


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
        decision = r.get("decision") or "allowed"
        tool = ToolCall(
            id=r["id"], call_id=r["call_id"], name=r["tool_name"], arguments=r.get("arguments") or "",
            status=r["status"] if has_status else "observed", decision=decision,
            duration_ms=r.get("duration_ms"), decision_rule=r.get("decision_rule"),
            verdict=said(decision, r.get("decision_rule")),
        )  # fmt: skip
        if r.get("mcp_call_id") and "mcp_calls" in found:
            mcp = conn.execute("SELECT * FROM mcp_calls WHERE id = ?", (r["mcp_call_id"],)).fetchone()
            if mcp is not None:
                tool.mcp = _mcp(dict(mcp))
        tool.not_run = not_run(decision) and not (tool.mcp is not None and tool.mcp.decision == decision)
        if tool.not_run:
            tool.duration_ms = None  # never the agent's to run
        result = None if tool.not_run else conn.execute(
            "SELECT model_call_id, content_preview, is_error FROM tool_responses WHERE call_id = ? AND "
            "model_call_id > ? ORDER BY id LIMIT 1", (r["call_id"], r["model_call_id"])).fetchone()  # fmt: skip
        if result is not None:
            tool.result_call, tool.result, tool.result_error = result[0], result[1] or "", bool(result[2])
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


@dataclass
class _RunningTotals:
    cumulative: list[tuple[float, float, int]] = field(default_factory=list)
    """(seconds from the start, cost so far, tokens so far) after each call."""
    cum_at: dict[int, tuple[float, int]] = field(default_factory=dict)
    """Call id -> (cost, tokens) so far."""
    cache_read: int = 0
    cache_write: int = 0
    by_model: dict[str, list] = field(default_factory=dict)
    """Model -> [calls, cost]."""


def _running_totals(conn: sqlite3.Connection, start: datetime | None) -> _RunningTotals:
    """Cost and tokens summed call after call over the whole session (cheap columns only)."""
    out = _RunningTotals()
    cost, tokens = 0.0, 0
    for r in conn.execute("SELECT id, timestamp, model, estimated_cost_usd, input_tokens, output_tokens, "
                          "usage_details FROM model_calls ORDER BY id"):  # fmt: skip
        cost += r[3] or 0.0
        tokens += (r[4] or 0) + (r[5] or 0)
        read, write = _usage(dict(r))
        out.cache_read, out.cache_write = out.cache_read + read, out.cache_write + write
        out.cum_at[r[0]] = (cost, tokens)
        out.cumulative.append((_offset(r[1], start), cost, tokens))
        entry = out.by_model.setdefault(r[2] or "?", [0, 0.0])
        entry[0] += 1
        entry[1] += r[3] or 0.0
    return out


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
    run = _running_totals(conn, start)
    rows = [dict(r) for r in conn.execute("SELECT * FROM model_calls ORDER BY id LIMIT ? OFFSET ?",
                                          (page_size, (page - 1) * page_size))]  # fmt: skip
    ids = [r["id"] for r in rows]
    nodes = {r["id"]: _node(r, start, *run.cum_at.get(r["id"], (0.0, 0))) for r in rows}
    tools = _tools_for(conn, found, ids)
    breakdown = _breakdowns(conn, found, ids)
    by_tool_id: dict[int, ToolCall] = {}
    for call_id, node in nodes.items():
        node.tools = tools.get(call_id, [])
        node.breakdown = breakdown.get(call_id, [])
        by_tool_id.update({t.id: t for t in node.tools})
    turns = _turns(nodes, by_tool_id)
    if page > 1 and turns and "turn_id" in columns(conn, "model_calls"):
        before = _turns_before(conn, turns[0], ids[0])
        for t in turns:
            t.number += before
    failed, n_tools = 0, 0
    if "tool_responses" in found:
        failed = conn.execute("SELECT COUNT(*) FROM tool_responses WHERE is_error").fetchone()[0]
    if "tool_calls" in found:
        n_tools = conn.execute("SELECT COUNT(*) FROM tool_calls").fetchone()[0]
    main = main or {}
    status = main.get("status") or "unknown"
    breakdown_total = _breakdown_total(conn) if "input_breakdown" in found else []
    return SessionView(
        id=session_id, main=main, status=status, started=start.isoformat() if start else "", span_s=span,
        calls_total=calls_total, cost=totals[1], input_tokens=totals[2], output_tokens=totals[3],
        cache_read=run.cache_read, cache_write=run.cache_write, tool_calls=n_tools, failed_tools=failed, turns=turns,
        events=_events(conn, found, start), cost_by_model=sorted(((m, v[0], v[1]) for m, v in run.by_model.items()),
                                                                 key=lambda x: -x[2]),
        cumulative=_thin(run.cumulative), page=page, pages=pages, breakdown_total=breakdown_total,
        failures=failures(conn) if {"model_calls", "net_events", "tool_responses"} <= found else [],
        interventions=interventions(conn) if "net_events" in found else [],
        **_breaks(conn, found),
    )  # fmt: skip


def _turns(nodes: dict[int, CallNode], by_tool_id: dict[int, ToolCall]) -> list[Turn]:
    """The page's calls grouped into turns, numbered from 1; a subagent's calls go under the tool call
    that started them."""
    turns: list[Turn] = []
    for node in nodes.values():
        parent = by_tool_id.get(node.parent_tool_call_id) if node.parent_tool_call_id else None
        if parent is not None:
            parent.subagent.append(node)
            continue
        if not turns or node.turn_id is None or turns[-1].turn_id != node.turn_id:
            turns.append(Turn(len(turns) + 1, node.turn_id, []))
        turns[-1].calls.append(node)
    return turns


def _turns_before(conn: sqlite3.Connection, first: Turn, first_id: int) -> int:
    """How many turns began before the page's first call (`first_id`), so a later page's turns keep their
    numbers; a turn the previous page began is not counted twice."""
    before = conn.execute("SELECT COUNT(DISTINCT turn_id) FROM model_calls WHERE id < ? AND "
                          "parent_tool_call_id IS NULL", (first_id,)).fetchone()[0]  # fmt: skip
    if first.turn_id and conn.execute("SELECT 1 FROM model_calls WHERE turn_id = ? AND id < ? LIMIT 1",
                                      (first.turn_id, first_id)).fetchone():  # fmt: skip
        before -= 1
    return before


def _breakdown_total(conn: sqlite3.Connection) -> list[tuple[str, int, float]]:
    """The session's input tokens and their cost per part, the most tokens first."""
    sql = (
        "SELECT part, SUM(tokens), SUM(cost_usd) FROM input_breakdown GROUP BY part ORDER BY SUM(tokens) DESC"
    )
    return [(r[0], r[1], r[2] or 0.0) for r in conn.execute(sql)]


def _breaks(conn: sqlite3.Connection, found: set[str]) -> dict[str, Any]:
    """The session's cache breaks, each said in a sentence, and what they cost."""
    if "cache_breaks" not in found:
        return {}
    rows = [dict(r) for r in conn.execute("SELECT * FROM cache_breaks ORDER BY id")]
    return {"cache_breaks": {r["model_call_id"]: break_sentence(r) for r in rows},
            "lost_to_breaks": sum(r["extra_cost_usd"] or 0.0 for r in rows)}  # fmt: skip


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
