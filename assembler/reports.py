"""`capsem cost-report`: cost and tokens by session, provider, model or day, from main.db.

The terminal table and a self-contained HTML page (inline CSS and SVG, no scripts, no
network) come from the same rows.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Literal

from capsem.paths import main_db_path
from capsem.schema import connect

GroupBy = Literal["session", "provider", "model", "day"]

_KEY = {
    "session": "s.id",
    "provider": "u.provider",
    "model": "u.provider || '/' || u.model",
    "day": "substr(s.created_at, 1, 10)",
}


@dataclass(frozen=True)
class CostRow:
    key: str
    sessions: int
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float


def cost_rows(group_by: GroupBy, since: str | None = None, until: str | None = None) -> list[CostRow]:
    """Aggregate `ai_usage` joined with `sessions` over [since, until] (ISO dates, inclusive).

    Raises:
        FileNotFoundError: when main.db does not exist yet.
    """
    if not main_db_path().is_file():
        raise FileNotFoundError(f"no main.db at {main_db_path()} (no session recorded yet)")
    where, params = ["1 = 1"], []
    if since:
        where.append("substr(s.created_at, 1, 10) >= ?")
        params.append(since)
    if until:
        where.append("substr(s.created_at, 1, 10) <= ?")
        params.append(until)
    sql = f"""
        SELECT {_KEY[group_by]} AS key, COUNT(DISTINCT s.id), COALESCE(SUM(u.call_count), 0),
               COALESCE(SUM(u.input_tokens), 0), COALESCE(SUM(u.output_tokens), 0),
               COALESCE(SUM(u.estimated_cost), 0)
        FROM sessions s JOIN ai_usage u ON u.session_id = s.id
        WHERE {" AND ".join(where)}
        GROUP BY key ORDER BY {"key" if group_by in ("day", "session") else "6 DESC"}
    """
    conn = connect(main_db_path(), readonly=True)
    try:
        return [CostRow(*r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def _bars(title: str, rows: list[CostRow], width: int = 640) -> str:
    """A horizontal bar chart of cost per row as inline SVG."""
    top = max((r.cost for r in rows), default=0) or 1
    bar_h, label_w = 22, 240
    height = bar_h * len(rows) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(title)}">']  # fmt: skip
    for i, r in enumerate(rows):
        y = 20 + i * bar_h
        w = (width - label_w - 90) * r.cost / top
        parts.append(
            f'<text x="0" y="{y + 15}" font-size="12">{html.escape(r.key[:36])}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{bar_h - 6}" fill="#4f7cac"/>'
            f'<text x="{label_w + w + 6:.1f}" y="{y + 15}" font-size="12">${r.cost:.4f}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def html_report(by_day: list[CostRow], by_model: list[CostRow], since: str | None, until: str | None) -> str:
    """One self-contained HTML page: cost over time, cost by model, and both tables."""

    def table(rows: list[CostRow], label: str) -> str:
        head = f"<tr><th>{label}</th><th>sessions</th><th>calls</th><th>input</th><th>output</th><th>cost</th></tr>"
        body = "".join(
            f"<tr><td>{html.escape(r.key)}</td><td>{r.sessions}</td><td>{r.calls}</td><td>{r.input_tokens:,}</td>"
            f"<td>{r.output_tokens:,}</td><td>${r.cost:.4f}</td></tr>"
            for r in rows
        )
        return f"<table>{head}{body}</table>"

    total = sum(r.cost for r in by_day)
    span = f"{since or 'the beginning'} – {until or 'today'}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>capsem cost report</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border-bottom:1px solid #ddd;padding:4px 10px;text-align:right}}td:first-child,th:first-child{{text-align:left}}
h1{{font-size:20px}}h2{{font-size:16px;margin-top:2em}}</style></head><body>
<h1>capsem cost report</h1><p>{html.escape(span)}: <b>${total:.4f}</b> estimated across
{sum(r.calls for r in by_day)} model calls. Unpriced models count as $0 here; see
<code>capsem inspect-session</code> for them.</p>
<h2>Cost over time (by day)</h2>{_bars("cost by day", by_day)}{table(by_day, "day")}
<h2>Cost by model</h2>{_bars("cost by model", by_model)}{table(by_model, "provider/model")}
</body></html>
"""
