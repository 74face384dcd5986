"""Team budgets in mitmdump: each `scope: team` budget spends from this session's lease, which a
thread of its own keeps with the team's PostgreSQL (`capsem/team/leases.py`). The event loop
never talks to PostgreSQL: it reads `granted` (a float the thread replaces) and, when a call's
reservation does not fit in it, asks the thread for more and `await`s the answer (only that
call waits; the other flows go on).

For the budgets' check a team budget's spend is this session's own plus what the team's other
sessions spent or hold (`others`, as of the last answer), and it may go as far as `cap`: the
others' part plus this session's lease. So `decide` refuses a call exactly when this session's
spend, its calls in flight and the call's own reservation would pass its lease, and warns at
`warn_at` of the team's limit. While no lease can be had (PostgreSQL cannot be reached or has
not answered yet), the call decides by the budget's `on_unconfirmed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from addons.budgets import today
from capsem.settings import Budget
from capsem.team.config import Team
from capsem.team.leases import period_of

logger = logging.getLogger(__name__)

RENEW_SECONDS = 1.0
"""How often the thread reports this session's use and tops its leases up."""
SLICE = 0.1
"""A top-up asks for this fraction of the limit beyond what the session needs now."""
WAIT_SECONDS = 3.0
"""How long a call waits at most for a larger lease."""


@dataclass
class _Lease:
    budget: Budget
    period: str = ""
    granted: float = 0.0
    others: float = 0.0
    """What the team's other sessions held or used at the last answer."""
    answered: bool = False
    """PostgreSQL answered for this period (with a grant, maybe 0)."""
    failed: str | None = None
    """Why the last attempt failed (None: it did not)."""
    wants: list[tuple[float, Future]] = field(default_factory=list)


class TeamLeases:
    """The leases of this session's team budgets (the thread's side and the event loop's side)."""

    def __init__(self, budgets: Sequence[Budget], team: Team | None, session_id: str,
                 spent_of: Callable[[Budget], float], held_of: Callable[[Budget], float]) -> None:  # fmt: skip
        """`spent_of(budget)`: this session's spend in the budget's period; `held_of(budget)`: what
        its calls in flight hold (both read from the thread: `SpendView.own` is replaced whole, the
        reservations summed by copy).

        The lease reports the spend alone as what it used: PostgreSQL keeps the largest use it was
        told, so a reservation reported while its call was in flight (or while the call's cost was
        already in the spend and its reservation not yet released) would stay counted for good.
        What the calls hold sizes the lease instead, and is counted as used when the lease closes."""
        self.leases = {b.name: _Lease(b) for b in budgets if b.scope == "team"}
        self.team = team
        self.session_id = session_id
        self.spent_of = spent_of
        self.held_of = held_of
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._final: dict[str, float] = {}

    def __bool__(self) -> bool:
        return bool(self.leases)

    # -- the event loop's side ------------------------------------------------------------------

    def ready(self) -> bool:
        """Whether every team budget has PostgreSQL's answer (or failure) for the current period."""
        period = today()
        return all(lease.period == _key(lease.budget, period) and (lease.answered or lease.failed)
                   for lease in self.leases.values())  # fmt: skip

    def others(self, budget: Budget) -> float:
        """What the team's other sessions spent or hold of the budget this period (at the last answer)."""
        lease = self.leases[budget.name]
        return lease.others if lease.period == _key(budget, today()) else 0.0

    def cap(self, budget: Budget) -> float:
        """How far the team's spend may go for this session: the others' part plus this session's
        lease (0 without a lease for this period)."""
        lease = self.leases[budget.name]
        return lease.others + lease.granted if lease.period == _key(budget, today()) else 0.0

    def unreachable(self, budget: Budget) -> str | None:
        """Why the budget's lease cannot grow now (PostgreSQL down, no team), or None."""
        return self.leases[budget.name].failed

    async def more(self, budget: Budget, need: float) -> None:
        """Ask for a lease of at least `need` in all (this session's spend, held and the call's
        reservation); return once the thread answered, or after WAIT_SECONDS."""
        future: Future = Future()
        with self._lock:
            self.leases[budget.name].wants.append((need, future))
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.wrap_future(future), WAIT_SECONDS)
        except TimeoutError:
            pass

    # -- the thread -----------------------------------------------------------------------------

    def start(self) -> None:
        if not self.leases:
            return
        self._thread = threading.Thread(target=self._run, name="capsem-team-leases", daemon=True)
        self._thread.start()

    def stop(self, used: dict[str, float] | None = None) -> None:
        """Close the leases: what this session did not use returns to the team (`used`: per budget,
        this session's spend plus what its calls still hold, read on the event loop)."""
        if self._thread is None:
            return
        self._final = used or {}
        self._stop.set()
        self._wake.set()
        self._thread.join(10)
        self._thread = None

    def _run(self) -> None:
        conn = None
        while True:
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._connect()
                self._round(conn)
            except Exception as exc:
                self._failed(exc)
                if conn is not None:
                    conn.close()
                    conn = None
            if self._stop.is_set():
                break
            self._wake.wait(RENEW_SECONDS)
            self._wake.clear()
        if conn is not None:
            self._close(conn)
            conn.close()

    def _connect(self) -> Any:  # psycopg is imported here, never at mitmdump's start
        if self.team is None:
            raise RuntimeError("no team is set (team.url or CAPSEM_TEAM_URL): a team budget needs one")
        import psycopg

        conn = psycopg.connect(
            self.team.url, connect_timeout=3, autocommit=True, application_name="capsem-lease"
        )
        conn.execute("SET statement_timeout = 3000")
        return conn

    def _round(self, conn: Any) -> None:
        from capsem.team.leases import grant

        day = today()
        for lease in self.leases.values():
            b = lease.budget
            period = _key(b, day)
            with self._lock:
                wants, lease.wants = lease.wants, []
            if period != lease.period:
                lease.period, lease.granted, lease.others, lease.answered = period, 0.0, 0.0, False
            used = self.spent_of(b)
            needed = used + self.held_of(b)
            want = max([needed, *(need for need, _ in wants)]) + SLICE * b.limit_usd
            if lease.answered and not wants and lease.granted - needed >= SLICE * b.limit_usd / 2:
                want = lease.granted  # headroom enough: report the use only
            try:
                got = grant(conn, b.name, period, b.limit_usd, self.team.machine, self.session_id,  # type: ignore[union-attr]
                            used=used, want=want)  # fmt: skip
            except Exception:
                with self._lock:
                    lease.wants = wants + lease.wants
                raise
            lease.others, lease.granted, lease.answered, lease.failed = got.others, got.granted, True, None
            for _, future in wants:
                _resolve(future)

    def _failed(self, exc: Exception) -> None:
        said = self.team.said(exc).strip() if self.team is not None else str(exc).strip()
        why = said.splitlines()[0] if said else repr(exc)
        for lease in self.leases.values():
            if lease.failed is None:
                logger.warning("capsem: team budget %r: the team database cannot be reached (%s); calls "
                               "beyond this session's lease decide by on_unconfirmed", lease.budget.name, why)  # fmt: skip
            lease.failed = why
            if lease.period != _key(lease.budget, today()):
                lease.period, lease.granted, lease.others, lease.answered = (
                    _key(lease.budget, today()),
                    0.0,
                    0.0,
                    False,
                )
            with self._lock:
                wants, lease.wants = lease.wants, []
            for _, future in wants:
                _resolve(future)

    def _close(self, conn: Any) -> None:
        from capsem.team.leases import close

        for lease in self.leases.values():
            if lease.answered:
                try:
                    b = lease.budget
                    used = (
                        self._final[b.name] if b.name in self._final else self.spent_of(b) + self.held_of(b)
                    )
                    close(conn, b.name, lease.period, self.team.machine, self.session_id,  # type: ignore[union-attr]
                          used)  # fmt: skip
                except Exception as exc:
                    logger.warning("capsem: team budget %r: its lease could not be closed (%s): its unused part "
                                   "stays held until the period ends", lease.budget.name, self.team.said(exc))  # type: ignore[union-attr]  # fmt: skip


def _resolve(future: Future) -> None:
    """Wake a call waiting for a larger lease (it may have stopped waiting: its future cancelled)."""
    if not future.done():
        with contextlib.suppress(InvalidStateError):
            future.set_result(None)


def _key(budget: Budget, day: str) -> str:
    return period_of(day, budget.period)
