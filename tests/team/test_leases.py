"""A team budget's lease against a real PostgreSQL, in-process: what the lease reports as used is
this session's spend, never a reservation: PostgreSQL keeps the largest use it is told, so a
reservation reported once would stay counted after its call cost less, or twice when a report
counted the call's cost before mitmdump's event loop released its reservation."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg

from addons.budgets import today
from addons.proxy.spend import SpendView
from addons.proxy.team_budget import TeamLeases
from capsem.settings import Budget
from capsem.team import schema
from capsem.team.config import Team

SESSION = "20261129-120000-0001"
BUDGET = Budget("shared", "team", 0.05)  # type: ignore[arg-type]
RESERVED, COST = 0.0158, 0.0150


def lease_row(url: str) -> tuple[float, float, bool] | None:
    """This session's lease (granted, used, closed), or None before its first grant."""
    with psycopg.connect(url) as pg:
        return pg.execute("SELECT granted_usd, used_usd, closed FROM capsem.leases").fetchone()


def reported(url: str, leases: TeamLeases, used: float) -> tuple[float, float, bool]:
    """Wake the lease's thread until PostgreSQL holds `used` as this session's use."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        leases._wake.set()
        row = lease_row(url)
        if row is not None and abs(row[1] - used) < 1e-9:
            return row
        time.sleep(0.05)
    raise AssertionError(f"the lease never reported {used}: {lease_row(url)}")


def report(view: SpendView, cost: float, done: list[list]) -> None:
    """The recorder's `spend` report: this session's totals and the calls now counted."""
    view.on_report(json.dumps({"totals": [[today(), "anthropic", "claude-sonnet-4-5", "api.anthropic.com", cost, 1]],
                               "done": done}))  # fmt: skip


def keeper(team_url: str, tmp_path: Path) -> tuple[SpendView, TeamLeases]:
    """A fresh team schema, this session's spend view and the lease's keeper over it (not started)."""
    with psycopg.connect(team_url, autocommit=True) as pg:
        schema.init(pg)
    view = SpendView([BUDGET], SESSION, tmp_path / "main.db")
    return view, TeamLeases([BUDGET], Team(team_url, "laptop", "me", "metadata"), SESSION, view.own_spent,
                            view.held_now)  # fmt: skip


def test_a_lease_reports_the_spend_not_the_reservations(team_url: str, tmp_path: Path) -> None:
    view, leases = keeper(team_url, tmp_path)
    view.reserve("flow-1", "anthropic", "claude-sonnet-4-5", "api.anthropic.com", RESERVED)
    leases.start()
    try:
        # in flight: the reservation sizes the lease, but is not its use
        granted, used, _ = reported(team_url, leases, 0.0)
        assert granted >= RESERVED
        # counted by the recorder, its reservation not yet released by the event loop: not twice
        view.ended("flow-1", 0, ["flow-1"])
        report(view, COST, [["flow-1", 0]])
        assert view._held  # the event loop has not drained the report yet
        granted, used, _ = reported(team_url, leases, COST)
        assert used == COST
    finally:
        leases.stop({BUDGET.name: view.reserved(BUDGET) + view.spent(BUDGET)})
    granted, used, closed = lease_row(team_url) or (0, 0, False)
    assert closed and granted == used == COST  # what it was granted beyond its spend went back to the team


def test_a_call_in_flight_when_the_session_ends_stays_counted(team_url: str, tmp_path: Path) -> None:
    view, leases = keeper(team_url, tmp_path)
    report(view, COST, [])
    view.reserve("flow-2", "anthropic", "claude-sonnet-4-5", "api.anthropic.com", RESERVED)
    leases.start()
    reported(team_url, leases, COST)
    leases.stop({BUDGET.name: view.reserved(BUDGET) + view.spent(BUDGET)})
    granted, used, closed = lease_row(team_url) or (0, 0, False)
    assert closed and granted == used == COST + RESERVED  # its cost is not known: its worst stays held
