"""A one-screen summary of a session: model calls, tokens, cost, tools, where the data is."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from rich import box
from rich.console import Console, Group
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from capsem.paths import main_db_path, session_db_path
from capsem.schema import connect

_MIN = {"provider/model": 25, "out": 3, "stop": 10, "trace": 5}


def _short(text: str | None, width: int = 60) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _cost(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:.5f}"


def _tokens(n: int | None, details: dict) -> str:
    if n is None:
        return "?"
    return f"{n:,}" + ("~" if details else "")


def render_session(session_id: str, db_path: Path | None = None) -> Group:
    """Rich renderables describing one session (reads session.db and main.db, read-only)."""
    db_path = db_path or session_db_path(session_id)
    conn = connect(db_path, readonly=True)
    try:
        calls = conn.execute(
            """SELECT id, provider, model, stream, status_code, input_tokens, output_tokens, estimated_cost_usd,
                      stop_reason, ttft_ms, duration_ms, usage_details, complete, error_type, trace_id
               FROM model_calls ORDER BY id"""
        ).fetchall()
        tools = conn.execute(
            """SELECT tc.model_call_id, tc.call_id, tc.tool_name, tc.arguments, tr.content_preview, tr.is_error,
                      tr.model_call_id AS answered_in
               FROM tool_calls tc LEFT JOIN tool_responses tr ON tr.call_id = tc.call_id ORDER BY tc.id"""
        ).fetchall()
        net = conn.execute(
            "SELECT COUNT(*), SUM(decision = 'error'), COALESCE(SUM(bytes_sent), 0), "
            "COALESCE(SUM(bytes_received), 0) FROM net_events"
        ).fetchone()
    finally:
        conn.close()

    table = Table(
        title="Model calls", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )
    for col, justify in [("#", "right"), ("provider/model", "left"), ("", "left"), ("in", "right"),
                         ("out", "right"), ("cost", "right"), ("stop", "left"), ("ttft", "right"),
                         ("trace", "left")]:  # fmt: skip
        table.add_column(col, justify=justify, no_wrap=True, min_width=_MIN.get(col))  # type: ignore[arg-type]
    total_cost = 0.0
    for c in calls:
        details = json.loads(c["usage_details"] or "{}")
        estimated = {"estimated": details["estimated"]} if details.get("estimated") else {}
        total_cost += c["estimated_cost_usd"] or 0
        stop = c["stop_reason"] or (c["error_type"] or ("truncated" if not c["complete"] else ""))
        status = "" if c["status_code"] == 200 else f" HTTP {c['status_code'] or 'error'}"
        table.add_row(
            str(c["id"]), f"{c['provider']}/{c['model'] or '?'}", ("sse" if c["stream"] else "json") + status,
            _tokens(c["input_tokens"], estimated), _tokens(c["output_tokens"], estimated),
            _cost(c["estimated_cost_usd"]), stop, f"{c['ttft_ms']}ms" if c["ttft_ms"] is not None else "-",
            (c["trace_id"] or "")[:4],
        )  # fmt: skip

    tool_table = Table(
        title="Tool calls and results", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    for col in ("call", "tool", "arguments", "result"):
        tool_table.add_column(col)
    for t in tools:
        result = t["content_preview"]
        if result is None:
            shown = Text("(no result recorded)", style="yellow")
        else:
            shown = Text(
                ("ERROR " if t["is_error"] else "") + _short(result, 50), style="red" if t["is_error"] else ""
            )
        tool_table.add_row(f"#{t['model_call_id']}", t["tool_name"], _short(t["arguments"], 50), shown)

    totals = Text()
    totals.append(f"{len(calls)} model calls, {net[0]} HTTP flows ({net[1] or 0} failed), ")
    totals.append(f"{sum(c['input_tokens'] or 0 for c in calls):,} input + ")
    totals.append(f"{sum(c['output_tokens'] or 0 for c in calls):,} output tokens, ")
    totals.append(f"estimated cost ${total_cost:.6f}", style="bold")
    parts: list = [totals, table]
    if tools:
        parts.append(tool_table)
    status = _main_status(session_id)
    footer = Text()
    footer.append(f"session {session_id}", style="bold")
    if status:
        footer.append(f" ({status})")
    footer.append(f"\ndatabase  {db_path}\nrollup    {main_db_path()}\n")
    footer.append(
        'try       capsem query-session "SELECT model, input_tokens, output_tokens FROM model_calls"\n'
        "          capsem inspect-session",
        style="dim",
    )
    parts.append(footer)
    return Group(*parts)


def _main_status(session_id: str) -> str | None:
    path = main_db_path()
    if not path.is_file():
        return None
    try:
        conn = connect(path, readonly=True)
        try:
            row = conn.execute("SELECT status FROM sessions WHERE id = ?", (session_id,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def print_session(session_id: str, console: Console | None = None) -> None:
    console = console or Console()
    console.print(Rule(f"capsem session {session_id}", align="left"))
    console.print(render_session(session_id))
