"""`capsem view --team`: the team's page, read from its PostgreSQL each time it is opened. Spend
by person, project and model over time, the costliest sessions, refusals and denies, and what
prompt-cache breaks cost. A session opens on this machine's own pages when it was recorded here
(`/s/<id>`), else from what was pushed (`/team/<machine>/<id>`: its calls, and with `share:
redacted` or `full` its conversation items or bodies). Self-contained HTML: inline CSS and SVG,
no scripts, no network."""

from __future__ import annotations

import html
import json
from typing import Any
from urllib.parse import quote

from assembler.reports import _CSS, CostReport, svg_bars, svg_timeline
from assembler.team.report import team_cost_report

_DENIES_SQL = """
SELECT n.matched_rule, count(*), count(DISTINCT (n.machine, n.session_id)), array_agg(DISTINCT s."user")
FROM capsem.net_events n JOIN capsem.sessions s USING (machine, session_id)
WHERE n.decision = 'denied' AND s.day >= %s GROUP BY n.matched_rule ORDER BY count(*) DESC LIMIT 20
"""


def _money(v: float) -> str:
    return f"${v:,.2f}" if v >= 1 else f"${v:.4f}"


def _bars(report: CostReport, by: str, title: str) -> str:
    rows = report.rows(by)  # type: ignore[arg-type]
    return svg_bars(rows, title) if rows else "<p>No model calls in this range.</p>"


def _session_link(machine: str, session_id: str, here: str) -> str:
    href = f"/s/{quote(session_id)}" if machine == here else f"/team/{quote(machine)}/{quote(session_id)}"
    return f'<a href="{href}">{html.escape(session_id)}</a>'


def team_page(pg: Any, since: str, here: str) -> str:
    """The team page over sessions started from `since` (a UTC day); `here`: this machine's name."""
    report = team_cost_report(pg, since)
    total = report.totals()
    costliest = pg.execute(
        'SELECT machine, session_id, "user", project, program, total_estimated_cost, total_model_calls, '
        "denied_requests, lost_to_cache_breaks FROM capsem.sessions WHERE day >= %s AND NOT emulated "
        "ORDER BY total_estimated_cost DESC LIMIT 20",
        (since,),
    ).fetchall()
    denies = pg.execute(_DENIES_SQL, (since,)).fetchall()
    cards = "".join(f'<div class="card">{label}<b>{value}</b></div>' for label, value in (
        ("estimated cost", _money(total.cost)), ("model calls", f"{total.calls:,}"),
        ("sessions", f"{report.sessions:,}"), ("people", f"{len(report.rows('user')):,}"),
        ("machines", f"{len(report.rows('machine')):,}"),
        ("lost to cache breaks", _money(total.usage.cache_break_cost))))  # fmt: skip
    top = "".join(
        f"<tr><td>{_session_link(m, s, here)}</td><td>{html.escape(m)}</td><td>{html.escape(u)}</td>"
        f"<td>{html.escape(p or '')}</td><td>{html.escape(prog or '')}</td><td>{_money(c)}</td><td>{n:,}</td>"
        f"<td>{d:,}</td><td>{_money(lost)}</td></tr>"
        for m, s, u, p, prog, c, n, d, lost in costliest
    )
    refused = "".join(
        f"<tr><td>{html.escape(rule or '(no rule)')}</td><td>{n:,}</td><td>{sessions:,}</td>"
        f"<td>{html.escape(', '.join(sorted(users)))}</td></tr>"
        for rule, n, sessions, users in denies
    )
    breaks = [r for r in report.rows("model") if r.usage.cache_break_cost > 0]
    lost = "".join(
        f"<tr><td>{html.escape(r.key)}</td><td>{_money(r.usage.cache_break_cost)}</td></tr>" for r in breaks
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>capsem team</title><style>{_CSS}</style></head><body>
<h1>capsem team</h1>
<p class="sub">sessions started from {html.escape(since)} (UTC) on every machine that pushes to the team ·
emulated sessions left out · costs are estimates from each machine's price table</p>
<div class="cards">{cards}</div>
<h2>Spend over time (by day)</h2>
{svg_timeline(report.rows("day"), "cost by day") if total.calls else "<p>No model calls in this range.</p>"}
<h2>By person</h2>{_bars(report, "user", "cost by person")}
<h2>By project</h2>{_bars(report, "project", "cost by project")}
<h2>By model</h2>{_bars(report, "model", "cost by model")}
<h2>Costliest sessions</h2>
<table id="costliest"><thead><tr><th>session</th><th>machine</th><th>person</th><th>project</th><th>program</th>
<th>cost</th><th>calls</th><th>denied</th><th>lost to cache breaks</th></tr></thead><tbody>{top}</tbody></table>
<h2>Refusals and denies</h2>
{f'<table id="denies"><thead><tr><th>rule</th><th>requests</th><th>sessions</th><th>people</th></tr></thead><tbody>{refused}</tbody></table>' if refused else "<p>No request was denied.</p>"}
<h2>Cache-break losses</h2>
{f"<table><thead><tr><th>model</th><th>lost</th></tr></thead><tbody>{lost}</tbody></table>" if lost else "<p>No prompt-cache break cost anything.</p>"}
</body></html>
"""  # noqa: E501


def team_session_page(pg: Any, machine: str, session_id: str) -> str | None:
    """A session recorded on another machine, from what it pushed (None: the team has no such session)."""
    s = pg.execute('SELECT "user", status, created_at, program, project, git_branch, share, total_estimated_cost '
                   "FROM capsem.sessions WHERE machine = %s AND session_id = %s",
                   (machine, session_id)).fetchone()  # fmt: skip
    if s is None:
        return None
    user, status, created, program, project, branch, share, cost = s
    calls = pg.execute("SELECT id, ts, provider, model, input_tokens, output_tokens, cost, status_code, error_type "
                       "FROM capsem.model_calls WHERE machine = %s AND session_id = %s ORDER BY id",
                       (machine, session_id)).fetchall()  # fmt: skip
    content: dict[int, list[str]] = {}
    for kind, ref, body in pg.execute("SELECT kind, ref, body FROM capsem.content WHERE machine = %s AND "
                                      "session_id = %s ORDER BY kind, ref", (machine, session_id)):  # fmt: skip
        if kind == "item":
            item = json.loads(body)
            content.setdefault(item["call"], []).append(
                f"{item['direction']} {item['kind']}: {item['content']}"
            )
        else:
            content.setdefault(ref, []).append(f"{kind} body: {body}")
    rows = "".join(
        f"<tr><td>{i}</td><td>{html.escape(ts[:19])}</td><td>{html.escape(p)}/{html.escape(m)}</td><td>{it or 0:,}</td>"
        f"<td>{ot or 0:,}</td><td>{_money(c or 0)}</td><td>{code or ''}</td><td>{html.escape(err or '')}</td></tr>"
        + "".join(f'<tr><td></td><td colspan="7"><pre>{html.escape(text[:4000])}</pre></td></tr>'
                  for text in content.get(i, []))
        for i, ts, p, m, it, ot, c, code, err in calls
    )  # fmt: skip
    kept = ("Only its metadata was shared (`share: metadata`): its prompts and answers stay on "
            f"{html.escape(machine)}." if share == "metadata" else f"Shared: {html.escape(share)}.")  # fmt: skip
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>capsem team · {html.escape(session_id)}</title>
<style>{_CSS}pre{{white-space:pre-wrap;text-align:left;margin:0}}</style></head><body>
<p><a href="/team">team</a></p>
<h1>{html.escape(session_id)} on {html.escape(machine)}</h1>
<p class="sub">{html.escape(user)} · {html.escape(status)} · started {html.escape(created[:19])} ·
{html.escape(program or "")} {html.escape("@".join(x for x in (project, branch) if x))} · {_money(cost)}</p>
<p>{kept}</p>
<table><thead><tr><th>call</th><th>time</th><th>model</th><th>input</th><th>output</th><th>cost</th><th>status</th>
<th>error</th></tr></thead><tbody>{rows}</tbody></table>
</body></html>
"""
