"""The team on PostgreSQL (docs/team.md), against a throw-away local cluster
(`capsem/team/cluster.py`):

- push: one finished session of `calls` model calls (each with a net event, every other one with
  a tool call) pushed whole by `push_session`, as the pusher does when a session ends (COPY into
  a temporary table, one `INSERT ... ON CONFLICT` per table, one transaction);
- team cost-report over `pushed` calls, generated on the server with `generate_series` (1,000
  sessions of 20 machines and 50 people), the whole `team_cost_report` (the server's sum per
  session, provider and model, then capsem's grouping), median of `repeat`;
- a team budget's decision: what a model call's check costs on the event loop (the budgets'
  verdict and reservation, `Guardrails.verdict`) with a `scope: team` budget holding a lease from
  PostgreSQL, against a `scope: day` budget: the difference is what a team budget adds to a
  call's first byte (PostgreSQL is never asked in the call's path).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from capsem.team.cluster import binaries, start_cluster


def _session(home: Path, session_id: str, calls: int) -> None:
    """A finished session of `calls` model calls in `home` (main.db and session.db)."""
    from capsem.rollup import finish_session, open_main, register_session
    from capsem.store.schema import open_session_db

    os.environ["CAPSEM_HOME"] = str(home)
    conn = open_session_db(home / "sessions" / session_id / "session.db")
    usage = '{"cache_read": 1000, "cache_write": 200, "reasoning": 50}'
    cost = '{"parts": {"cache_write": 0.00075, "cache_read": 0.0003, "output": 0.0045, "reasoning": 0.00075}}'
    with conn:
        conn.executemany(
            "INSERT INTO model_calls (id, event_id, timestamp, provider, model, method, path, host, input_tokens, "
            "output_tokens, estimated_cost_usd, usage_details, cost_details, duration_ms, net_event_id) "
            "VALUES (?, ?, ?, 'anthropic', 'claude-sonnet-4-5', 'POST', '/v1/messages', 'api.anthropic.com', "
            "1500, 300, 0.0069, ?, ?, 900, ?)",
            [(i, f"{i:012x}", f"2026-11-28T10:{i // 3600 % 60:02d}:{i // 60 % 60:02d}.{i % 60:06d}Z", usage, cost, i)
             for i in range(1, calls + 1)],
        )  # fmt: skip
        conn.executemany(
            "INSERT INTO net_events (id, event_id, timestamp, domain, decision, method, path, status_code) "
            "VALUES (?, ?, '2026-11-28T10:00:00Z', 'api.anthropic.com', 'allowed', 'POST', '/v1/messages', 200)",
            [(i, f"n{i:011x}") for i in range(1, calls + 1)],
        )
        conn.executemany(
            "INSERT INTO tool_calls (id, event_id, model_call_id, call_index, call_id, tool_name, arguments) "
            "VALUES (?, ?, ?, 0, ?, 'Bash', '{\"command\": \"ls\"}')",
            [(i, f"t{i:011x}", 2 * i, f"toolu_{i}") for i in range(1, calls // 2 + 1)],
        )
    conn.close()
    main = open_main()
    with main:
        register_session(main, session_id, mode="bench", command="claude", created_at="2026-11-28T10:00:00Z")
        finish_session(main, session_id)
    main.close()


def _push(url: str, home: Path, calls: int) -> dict:
    from addons.recorder.team_push import connect_team, push_session
    from capsem.team import outbox
    from capsem.team.config import Team

    session_id = "20261128-100000-beef"
    _session(home, session_id, calls)
    team = Team(url, "bench-machine", "bench-user", "metadata")
    pg = connect_team(team)
    box = outbox.open_outbox()
    outbox.enqueue(box, [session_id])
    started = time.perf_counter()
    pushed = push_session(pg, team, box, session_id, {})
    seconds = time.perf_counter() - started
    again = time.perf_counter()
    push_session(pg, team, box, session_id, {})  # a retry: every row is already there
    retry = time.perf_counter() - again
    count = pg.execute("SELECT count(*) FROM capsem.model_calls").fetchone()[0]
    pg.close()
    box.close()
    return {
        "calls": calls,
        "rows": pushed.rows,
        "seconds": seconds,
        "retry_seconds": retry,
        "stored_calls": count,
    }


_GENERATE = """
INSERT INTO capsem.sessions (machine, session_id, "user", mode, program, status, created_at, day, project,
    git_branch, total_model_calls, total_estimated_cost, share)
SELECT 'machine-' || (g %% 20), 's-' || g, 'user-' || (g %% 50), 'run', 'claude', 'stopped',
       '2026-11-' || lpad((1 + g %% 28)::text, 2, '0') || 'T10:00:00Z', ('2026-11-' || lpad((1 + g %% 28)::text, 2, '0'))::date,
       'project-' || (g %% 12), 'main', %(per)s, 0, 'metadata'
FROM generate_series(0, %(sessions)s - 1) g;
INSERT INTO capsem.model_calls (machine, session_id, id, ts, provider, model, host, input_tokens, output_tokens,
    cache_read_tokens, cache_write_tokens, reasoning_tokens, cost, input_cost, cache_write_cost, cache_read_cost,
    output_cost, reasoning_cost, duration_ms)
SELECT 'machine-' || (s %% 20), 's-' || s, c, '2026-11-01T10:00:00Z', 'anthropic',
       (ARRAY['claude-sonnet-4-5', 'claude-opus-4-1', 'claude-haiku-4-5'])[1 + c %% 3], 'api.anthropic.com',
       1500, 300, 1000, 200, 50, 0.0069, 0.0006, 0.00075, 0.0003, 0.0045, 0.00075, 900
FROM generate_series(0, %(sessions)s - 1) s, generate_series(1, %(per)s) c;
"""  # noqa: E501


def _report(url: str, pushed: int, repeat: int) -> dict:
    import psycopg

    from assembler.team.report import team_cost_report

    sessions = 1000
    per = pushed // sessions
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute("TRUNCATE capsem.sessions, capsem.model_calls, capsem.net_events, capsem.tool_calls")
        started = time.perf_counter()
        for statement in _GENERATE.split(";")[:2]:
            pg.execute(statement, {"sessions": sessions, "per": per})
        pg.execute("ANALYZE")
        generated = time.perf_counter() - started
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            report = team_cost_report(pg)
            rows = report.rows("user")
            times.append(time.perf_counter() - started)
        assert report.totals().calls == sessions * per and len(rows) == 50
    return {"calls": sessions * per, "sessions": sessions, "generate_seconds": generated,
            "seconds": statistics.median(times), "runs": times}  # fmt: skip


def _decisions(url: str, n: int) -> dict:
    """The budgets' check on the event loop, a team budget (with its lease) against a day budget."""
    from addons.budgets import Worst
    from addons.messages import Route
    from addons.proxy.guardrails import Guardrails
    from addons.proxy.spend import SpendView
    from addons.proxy.team_budget import TeamLeases
    from capsem.settings import Budget
    from capsem.team.config import Team

    route = Route("anthropic", "anthropic", "claude-sonnet-4-5")
    worst = Worst(0.02, "claude-sonnet-4-5", 1000, 1000, "its max_tokens")
    out = {}
    for scope in ("day", "team"):
        budget = Budget("b", scope, 1000.0)  # type: ignore[arg-type]
        guard = Guardrails([budget], team=Team(url, "bench-machine", "bench-user", "metadata"))
        guard.view = SpendView([budget], "20261128-100000-dec1", Path(os.environ["CAPSEM_HOME"]) / "main.db")
        if scope == "team":
            guard.leases = TeamLeases(
                [budget], guard.team, "20261128-100000-dec1", guard.view.own_spent, guard.view.held_now
            )
            guard.leases.start()
            deadline = time.monotonic() + 10
            while not guard.leases.ready() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert guard.leases.ready() and not guard.leases.unreachable(budget)
        times = []
        for i in range(n):
            started = time.perf_counter()
            verdict = guard.verdict(route, "claude-sonnet-4-5", "api.anthropic.com", worst=worst)
            guard.reserve(f"f{i}", route, "api.anthropic.com", verdict, worst)
            guard.view.release(f"f{i}")
            times.append(time.perf_counter() - started)
        assert verdict.decision == "allowed", verdict
        if guard.leases is not None:
            guard.leases.stop()
        out[scope] = {"median_us": statistics.median(times) * 1e6,
                      "p99_us": sorted(times)[int(len(times) * 0.99)] * 1e6}  # fmt: skip
    out["added_us"] = out["team"]["median_us"] - out["day"]["median_us"]
    return out


def run_team(calls: int, pushed: int, repeat: int, decisions: int, workdir: Path,
             log: Callable[[str], None] = print) -> dict:  # fmt: skip
    """The three team measurements (skipped, saying why, without PostgreSQL's server binaries)."""
    if binaries() is None:
        log("  skipped: PostgreSQL's server binaries are not installed (make system-deps)")
        return {"skipped": "no PostgreSQL server binaries"}
    import psycopg

    from capsem.team.schema import init

    cluster = start_cluster(workdir / "pg" if os.geteuid() else None)
    try:
        with psycopg.connect(cluster.url, autocommit=True) as pg:
            init(pg)
        results = {"push": _push(cluster.url, workdir / "home", calls)}
        log(f"  push of a {calls:,}-call session: {results['push']['seconds']:.2f} s")
        results["report"] = _report(cluster.url, pushed, repeat)
        log(
            f"  team cost-report over {results['report']['calls']:,} calls: {results['report']['seconds']:.2f} s"
        )
        results["decision"] = _decisions(cluster.url, decisions)
        log(f"  a team budget's decision adds {results['decision']['added_us']:.0f} µs")
        return results
    finally:
        cluster.remove()


def team_section(r: dict) -> list[str]:
    """The report's section (benchmarks/report.py)."""
    if "skipped" in r:
        return ["## Team (PostgreSQL)", "", f"skipped: {r['skipped']}"]
    p, c, d = r["push"], r["report"], r["decision"]
    return [
        "## Team (PostgreSQL)",
        "",
        "| measure | result | goal |",
        "|---|---|---|",
        f"| push of a finished {p['calls']:,}-call session ({p['rows']:,} rows, one transaction) | "
        f"{p['seconds']:.2f} s (retry of the same push: {p['retry_seconds']:.2f} s, {p['stored_calls']:,} calls "
        "stored) | ≤ 3 s |",
        f"| team cost-report over {c['calls']:,} pushed calls ({c['sessions']:,} sessions), median | "
        f"{c['seconds']:.2f} s | ≤ 2 s |",
        f"| a call's budget check on the event loop: day budget / team budget (median, p99) | "
        f"{d['day']['median_us']:.0f} / {d['team']['median_us']:.0f} µs, p99 {d['day']['p99_us']:.0f} / "
        f"{d['team']['p99_us']:.0f} µs | |",
        f"| added by a team budget to a call's first byte | {d['added_us']:.0f} µs | ≤ 1 ms |",
    ]
