"""The anomalies of the samples a session.db holds, as rows to add (read-only: whoever writes
session.db adds them, the recorder or `assembler/offline_write.py`)."""

from __future__ import annotations

import itertools
import json
import sqlite3

from addons.feed import ProcAnomaly
from assembler.procdiag.detect import Anomaly, detect_process
from capsem.ids import utc_now

CLIENT = "procdiag"
"""The sampler's name at the recorder's inbox (and the prefix of its `session_meta` keys)."""


def detect_stored(conn: sqlite3.Connection, agent_pid: int | None) -> tuple[list[Anomaly], list[ProcAnomaly]]:
    """(every anomaly in `conn`'s samples, the rows of those `proc_anomalies` does not hold yet:
    same kind, process and start). `agent_pid` None: the one recorded in session_meta."""
    if agent_pid is None:
        row = conn.execute("SELECT value FROM session_meta WHERE key = 'procdiag_agent_pid'").fetchone()
        agent_pid = int(row[0]) if row and str(row[0]).isdigit() else None
    rows = conn.execute("SELECT * FROM proc_samples ORDER BY pid, started_at, ts, seq")
    found: list[Anomaly] = []
    for (pid, _), series in itertools.groupby(rows, key=lambda r: (r["pid"], r["started_at"])):
        found += detect_process([dict(r) for r in series], is_agent=pid == agent_pid)
    found.sort(key=lambda a: (a.first_ts, a.pid, a.kind))
    stored = {tuple(r) for r in conn.execute("SELECT kind, pid, first_ts FROM proc_anomalies")}
    now = utc_now()
    new = [ProcAnomaly(a.kind, a.severity, a.pid, a.name, a.first_ts, a.last_ts, a.samples, a.value, a.threshold,
                       json.dumps(a.detail, sort_keys=True), now)
           for a in found if (a.kind, a.pid, a.first_ts) not in stored]  # fmt: skip
    return found, new
