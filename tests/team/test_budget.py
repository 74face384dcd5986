"""A team budget, shared by two machines (two CAPSEM_HOMEs, real mitmdump, the emulator, one real
PostgreSQL): the second machine is refused once the first one's spend plus its own would pass the
limit, and a machine that cannot reach PostgreSQL decides by `on_unconfirmed`.

The emulator's `reasoning` control makes a call cost close to its reservation (~$0.0150 of a
~$0.0158 reservation at 1,001 output tokens), so the limit of $0.05 holds three calls' cost but
the third call's reservation passes it."""

from __future__ import annotations

import psycopg

from capsem.store.schema import connect
from tests.e2e.test_budget_reservations import model_exchanges, upstream_cost, wait_until
from tests.team.helpers import Machine, call, capsem

LIMIT = 0.05
BUDGET = f"budgets:\n  shared: {{scope: team, period: day, limit_usd: {LIMIT}}}\n"
COSTLY = "text=ok; reasoning=1000"


def spent(machine: Machine) -> float:
    return machine.cost_report()["totals"]["cost"]


def counted(machine: Machine, session_id: str, calls: int) -> None:
    """Until the recorder has counted `calls` calls (a loaded machine's recorder may take longer
    than the 2 s a budget waits before it decides by on_unconfirmed, which is not what is tried here)."""

    def done() -> bool:
        main = connect(machine.home / "main.db", readonly=True)
        try:
            row = main.execute(
                "SELECT SUM(call_count) FROM spend WHERE session_id = ?", (session_id,)
            ).fetchone()
        finally:
            main.close()
        return (row[0] or 0) >= calls

    wait_until(done, f"{calls} calls counted")


def test_a_team_budget_holds_across_two_machines_and_fails_closed(team_url, postgres, emu, tmp_path):
    a = Machine(tmp_path / "a", "laptop-a", emu, BUDGET)
    b = Machine(tmp_path / "b", "laptop-b", emu, BUDGET)
    capsem(a.home, "team", "init")
    proxy, http = a.session("20261128-120000-000a")
    with http:
        for i in range(2):
            call(http, f"a {i}", 1001, COSTLY)
            counted(a, "20261128-120000-000a", i + 1)
    assert proxy.stop() == 0
    first = spent(a)
    assert 0.029 < first < 0.031

    proxy, http = b.session("20261128-120000-000b")
    with http:
        call(http, "b 0", 1001, COSTLY)
        counted(b, "20261128-120000-000b", 1)
        refused = call(http, "b 1", 1001, COSTLY, status=402).json()["error"]["message"]
    assert proxy.stop() == 0
    assert "capsem budget 'shared' cannot cover this call: it could cost up to $0.0156" in refused
    assert "used by the team this day (UTC" in refused and "of its $0.0500 limit per day" in refused
    assert len(model_exchanges(emu)) == 3  # the refused call never went upstream
    assert upstream_cost(emu) <= LIMIT
    second = spent(b)
    assert first + second <= LIMIT < first + second + 0.0158  # refused only when it could have passed
    with psycopg.connect(team_url) as pg:
        leases = pg.execute(
            "SELECT machine, granted_usd, used_usd, closed FROM capsem.leases ORDER BY machine"
        ).fetchall()
    assert [(m, closed) for m, _, _, closed in leases] == [("laptop-a", True), ("laptop-b", True)]
    assert sum(granted for _, granted, _, _ in leases) <= LIMIT + 1e-12

    # PostgreSQL unreachable and no lease yet: on_unconfirmed (deny, the default) refuses, saying why
    postgres.stop()
    try:
        proxy, http = b.session("20261128-120000-000c")
        with http:
            message = call(http, "b 2", 10, status=402).json()["error"]["message"]
        assert proxy.stop() == 0
    finally:
        postgres.start()
    assert "the team database is not answering" in message and "on_unconfirmed: allow" in message
    assert len(model_exchanges(emu)) == 3
    b.wait_pushed()  # the session recorded during the outage arrives once the server is back
