"""`capsem cost-report`: cost and tokens by session, provider, model, day, week, month, project,
branch or tag (a session with several tags counts under each: the tag rows may add up to more than
the total).

Numbers come from the main.db rollup (`sessions` + `ai_usage`, keyed by session, provider and
model), so vacuumed and culled sessions still count. A session that is still running (or was
never rolled up) is read live from its session.db with the rollup's own SQL. The terminal
table, the JSON and a self-contained HTML page (inline CSS and SVG, no scripts, no network)
come from the same rows.
"""

from __future__ import annotations

import html
import math
import re
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Literal

from assembler.cli_support import counted
from assembler.costs import PART_LABELS, Usage
from assembler.sessiondb import SessionDbError, SessionNotFound, db_file, open_main, open_session
from capsem.rollup import AI_USAGE_COLUMNS, AI_USAGE_SQL, cache_break_costs

GroupBy = Literal[
    "session", "provider", "model", "day", "week", "month", "project", "branch", "tag", "user", "machine"
]
GROUPS: tuple[GroupBy, ...] = (
    "session",
    "provider",
    "model",
    "day",
    "week",
    "month",
    "project",
    "branch",
    "tag",
)
NONE = "(none)"
"""The key of sessions without a project, branch or tag (plain mitmdump, or no git)."""


@dataclass(frozen=True)
class UsageRow:
    """One (session, provider, model) line: the unit everything else is summed from."""

    session_id: str
    day: str
    provider: str
    model: str
    usage: Usage
    duration_ms: int = 0
    project: str | None = None
    branch: str | None = None
    """`project@branch` is the key of `--by branch` (a branch name alone says little)."""
    tags: tuple[str, ...] = ()
    user: str | None = None
    """Who and where (`cost-report --team`: `--by user`, `--by machine`)."""
    machine: str | None = None

    @classmethod
    def of(cls, session_id: str, day: str, values: dict, context: tuple = (None, None, ())) -> UsageRow:
        """From an ai_usage row (or `AI_USAGE_SQL`'s), keyed by `AI_USAGE_COLUMNS`."""
        usage = Usage(
            values["call_count"], values["input_tokens"], values["output_tokens"], values["estimated_cost"],
            values["cache_write_tokens"], values["cache_read_tokens"], values["reasoning_tokens"],
            values["input_cost"], values["cache_write_cost"], values["cache_read_cost"], values["output_cost"],
            values["reasoning_cost"], values.get("cache_break_cost") or 0.0,
        )  # fmt: skip
        return cls(session_id, day, values["provider"], values["model"], usage, values["total_duration_ms"],
                   *context)  # fmt: skip


@dataclass(frozen=True)
class CostRow:
    key: str
    sessions: int
    usage: Usage

    @property
    def calls(self) -> int:
        return self.usage.calls

    @property
    def cost(self) -> float:
        return self.usage.cost

    def to_json(self) -> dict:
        return {"key": self.key, "sessions": self.sessions, **self.usage.to_json()}


@dataclass
class CostReport:
    since: str | None
    until: str | None
    usage: list[UsageRow] = field(default_factory=list)
    sessions: int = 0
    """Sessions created in the range (with or without model calls)."""
    unpriced_calls: int = 0
    """Model calls with tokens but no known price (counted as $0)."""
    live: list[str] = field(default_factory=list)
    """Sessions read from their session.db because they are running or were never rolled up."""
    emulated: int = 0
    """Emulated sessions in the range (`run --emulator`, `demo`, replays), counted or not."""
    include_emulated: bool = False
    """Whether they are counted (`--include-emulated`)."""

    def rows(self, by: GroupBy) -> list[CostRow]:
        return group(self.usage, by)

    def totals(self) -> CostRow:
        return _sum("total", self.usage)

    def to_json(self, by: GroupBy) -> dict:
        return {
            "since": self.since, "until": self.until, "by": by, "rows": [r.to_json() for r in self.rows(by)],
            "totals": {**self.totals().to_json(), "sessions_in_range": self.sessions,
                       "unpriced_calls": self.unpriced_calls, "live_sessions": self.live,
                       "emulated_sessions": self.emulated, "emulated_included": self.include_emulated},
        }  # fmt: skip


def _key(row: UsageRow, by: GroupBy) -> str:
    if by == "session":
        return f"{row.machine}/{row.session_id}" if row.machine else row.session_id
    if by in ("user", "machine"):
        return getattr(row, by) or NONE
    if by == "provider":
        return row.provider
    if by == "model":
        return f"{row.provider}/{row.model or '?'}"
    if by == "week":
        year, week, _ = date.fromisoformat(row.day).isocalendar()
        return f"{year}-W{week:02d}"
    if by == "month":
        return row.day[:7]
    if by == "project":
        return row.project or NONE
    if by == "branch":
        return (
            f"{row.project}@{row.branch}"
            if row.branch
            else (f"{row.project}@{NONE}" if row.project else NONE)
        )
    return row.day


def _sum(key: str, rows: Iterable[UsageRow]) -> CostRow:
    rows = list(rows)
    total = Usage()
    for r in rows:
        total += r.usage
    return CostRow(key, len({(r.machine, r.session_id) for r in rows}), total)


def group(usage: list[UsageRow], by: GroupBy) -> list[CostRow]:
    """Sum usage rows per key: days, weeks, months and sessions in time order, providers and
    models by cost."""
    buckets: dict[str, list[UsageRow]] = {}
    for r in usage:
        for key in (r.tags or (NONE,)) if by == "tag" else (_key(r, by),):  # a session counts under each tag
            buckets.setdefault(key, []).append(r)
    rows = [_sum(k, v) for k, v in buckets.items()]
    if by in ("day", "week", "month", "session"):
        return sorted(rows, key=lambda r: r.key)
    return sorted(rows, key=lambda r: (-r.cost, -r.calls, r.key))


_RELATIVE = re.compile(r"(\d+)([dw])")


def parse_day(value: str, today: date | None = None) -> str:
    """A day as `YYYY-MM-DD`, or relative to today (UTC): `7d` (7 days ago), `2w` (14 days ago),
    `today`.

    Raises:
        ValueError: naming the value and the accepted forms.
    """
    today = today or date.today()
    text = value.strip().lower()
    if text == "today":
        return today.isoformat()
    if match := _RELATIVE.fullmatch(text):
        n = int(match[1]) * (7 if match[2] == "w" else 1)
        return (today - timedelta(days=n)).isoformat()
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise ValueError(
            f"{value!r} is not a day: use YYYY-MM-DD, Nd (days ago), Nw (weeks ago) or today"
        ) from None


def cost_report(
    since: str | None = None,
    until: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    *,
    include_emulated: bool = False,
) -> CostReport:
    """Usage of the sessions created in [since, until] (ISO dates, inclusive, UTC days); emulated
    sessions (`run --emulator`, `demo`, replays: nothing was spent) only with `include_emulated`.

    `on_progress(done, total)` is called as sessions are aggregated.

    Raises:
        MainDbMissing: when main.db does not exist yet.
    """
    where, params = ["1 = 1"], []
    if since:
        where.append("substr(created_at, 1, 10) >= ?")
        params.append(since)
    if until:
        where.append("substr(created_at, 1, 10) <= ?")
        params.append(until)
    cond = " AND ".join(where)
    with open_main() as conn:
        emulated = conn.execute(
            f"SELECT COUNT(*) FROM sessions WHERE {cond} AND emulated = 1", params
        ).fetchone()[0]
        if not include_emulated:
            cond += " AND emulated = 0"
        sessions = conn.execute(
            f"SELECT id, substr(created_at, 1, 10) AS day, status, rolled_up_at, unpriced_calls, project, "
            f"git_branch FROM sessions WHERE {cond} ORDER BY created_at, id",
            params,
        ).fetchall()
        tags: dict[str, list[str]] = {}
        for session_id, tag in conn.execute("SELECT session_id, tag FROM session_tags ORDER BY rowid"):
            tags.setdefault(session_id, []).append(tag)
        stored: dict[str, list[dict]] = {}
        for r in conn.execute(
            f"SELECT * FROM ai_usage WHERE session_id IN (SELECT id FROM sessions WHERE {cond})", params
        ):
            stored.setdefault(r["session_id"], []).append(dict(r))
    report = CostReport(since, until, sessions=len(sessions), emulated=emulated,
                        include_emulated=include_emulated)  # fmt: skip
    for i, s in enumerate(sessions, 1):
        live = s["status"] == "running" or s["rolled_up_at"] is None
        rows = _live_usage(s["id"]) if live and db_file(s["id"]) is not None else None
        if rows is not None:
            report.live.append(s["id"])
            usage, unpriced = rows
        else:
            usage, unpriced = stored.get(s["id"], []), s["unpriced_calls"] or 0
        report.unpriced_calls += unpriced
        context = (s["project"], s["git_branch"], tuple(tags.get(s["id"], ())))
        report.usage += [UsageRow.of(s["id"], s["day"], u, context) for u in usage]
        if on_progress:
            on_progress(i, len(sessions))
    return report


def _live_usage(session_id: str) -> tuple[list[dict], int] | None:
    """ai_usage rows and the unpriced-call count computed from a session.db (None if unreadable)."""
    try:
        with open_session(session_id) as conn:
            broke = cache_break_costs(conn)
            rows = [dict(zip(AI_USAGE_COLUMNS, (*r, broke.get((r[0], r[1]), 0.0)), strict=True))
                    for r in conn.execute(AI_USAGE_SQL)]  # fmt: skip
            unpriced = conn.execute(
                "SELECT COUNT(*) FROM model_calls WHERE estimated_cost_usd IS NULL "
                "AND COALESCE(input_tokens, output_tokens) IS NOT NULL"
            ).fetchone()[0]
    except (SessionNotFound, SessionDbError, sqlite3.Error):
        return None
    return rows, unpriced


# --- HTML ---------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1000px;color:#1f2328;
padding:0 1em}h1{font-size:22px;margin-bottom:.2em}h2{font-size:16px;margin-top:2.2em;border-bottom:1px solid #ddd}
.sub{color:#666}.cards{display:flex;gap:1em;flex-wrap:wrap;margin:1.2em 0}.card{border:1px solid #ddd;
border-radius:6px;padding:.6em 1em;min-width:120px}.card b{display:block;font-size:20px}
table{border-collapse:collapse;margin:.8em 0;font-variant-numeric:tabular-nums}
td,th{border-bottom:1px solid #eee;padding:3px 10px;text-align:right}td:first-child,th:first-child{text-align:left}
th{background:#f6f8fa}tfoot td{font-weight:bold;border-top:2px solid #ccc}
svg text{font:11px system-ui,sans-serif;fill:#333}.bar{fill:#4f7cac}.bar:hover{fill:#2d5b8c}
.grid{stroke:#e5e5e5}.axis{stroke:#999}code{background:#f6f8fa;padding:1px 4px;border-radius:3px}
"""


def _money(v: float) -> str:
    return f"${v:.4f}" if v < 100 else f"${v:,.2f}"


def _tick_step(top: float) -> float:
    """A round step giving about four gridlines up to `top`."""
    if top <= 0:
        return 1.0
    raw = top / 4
    magnitude = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 2.5, 5, 10):
        if magnitude * mult >= raw:
            return magnitude * mult
    return raw


def svg_timeline(rows: list[CostRow], title: str, width: int = 900, height: int = 260) -> str:
    """Cost per day as a column chart over a continuous day axis (days without usage are 0)."""
    days = _fill_days(rows)
    left, right, top_pad, bottom = 70, 10, 24, 46
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    top = max((c for _, c in days), default=0)
    step = _tick_step(top)
    ymax = step * max(1, -(-top // step)) if top > 0 else 1.0
    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{html.escape(title)}"><title>{html.escape(title)}</title>']  # fmt: skip
    decimals = max(2, 1 - math.floor(math.log10(step)))
    y = 0.0
    while y <= ymax + 1e-12:
        py = top_pad + plot_h - plot_h * y / ymax
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{py:.1f}" y2="{py:.1f}"/>'
                     f'<text x="{left - 6}" y="{py + 4:.1f}" text-anchor="end">${y:.{decimals}f}</text>')  # fmt: skip
        y += step
    n = max(1, len(days))
    slot = plot_w / n
    label_every = max(1, round(n / 12))
    for i, (day, cost) in enumerate(days):
        h = plot_h * cost / ymax
        x = left + i * slot
        parts.append(f'<rect class="bar" x="{x + slot * 0.1:.1f}" y="{top_pad + plot_h - h:.1f}" '
                     f'width="{max(slot * 0.8, 1):.1f}" height="{h:.1f}">'
                     f"<title>{day}: {_money(cost)}</title></rect>")  # fmt: skip
        if i % label_every == 0:
            parts.append(f'<text x="{x + slot / 2:.1f}" y="{top_pad + plot_h + 16}" text-anchor="middle">'
                         f"{day[5:] if len(days) > 1 else day}</text>")  # fmt: skip
    base = top_pad + plot_h
    parts.append(f'<line class="axis" x1="{left}" x2="{width - right}" y1="{base}" y2="{base}"/>')
    if days:
        parts.append(f'<text x="{left}" y="{height - 6}">{days[0][0]} … {days[-1][0]} (UTC days)</text>')
    parts.append("</svg>")
    return "".join(parts)


def _fill_days(rows: list[CostRow], max_days: int = 731) -> list[tuple[str, float]]:
    by_day = {r.key: r.cost for r in rows}
    try:
        first, last = date.fromisoformat(min(by_day)), date.fromisoformat(max(by_day))
    except ValueError:
        return sorted(by_day.items())
    if (last - first).days > max_days:
        return sorted(by_day.items())
    return [((first + timedelta(d)).isoformat(), by_day.get((first + timedelta(d)).isoformat(), 0.0))
            for d in range((last - first).days + 1)]  # fmt: skip


def svg_bars(rows: list[CostRow], title: str, width: int = 900, limit: int = 15) -> str:
    """Cost per row as horizontal bars (the largest `limit`, the rest summed as `other`)."""
    shown = rows[:limit]
    if len(rows) > limit:
        rest = rows[limit:]
        shown.append(CostRow(f"other ({len(rest)})", 0, Usage(cost=sum(r.cost for r in rest))))
    top = max((r.cost for r in shown), default=0) or 1
    bar_h, label_w = 24, 280
    height = bar_h * len(shown) + 10
    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{html.escape(title)}"><title>{html.escape(title)}</title>']  # fmt: skip
    for i, r in enumerate(shown):
        y = 5 + i * bar_h
        w = (width - label_w - 100) * r.cost / top
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end">{html.escape(r.key[:44])}</text>'
            f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{max(w, 0.5):.1f}" height="{bar_h - 6}">'
            f"<title>{html.escape(r.key)}: {_money(r.cost)}</title></rect>"
            f'<text x="{label_w + w + 6:.1f}" y="{y + 16}">{_money(r.cost)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(rows: list[CostRow], label: str, total: CostRow | None = None) -> str:
    names = (
        "sessions",
        "calls",
        "input tokens",
        "cache write",
        "cache read",
        "output tokens",
        "reasoning",
        "cost",
    )
    head = (
        f"<thead><tr><th>{html.escape(label)}</th>"
        + "".join(f"<th>{n}</th>" for n in names)
        + "</tr></thead>"
    )

    def line(r: CostRow) -> str:
        u = r.usage
        cells = (r.sessions, f"{u.calls:,}", f"{u.uncached_input:,}", f"{u.cache_write_tokens:,}",
                 f"{u.cache_read_tokens:,}", f"{u.output_tokens:,}", f"{u.reasoning_tokens:,}", _money(u.cost))  # fmt: skip
        return f"<tr><td>{html.escape(r.key)}</td>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"

    foot = f"<tfoot>{line(total)}</tfoot>" if total else ""
    return f"<table>{head}<tbody>{''.join(line(r) for r in rows)}</tbody>{foot}</table>"


def _split_table(usage: Usage) -> str:
    """The cost by token type, with each part's share."""
    parts = usage.cost_by_type()
    cells = "".join(
        f"<tr><td>{PART_LABELS[k]}</td><td>{_money(v)}</td><td>{_share(v, usage.cost)}</td></tr>"
        for k, v in parts.items()
    )
    return f"<table><thead><tr><th>token type</th><th>cost</th><th>share</th></tr></thead><tbody>{cells}</tbody></table>"


def _share(part: float, total: float) -> str:
    return f"{100 * part / total:.0f}%" if total > 0 else "-"


def html_report(report: CostReport, session_limit: int = 200) -> str:
    """One self-contained HTML page: cost over time, cost by model, and the tables."""
    total = report.totals()
    by_day, by_model = report.rows("day"), report.rows("model")
    by_provider, by_session = report.rows("provider"), report.rows("session")
    span = f"{report.since or 'first session'} to {report.until or 'last session'}"
    top_sessions = sorted(by_session, key=lambda r: -r.cost)[:session_limit]
    notes = []
    if report.unpriced_calls:
        notes.append(f"{counted(report.unpriced_calls, 'model call')} with no known price count as $0 "
                     "(<code>capsem inspect-session</code> lists them).")  # fmt: skip
    if report.live:
        notes.append(
            f"{counted(len(report.live), 'running or not yet rolled-up session')} read from session.db."
        )
    cards = "".join(
        f'<div class="card">{label}<b>{value}</b></div>'
        for label, value in (("estimated cost", _money(total.cost)), ("model calls", f"{total.calls:,}"),
                             ("sessions with calls", f"{total.sessions:,}"),
                             ("input tokens", f"{total.usage.uncached_input:,}"),
                             ("cache write tokens", f"{total.usage.cache_write_tokens:,}"),
                             ("cache read tokens", f"{total.usage.cache_read_tokens:,}"),
                             ("output tokens", f"{total.usage.output_tokens:,}"),
                             ("reasoning tokens", f"{total.usage.reasoning_tokens:,}"))
    )  # fmt: skip
    session_note = (f"<p class=sub>The {session_limit} most expensive of {len(by_session)} sessions.</p>"
                    if len(by_session) > session_limit else "")  # fmt: skip
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>capsem cost report</title><style>{_CSS}</style></head><body>
<h1>capsem cost report</h1>
<p class="sub">{html.escape(span)} · {counted(report.sessions, "session")} in range · prices are estimates from
the price table in use when each call was recorded · input tokens are uncached input (as in ccusage); output
tokens include reasoning</p>
<div class="cards">{cards}</div>
{"".join(f"<p>{n}</p>" for n in notes)}
<h2>Cost by token type</h2>
{_split_table(total.usage)}
<h2>Cost over time (by day)</h2>
{svg_timeline(by_day, "cost by day") if by_day else "<p>No model calls in this range.</p>"}
<h2>Cost by model</h2>
{svg_bars(by_model, "cost by model") if by_model else "<p>No model calls in this range.</p>"}
{_table(by_model, "provider/model", total)}
<h2>By provider</h2>
{_table(by_provider, "provider", total)}
<h2>By day</h2>
{_table(by_day, "day (UTC)", total)}
<h2>By session</h2>{session_note}
{_table(top_sessions, "session")}
</body></html>
"""
