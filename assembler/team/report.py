"""The team's answers, read from its PostgreSQL: `cost-report --team` (the same `CostReport` as a
machine's own, its usage rows summed by the server per session, provider and model, so the team
totals are the sum of each machine's `cost-report`), and `list-sessions --team`.

Days are UTC days of session start, as in the local report; emulated sessions (`run
--emulator`, `demo`, replays) are left out unless asked for.
"""

from __future__ import annotations

from typing import Any

from assembler.reports import CostReport, UsageRow

_USAGE_SQL = """
SELECT s.machine, s.session_id, s.day::text, s."user", s.project, s.git_branch, s.tags, m.provider, m.model,
       count(*) AS call_count, COALESCE(sum(m.input_tokens), 0)::bigint AS input_tokens,
       COALESCE(sum(m.output_tokens), 0)::bigint AS output_tokens, COALESCE(sum(m.cost), 0) AS estimated_cost,
       COALESCE(sum(m.duration_ms), 0)::bigint AS total_duration_ms, sum(m.cache_read_tokens)::bigint AS cache_read_tokens,
       sum(m.cache_write_tokens)::bigint AS cache_write_tokens, sum(m.reasoning_tokens)::bigint AS reasoning_tokens,
       sum(m.input_cost) AS input_cost, sum(m.cache_write_cost) AS cache_write_cost,
       sum(m.cache_read_cost) AS cache_read_cost, sum(m.output_cost) AS output_cost,
       sum(m.reasoning_cost) AS reasoning_cost,
       COALESCE(sum(b.extra), 0) AS cache_break_cost
FROM capsem.sessions s
JOIN capsem.model_calls m ON m.machine = s.machine AND m.session_id = s.session_id
LEFT JOIN (SELECT machine, session_id, model_call_id, sum(extra_cost_usd) AS extra FROM capsem.cache_breaks
           GROUP BY 1, 2, 3) b ON b.machine = m.machine AND b.session_id = m.session_id AND b.model_call_id = m.id
WHERE {where}
GROUP BY s.machine, s.session_id, m.provider, m.model
ORDER BY s.created_at, s.machine, s.session_id
"""

_NAMES = ("machine", "session_id", "day", "user", "project", "git_branch", "tags", "provider", "model", "call_count",
          "input_tokens", "output_tokens", "estimated_cost", "total_duration_ms", "cache_read_tokens",
          "cache_write_tokens", "reasoning_tokens", "input_cost", "cache_write_cost", "cache_read_cost",
          "output_cost", "reasoning_cost", "cache_break_cost")  # fmt: skip


def _range(since: str | None, until: str | None) -> tuple[list[str], list[Any]]:
    where, params = ["TRUE"], []
    if since:
        where.append("s.day >= %s")
        params.append(since)
    if until:
        where.append("s.day <= %s")
        params.append(until)
    return where, params


def team_cost_report(pg: Any, since: str | None = None, until: str | None = None, *,
                     include_emulated: bool = False) -> CostReport:  # fmt: skip
    """The team's cost report over sessions started in [since, until] (UTC days, inclusive)."""
    where, params = _range(since, until)
    cond = " AND ".join(where)
    emulated, sessions, unpriced = pg.execute(
        f"SELECT count(*) FILTER (WHERE s.emulated), count(*) FILTER (WHERE NOT s.emulated OR %s), "
        f"COALESCE(sum(s.unpriced_calls) FILTER (WHERE NOT s.emulated OR %s), 0)::bigint "
        f"FROM capsem.sessions s WHERE {cond}",
        [include_emulated, include_emulated, *params],
    ).fetchone()  # fmt: skip
    if not include_emulated:
        cond += " AND NOT s.emulated"
    report = CostReport(since, until, sessions=sessions, unpriced_calls=int(unpriced), emulated=emulated,
                        include_emulated=include_emulated)  # fmt: skip
    for row in pg.execute(_USAGE_SQL.format(where=cond), params):
        values = dict(zip(_NAMES, row, strict=True))
        for name in ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens"):
            values[name] = int(values[name] or 0)
        context = (values["project"], values["git_branch"], tuple(values["tags"] or ()), values["user"],
                   values["machine"])  # fmt: skip
        report.usage.append(UsageRow.of(values["session_id"], values["day"], values, context))
    return report


SESSIONS_SQL = """
SELECT machine, session_id, "user", status, created_at, stopped_at, program, name, project, git_branch, tags,
       total_model_calls, total_tool_calls, total_mcp_calls, denied_requests, total_errors,
       total_input_tokens, total_output_tokens, total_estimated_cost, lost_to_cache_breaks, share, emulated
FROM capsem.sessions s WHERE {where} ORDER BY created_at DESC, machine, session_id LIMIT %s
"""


def team_sessions(pg: Any, since: str | None = None, limit: int = 50) -> list[dict]:
    """The team's newest sessions (every machine), newest first."""
    where, params = _range(since, None)
    cursor = pg.execute(SESSIONS_SQL.format(where=" AND ".join(where)), [*params, limit])
    names = [d.name for d in cursor.description]
    return [dict(zip(names, r, strict=True)) for r in cursor]
