"""`capsem budget`: each configured budget's spend, limit and state, from main.db's spend ledger.

The spend is what the addon checks before each model call: the estimated cost of the calls a
budget matches, in its scope (a session; today or this month in UTC, across every session on
this machine, running ones included).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import click

from addons.budgets import SpendRow, spent, today, usd
from assembler.cli_support import user_errors
from assembler.sessiondb import MainDbMissing, open_main
from capsem.paths import user_config_path
from capsem.settings import Budget, load
from capsem.team.leases import period_of

STATES = {"ok": "ok", "warned": "warn", "denied": "spent"}


@dataclass(frozen=True)
class BudgetState:
    name: str
    scope: str
    period: str
    """The day, month or session the spend is counted over."""
    matches: str
    """What the budget counts (`all` model calls, `model claude-opus-*`...)."""
    spent_usd: float
    limit_usd: float
    warn_at: float | None
    state: str
    """`ok`, `warned` (at its warn fraction) or `denied` (spent: matching calls are refused)."""


def _matches(budget: Budget) -> str:
    parts = [f"{f} {getattr(budget, f)}" for f in ("provider", "model", "host") if getattr(budget, f)]
    return ", ".join(parts) or "all"


def _ledger(session_id: str | None, day: str) -> tuple[list[SpendRow], str | None]:
    """This month's spend rows, and the session a session budget counts (given, else the newest)."""
    try:
        with open_main() as main:
            if session_id is None:
                row = main.execute("SELECT id FROM sessions ORDER BY status = 'running' DESC, created_at DESC "
                                   "LIMIT 1").fetchone()  # fmt: skip
                session_id = row[0] if row else None
            rows = main.execute(
                "SELECT session_id, day, provider, model, host, estimated_cost FROM spend "
                "WHERE day >= ? OR session_id = ?",
                (day[:7] + "-01", session_id or ""),
            ).fetchall()
    except MainDbMissing:
        return [], session_id
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        return [], session_id  # a main.db no capsem with budgets has opened yet
    return [tuple(r) for r in rows], session_id  # type: ignore[misc]


def budget_states(
    budgets: tuple[Budget, ...],
    *,
    session_id: str | None = None,
    now: float | None = None,
    team_spent: dict[str, float] | None = None,
) -> list[BudgetState]:
    """The state of each budget now (session budgets: in `session_id`, default the newest session;
    team budgets: `team_spent` when the team's database answered, else this machine's spend)."""
    day = today(now)
    rows, session = _ledger(session_id, day)
    out = []
    for b in budgets:
        if b.scope == "team":
            local = spent(replace(b, scope=b.period), rows, day=day, session_id=session)
            amount = (team_spent or {}).get(b.name, local)
        else:
            amount = spent(b, rows, day=day, session_id=session)
        state = "ok"
        if amount >= b.limit_usd:
            state = "denied"
        elif b.warn_at is not None and amount >= b.warn_at * b.limit_usd:
            state = "warned"
        period = {"day": day, "month": day[:7], "session": session or "(no session)",
                  "team": period_of(day, b.period)}[b.scope]  # fmt: skip
        out.append(BudgetState(b.name, b.scope, period, _matches(b), amount, b.limit_usd, b.warn_at, state))
    return out


def known_session(session_id: str) -> str:
    """A session id of main.db as given, or the one session it starts (as elsewhere).

    Raises:
        SessionNotFound: no session has that id or prefix, or several share the prefix.
    """
    from assembler.sessiondb import SessionNotFound

    try:
        with open_main() as main:
            sql = "SELECT id FROM sessions WHERE substr(id, 1, ?) = ? ORDER BY id"
            found = [r[0] for r in main.execute(sql, (len(session_id), session_id))]
    except MainDbMissing:
        found = []
    if session_id in found or len(found) == 1:
        return session_id if session_id in found else found[0]
    if found:
        raise SessionNotFound(f"{len(found)} sessions start with {session_id!r}: {', '.join(found[:5])}"
                              f"{' …' if len(found) > 5 else ''}; give more of the id")  # fmt: skip
    raise SessionNotFound(f"no session {session_id!r} in main.db (capsem list-sessions shows them)")


def _team_spent(budgets: tuple[Budget, ...], settings) -> dict[str, float] | None:
    """What the team's sessions used of each team budget this period (their leases), or None when
    there is none or the team's database does not answer (this machine's spend is shown then)."""
    team_budgets = [b for b in budgets if b.scope == "team"]
    from capsem.team.config import team_of

    team = team_of(settings) if team_budgets else None
    if team is None:
        return None
    try:
        import psycopg

        with psycopg.connect(team.url, connect_timeout=3) as pg:
            day = today()
            return {b.name: pg.execute("SELECT COALESCE(sum(used_usd), 0) FROM capsem.leases WHERE name = %s AND "
                                       "period = %s", (b.name, period_of(day, b.period))).fetchone()[0]
                    for b in team_budgets}  # fmt: skip
    except Exception as exc:
        click.echo(f"the team database {team.where} does not answer ({team.said(exc)}); team budgets show this machine's "
                   "spend only", err=True)  # fmt: skip
        return None


@click.command("budget")
@click.option("--session", "session_id", metavar="SESSION_ID",
              help="The session whose spend session budgets show (default: the newest).")  # fmt: skip
@click.option("--file", "user_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Your settings file (default: $CAPSEM_HOME/config.yaml).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def budget(session_id, user_file, as_json) -> None:
    """Show each budget's spend, limit and state.

    Budgets are the `budgets:` of your config.yaml. Day and month budgets count every session on
    this machine (UTC days); session budgets count one session; team budgets what every machine's
    sessions used, from the team's database (this machine's spend when it does not answer). The
    spend is the estimated cost of the calls a budget matches (unpriced models count nothing).

    \b
    Examples:
        capsem budget
        capsem budget --session 20261123-034856-4ea7
        capsem budget --json
    """
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from assembler.cli_support import console

    with user_errors():
        settings = load(user_file)
        if session_id is not None:
            session_id = known_session(session_id)
        states = budget_states(
            settings.budgets.entries,
            session_id=session_id,
            team_spent=_team_spent(settings.budgets.entries, settings),
        )
    if as_json:
        click.echo(json.dumps([asdict(s) for s in states], indent=2))
        return
    if not states:
        click.echo(f"no budgets configured (add a budgets: section to {user_file or user_config_path()}; "
                   "see config/default.yaml)")  # fmt: skip
        return
    periods = {s.scope: s.period for s in states}
    names = (("day", "today"), ("month", "month"), ("session", "session"), ("team", "team"))
    when = [f"{name} {periods[scope]}" for scope, name in names if scope in periods]
    out = console()
    out.print(f"Spend so far ({', '.join(when)}; days and months in UTC):", highlight=False)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name, justify, wrap in (("budget", "left", True), ("scope", "left", False), ("counts", "left", True),
                                ("spent", "right", False), ("limit", "right", False), ("used", "right", False),
                                ("state", "left", False)):  # fmt: skip
        table.add_column(name, justify=justify, overflow="fold", no_wrap=not wrap)  # type: ignore[arg-type]
    for s in states:
        share = s.spent_usd / s.limit_usd if s.limit_usd else float("inf")
        style = {"denied": "bold red", "warned": "yellow"}.get(s.state, "")
        state = STATES[s.state]
        table.add_row(escape(s.name), s.scope, escape(s.matches), usd(s.spent_usd), usd(s.limit_usd),
                      f"{share:.0%}" if share < 10 else ">999%", f"[{style}]{state}[/]" if style else state)  # fmt: skip
    out.print(table)
    if any(s.state != "ok" for s in states):
        out.print("warn: calls go through and are recorded `warned`; spent: matching calls are refused (402)",
                  highlight=False)  # fmt: skip
