"""Spend so far, where budgets can read it without blocking: the ledger in main.db and this
session's own spend, reported by the recorder.

Two halves, one per process:

- `SessionSpend` (`addons/recorder/spend.py`) lives in the recorder process. It adds up the cost of every `model_calls` row
  the recorder builds, by UTC day, provider, model and host. After each handled batch it has a
  report for mitmdump (a `spend {...}` line on the recorder's status pipe: this session's rows
  and the flows whose cost is now counted); after each commit it brings this session's rows of
  main.db `spend` up to date, so that every other capsem on the machine counts a running
  session in its day and month budgets. (The rollup recomputes the same rows from session.db
  when the session ends. Both go through `capsem.rollup.record_spend`: a new `spend_entries`
  row holds a key's whole value, never an increment, and `spend` is the view of the latest.)
- `SpendView` lives in mitmdump. It keeps this session's rows from the reports, and the other
  sessions' spend per budget, refreshed from main.db by a background thread every `interval`
  seconds (never on the event loop). It also knows which model calls have ended but are not
  counted yet (`ended`), so that a budget check can wait the few milliseconds it takes for their
  cost to come back (`settled`) and a tool loop's next call sees the call before it. When that
  does not happen within SETTLE_SECONDS (the recorder is stopped or slow) or the recorder died,
  the spend is not `confirmed` until a recorder reports again: the budgets then decide by their
  `on_unconfirmed` instead of assuming the missing cost is zero.

Each model call a budget lets through holds its reservation (`reserve`: its most expensive
outcome, `addons/budgets.py: Worst`) from before it goes upstream until the recorder reports its
real cost counted (`ended`, then the `done` of a report) or, if it never went upstream, until it
ends (`release`). `reserved(budget)` is what the calls in flight hold, so no number of them
takes this session's spend past a limit. Other sessions' calls in flight are not seen: a day or
month budget can be overshot by their cost, plus the calls they end in the last `interval` and
their commit interval.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from addons.budgets import SpendRow, matches, spent
from addons.budgets import today as utc_today
from capsem.settings import Budget
from capsem.store.schema import connect

logger = logging.getLogger(__name__)

Key = tuple[str, str, str, str]
"""(day, provider, model, host)."""

REFRESH_SECONDS = 0.2
"""How often mitmdump re-reads the other sessions' spend from main.db."""
SETTLE_SECONDS = 5.0
"""How long a budget check waits at most for the cost of calls that have just ended: it comes back
in milliseconds; a loaded machine can hold a recorder back a second or two, which must not turn into
a refusal."""


def ledger_rows(main: sqlite3.Connection, *, since: str, exclude: str | None = None) -> list[SpendRow]:
    """The spend rows of every session from day `since` on (but session `exclude`)."""
    return [
        (r[0], r[1], r[2], r[3], r[4], r[5])
        for r in main.execute(
            "SELECT session_id, day, provider, model, host, estimated_cost FROM spend "
            "WHERE day >= ? AND session_id != ?",
            (since, exclude or ""),
        )
    ]


class SpendView:
    """mitmdump's view of the spend: this session's from the recorder, the others' from main.db."""

    def __init__(self, budgets: Sequence[Budget], session_id: str, main_db: Path,
                 interval: float = REFRESH_SECONDS) -> None:  # fmt: skip
        self.budgets = tuple(budgets)
        self.session_id = session_id
        self.main_db = main_db
        self.interval = interval
        self.own: list[SpendRow] = []
        """This session's rows, as last reported (replaced whole: safe to read from the event loop)."""
        self.others: dict[str, float] = {}
        """Budget name -> spend of the other sessions in its scope (day and month budgets)."""
        self.others_day = ""
        self._pending: dict[str, tuple[float, int]] = {}  # flow key -> (when it ended, seq); event loop only
        self._held: dict[str, tuple[str, str | None, str, float]] = {}  # reservation key -> (provider, model,
        # host, USD); event loop only
        self._settling: dict[str, list[tuple[int, str]]] = {}  # flow key -> [(seq, reservation key)] ended
        self._done: deque[tuple[str, int]] = deque()  # reported counted (status thread -> event loop)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False
        self._down_at: float | None = None  # when the recorder died (None: one is answering)
        self._restarted: float | None = None  # the death a restarted recorder has since reported after

    # -- the other sessions (background thread) ------------------------------------------------

    def start(self) -> None:
        """Read main.db once now (so the first call sees it), then keep refreshing in the background."""
        self.refresh()
        if any(b.scope in ("day", "month") for b in self.budgets):
            self._thread = threading.Thread(target=self._run, name="capsem-spend", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()

    def refresh(self) -> None:
        """Recompute the other sessions' spend of each day and month budget from main.db."""
        shared = [b for b in self.budgets if b.scope in ("day", "month")]
        if not shared:
            return
        day = utc_today()
        try:
            main = connect(self.main_db, readonly=True)
            try:
                rows = ledger_rows(main, since=day[:7] + "-01", exclude=self.session_id)
            finally:
                main.close()
        except sqlite3.Error as exc:
            if not self._failed:
                logger.warning("capsem: reading the spend ledger %s failed (%s); day and month budgets count "
                               "this session only until it works", self.main_db, exc)  # fmt: skip
            self._failed = True
            return
        self._failed = False
        self.others = {b.name: spent(b, rows, day=day, session_id=None) for b in shared}
        self.others_day = day

    # -- this session (reports from the recorder) ----------------------------------------------

    def on_report(self, text: str) -> None:
        """A `spend` report's JSON (any thread). The first one after `recorder_down` comes from the
        restarted recorder: the calls that ended before the death are in its totals (read from
        session.db) or were lost with the dead recorder (counted as missed), never reported: they
        are not waited for."""
        data = json.loads(text)
        self.own = [(self.session_id, d, p, m, h, float(c)) for d, p, m, h, c, _ in data["totals"]]
        self._done.extend((key, seq) for key, seq in data["done"])
        if self._down_at is not None:
            self._restarted = self._down_at  # the event loop forgets what ended before (`_drain`)
            self._down_at = None

    def ended(self, flow_key: str, seq: int = 0, reservations: Sequence[str] = ()) -> None:
        """A model call ended (a WebSocket turn: with its `seq`-th server message); its cost is on
        its way, and `reservations` are released once it is counted (event loop)."""
        self._pending[flow_key] = (time.monotonic(), seq)
        if reservations:
            self._settling.setdefault(flow_key, []).extend((seq, key) for key in reservations)

    # -- reservations (event loop) ---------------------------------------------------------------

    def reserve(self, key: str, provider: str, model: str | None, host: str, amount: float) -> None:
        """A call let through holds `amount` of the budgets it matches until it is settled."""
        self._held[key] = (provider, model, host, amount)

    def release(self, key: str) -> None:
        """A reservation ends: the call never went upstream, or its real cost is counted."""
        self._held.pop(key, None)

    def reserved(self, budget: Budget) -> float:
        """What the calls in flight (and those ended but not counted yet) hold of `budget`."""
        self._drain()
        return sum(held[3] for held in self._held.values() if matches(budget, held[0], held[1], held[2]))

    def held_now(self, budget: Budget) -> float:
        """`reserved` read from another thread (a team budget's lease keeper): a copy of what the
        calls in flight hold (copying a dict is one step under the GIL)."""
        return sum(
            held[3] for held in self._held.copy().values() if matches(budget, held[0], held[1], held[2])
        )

    def own_spent(self, budget: Budget) -> float:
        """This session's spend the budget matches in its scope (any thread: `own` is replaced whole)."""
        return spent(budget, self.own, day=utc_today(), session_id=self.session_id)

    def _settled(self, flow_key: str, seq: float) -> None:
        """The cost of `flow_key` up to its `seq`-th server message is counted: release what it held."""
        waiting = self._settling.get(flow_key)
        if not waiting:
            return
        for _, key in [w for w in waiting if w[0] <= seq]:
            self.release(key)
        left = [w for w in waiting if w[0] > seq]
        if left:
            self._settling[flow_key] = left
        else:
            del self._settling[flow_key]

    def recorder_down(self) -> None:
        """The recorder died (any thread): this session's spend is unconfirmed until a recorder
        reports again (the restarted one starts from what session.db holds)."""
        self._down_at = time.monotonic()

    def _drain(self) -> None:
        restarted, self._restarted = self._restarted, None
        if restarted is not None:
            for key in [k for k, (at, _) in self._pending.items() if at <= restarted]:
                del self._pending[key]
                self._settled(key, math.inf)  # in the restarted recorder's totals, or lost (counted missed)
        while self._done:
            key, seq = self._done.popleft()
            self._settled(key, seq)
            if key in self._pending and self._pending[key][1] <= seq:
                del self._pending[key]

    def confirmed(self) -> bool:
        """Whether this session's spend is known whole: a recorder is answering and the cost of
        every call that has ended is counted (event loop)."""
        self._drain()
        return self._down_at is None and not self._pending

    def settled(self) -> bool:
        """Whether a budget check can decide now: the spend is confirmed, or has stayed unconfirmed
        longer than SETTLE_SECONDS (waiting longer would not help; the check then decides by the
        budgets' `on_unconfirmed`)."""
        if self.confirmed():
            return True
        since = min([at for at, _ in self._pending.values()] + [self._down_at or math.inf])
        return time.monotonic() - since >= SETTLE_SECONDS

    def unconfirmed_for(self) -> float:
        """Seconds since the spend became unconfirmed (0 when it is confirmed)."""
        if self.confirmed():
            return 0.0
        since = min([at for at, _ in self._pending.values()] + [self._down_at or math.inf])
        return time.monotonic() - since

    def spent(self, budget: Budget) -> float:
        """The budget's spend so far: this session's, plus the other sessions' for day and month."""
        day = utc_today()
        own = spent(budget, self.own, day=day, session_id=self.session_id)
        if budget.scope in ("session", "team") or (budget.scope == "day" and self.others_day != day):
            return own  # a new day began since the last refresh: the others have spent nothing yet
        if budget.scope == "month" and self.others_day[:7] != day[:7]:
            return own
        return own + self.others.get(budget.name, 0.0)
