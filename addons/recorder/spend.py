"""This session's spend, added up in the recorder process (see `addons/proxy/spend.py` for the
budgets' side): reported to mitmdump after each batch, and kept in main.db `spend` after each
commit (insert-only: `capsem.rollup.record_spend`) so that every other capsem on the machine
counts a running session in its budgets."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from addons.budgets import SpendRow
from capsem.rollup import SpendTotals, record_spend
from capsem.store.rows import ModelCall
from capsem.store.schema import connect

logger = logging.getLogger(__name__)


class SessionSpend:
    """This session's spend as the recorder builds its rows (recorder process, one thread)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.totals = SpendTotals()
        self._done: dict[str, int] = {}
        self._reported = self._saved = True
        self._main: sqlite3.Connection | None = None

    def load(self, conn: sqlite3.Connection) -> None:
        """Start from the calls session.db already holds (a session id used again, or a recorder
        restarted after its predecessor died); the first report says so at once."""
        self.totals = SpendTotals.of_session(conn)
        self._saved = not self.totals.by_key
        self._reported = False

    def add(self, row: ModelCall) -> None:
        """Count a model call."""
        self.totals.add(row.timestamp, row.provider, row.model, row.host, row.estimated_cost_usd)
        self._reported = self._saved = False

    def counted(self, flow_key: str, seq: int = 0) -> None:
        """A flow's cost (if any) is counted, up to its `seq`-th server message for a WebSocket
        (`<key>#ws`): the hooks may stop waiting for it."""
        self._done[flow_key] = max(seq, self._done.get(flow_key, 0))
        self._reported = False

    def rows(self) -> list[SpendRow]:
        return [(self.session_id, *key, total[0]) for key, total in self.totals.by_key.items()]

    def report(self) -> str | None:
        """The `spend` status line when something changed since the last one, else None."""
        if self._reported:
            return None
        self._reported = True
        done, self._done = [[key, seq] for key, seq in self._done.items()], {}
        totals = [[*key, round(t[0], 12), t[1]] for key, t in self.totals.by_key.items()]
        return "spend " + json.dumps({"done": done, "totals": totals}, separators=(",", ":"))

    def save(self, main_db: Path) -> None:
        """Bring this session's rows of main.db `spend` up to date (when they changed; new
        `spend_entries` rows, see `capsem.rollup.record_spend`); a failure is logged and retried at
        the next commit."""
        if self._saved:
            return
        try:
            if self._main is None:
                self._main = connect(main_db)
            write_spend(self._main, self.session_id, self.totals.rows())
            self._saved = True
        except sqlite3.Error as exc:
            self.close()
            logger.warning("capsem: updating the spend ledger in %s failed (%s); retried at the next commit",
                           main_db, exc)  # fmt: skip

    def close(self) -> None:
        if self._main is not None:
            self._main.close()
            self._main = None


def write_spend(main: sqlite3.Connection, session_id: str, rows: Sequence[tuple]) -> None:
    """A session's whole spend, `(day, provider, model, host, calls, cost)` rows, recorded in one
    transaction (only what changed is inserted)."""
    with main:
        main.execute("BEGIN IMMEDIATE")
        record_spend(main, session_id, list(rows))
