"""main.db: the session index and its per-session rollup.

A rollup recomputes a session's totals and its `ai_usage`, `tool_usage`, `mcp_usage` and `spend` rows
from its session.db and replaces what main.db held (idempotent, never incremental; `spend` is
insert-only: a new `spend_entries` row for each key that changed, see `record_spend`). It runs
when a session stops, when a dead `running` session is found at the next start (`crashed`),
and from the CLI.
"""

from __future__ import annotations

import os
import socket
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from capsem import __version__, health
from capsem.ids import utc_now
from capsem.outcomes import FAILED_MODEL_CALL, OTHER_ERRORS_SQL, refused_placeholders
from capsem.paths import main_db_path, session_db_path
from capsem.store.schema import connect, open_main_db

if TYPE_CHECKING:  # the scrubber and the signed chain are imported where a session starts or
    # ends: the CLI's readers of main.db (list-sessions) start ~0.07 s of CPU sooner
    from capsem.redact import Scrubber

# The token breakdown and the cost by token type of each model call, read from its JSON columns
# (a value that is not valid JSON counts as no breakdown: inspect-session reports it).
_CALLS = """
WITH calls AS (
  SELECT *, CASE WHEN json_valid(usage_details) THEN usage_details END AS u,
            CASE WHEN json_valid(cost_details) THEN cost_details END AS d
  FROM model_calls
), parts AS (
  SELECT *,
    COALESCE(json_extract(u, '$.cache_read'), 0) AS cache_read,
    COALESCE(json_extract(u, '$.cache_write'), 0) AS cache_write,
    COALESCE(json_extract(u, '$.reasoning'), 0) AS reasoning,
    COALESCE(CAST(json_extract(d, '$.parts.cache_write') AS REAL), 0) AS cache_write_cost,
    COALESCE(CAST(json_extract(d, '$.parts.cache_read') AS REAL), 0) AS cache_read_cost,
    COALESCE(CAST(COALESCE(json_extract(d, '$.parts.output'), json_extract(d, '$.output')) AS REAL), 0)
      AS output_cost,
    COALESCE(CAST(json_extract(d, '$.parts.reasoning') AS REAL), 0) AS reasoning_cost
  FROM calls
), usage AS (
  SELECT *, estimated_cost_usd - cache_write_cost - cache_read_cost - output_cost - reasoning_cost AS input_cost
  FROM parts
)
"""

CALL_USAGE_SQL = _CALLS + "SELECT * FROM usage"
"""Every model_calls column of each call, plus its token breakdown (`cache_read`, `cache_write`,
`reasoning`) and its cost by token type (`input_cost`, `cache_write_cost`, `cache_read_cost`,
`output_cost`, `reasoning_cost`; calls priced before the split was recorded have their whole input
cost, cache included, under input). Append `WHERE`/`ORDER BY` as needed."""

TOTALS_SQL = (
    _CALLS
    + f""", call_totals AS (
  SELECT
    COALESCE(SUM(input_tokens), 0) AS total_input_tokens,
    COALESCE(SUM(output_tokens), 0) AS total_output_tokens,
    COALESCE(SUM(cache_read), 0) AS total_cache_read_tokens,
    COALESCE(SUM(cache_write), 0) AS total_cache_write_tokens,
    COALESCE(SUM(reasoning), 0) AS total_reasoning_tokens,
    COALESCE(SUM(estimated_cost_usd), 0) AS total_estimated_cost,
    COUNT(*) AS total_model_calls,
    COALESCE(SUM(estimated_cost_usd IS NULL AND COALESCE(input_tokens, output_tokens) IS NOT NULL), 0)
      AS unpriced_calls,
    COALESCE(SUM({FAILED_MODEL_CALL}), 0) AS failed_calls
  FROM usage
)
SELECT
  (SELECT COUNT(*) FROM net_events) AS total_requests,
  (SELECT COUNT(*) FROM net_events WHERE decision IN ('allowed', 'warned')) AS allowed_requests,
  (SELECT COUNT(*) FROM net_events WHERE decision = 'denied') AS denied_requests,
  (SELECT COUNT(*) FROM net_events WHERE decision = 'error') AS error_requests,
  t.total_input_tokens, t.total_output_tokens, t.total_cache_read_tokens, t.total_cache_write_tokens,
  t.total_reasoning_tokens, t.total_estimated_cost, t.total_model_calls, t.unpriced_calls,
  (SELECT COUNT(*) FROM tool_calls) AS total_tool_calls,
  (SELECT COUNT(*) FROM mcp_calls) AS total_mcp_calls,
  (SELECT COUNT(*) FROM fs_events) AS total_file_events,
  (SELECT COUNT(*) FROM net_events WHERE decision = 'warned') AS warned_requests,
  (SELECT COUNT(*) FROM net_events WHERE decision = 'asked') AS asked_requests,
  t.failed_calls + {OTHER_ERRORS_SQL} AS total_errors
FROM call_totals t
"""
)
"""The session's totals in main.db, model_calls read in one pass (its rows hold the answers' text, which
every pass over a later column walks through). A call is unpriced when it has tokens but no known
price (a failed call without tokens costs nothing and is not unpriced)."""

AI_USAGE_COLUMNS = ("provider", "model", "call_count", "input_tokens", "output_tokens", "estimated_cost",
                    "total_duration_ms", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
                    "input_cost", "cache_write_cost", "cache_read_cost", "output_cost", "reasoning_cost",
                    "cache_break_cost")  # fmt: skip
"""The columns of main.db's `ai_usage` (after `session_id`): `AI_USAGE_SQL`'s, in order, then what the
model's cache breaks cost (`cache_break_costs`, a table older session.dbs lack)."""

AI_USAGE_SQL = (
    _CALLS
    + """
SELECT provider, COALESCE(model, '') AS model, COUNT(*) AS call_count,
       COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),
       COALESCE(SUM(estimated_cost_usd), 0), COALESCE(SUM(duration_ms), 0),
       SUM(cache_read), SUM(cache_write), SUM(reasoning),
       COALESCE(SUM(input_cost), 0), SUM(cache_write_cost), SUM(cache_read_cost), SUM(output_cost),
       SUM(reasoning_cost)
FROM usage GROUP BY provider, COALESCE(model, '')
"""
)
"""Per provider and model: calls, tokens (inclusive input and output, then cache reads, cache
writes and reasoning) and cost (total, then by token type: uncached input, cache writes, cache
reads, output other than reasoning, reasoning)."""

# Tool time = from the end of the model call that asked for the tool to the start of the
# model call that carried its result: the time the agent spent running it.
_TOOL_USAGE_SQL = """
WITH first_response AS (
  SELECT call_id, MIN(id) AS id FROM tool_responses GROUP BY call_id
)
SELECT tc.tool_name, COUNT(*) AS call_count,
       COALESCE(SUM(LENGTH(CAST(tc.arguments AS BLOB))), 0)
         + COALESCE(SUM(tr.content_bytes), 0) AS total_bytes,
       COALESCE(SUM(MAX(0, CAST(ROUND(
         (julianday(mr.timestamp) - julianday(mc.timestamp)) * 86400000.0 - mc.duration_ms) AS INTEGER))), 0)
FROM tool_calls tc
JOIN model_calls mc ON mc.id = tc.model_call_id
LEFT JOIN first_response fr ON fr.call_id = tc.call_id
LEFT JOIN tool_responses tr ON tr.id = fr.id
LEFT JOIN model_calls mr ON mr.id = tr.model_call_id
GROUP BY tc.tool_name
"""

_MCP_USAGE_SQL = """
SELECT server_name, COALESCE(tool_name, method, ''), COUNT(*),
       COALESCE(SUM(bytes_sent + bytes_received), 0), COALESCE(SUM(duration_ms), 0)
FROM mcp_calls GROUP BY server_name, COALESCE(tool_name, method, '')
"""


SpendKey = tuple[str, str, str, str]
"""(UTC day, provider, model or "", host or "")."""


class SpendTotals:
    """A session's spend by `SpendKey`: its calls and their cost. The one definition of the spend
    ledger's rows: the recorder adds each model call as it builds it (`addons/recorder/spend.py`),
    the rollup the calls its session.db holds (`of_session`)."""

    def __init__(self) -> None:
        self.by_key: dict[SpendKey, list[float]] = {}
        """key -> [cost, calls]."""

    def add(
        self, timestamp: str, provider: str, model: str | None, host: str | None, cost: float | None
    ) -> None:
        """Count a model call (its day is the UTC day it started, as in `model_calls.timestamp`)."""
        total = self.by_key.setdefault((timestamp[:10], provider, model or "", host or ""), [0.0, 0])
        total[0] += cost or 0.0
        total[1] += 1

    def rows(self) -> list[tuple]:
        """`(day, provider, model, host, calls, cost)` rows, what `record_spend` takes."""
        return [(*key, int(total[1]), total[0]) for key, total in self.by_key.items()]

    @classmethod
    def of_session(cls, conn: sqlite3.Connection) -> SpendTotals:
        """The spend of the model calls a session.db holds (in the order they were written)."""
        totals = cls()
        for row in conn.execute("SELECT timestamp, provider, model, host, estimated_cost_usd FROM model_calls "
                                "ORDER BY id"):  # fmt: skip
            totals.add(*row)
        return totals


def record_spend(main: sqlite3.Connection, session_id: str, rows: list[tuple]) -> None:
    """Make main.db `spend` say `rows` (`(day, provider, model, host, calls, cost)`, a session's
    whole spend) by inserting a `spend_entries` row for each key whose value changed and a
    `call_count` 0 row for each key no longer there: the ledger is insert-only (the caller holds
    the transaction). The recorder's running totals and the rollup's final ones both end here."""
    current = {
        r[:4]: r[4:]
        for r in main.execute(
            "SELECT day, provider, model, host, call_count, estimated_cost FROM spend WHERE session_id = ?",
            (session_id,),
        )
    }
    wanted = {tuple(r[:4]): tuple(r[4:]) for r in rows}
    changed = [(*k, *v) for k, v in wanted.items() if current.get(k) != v]
    changed += [(*k, 0, 0.0) for k in current.keys() - wanted.keys()]
    main.executemany(
        "INSERT INTO spend_entries (session_id, day, provider, model, host, call_count, estimated_cost) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(session_id, *r) for r in changed],
    )


CAPTURE_COUNTS = {
    "capture_rows_lost": "rows could not be written",
    "capture_dropped_chunks": "body chunks were not recorded (the recorder fell behind)",
    "capture_dropped_messages": "flow messages were not recorded (the recorder fell behind)",
    "capture_commit_failures": "commits failed",
    "capture_failed_messages": "flows could not be recorded",
    "capture_missed_flows": "flows were not recorded, or not whole (their recorder process died)",
    "capture_recorder_restarts": "recorder restarts (its process died and was started again)",
}
"""session_meta counters of capture problems (written by the recorder), and what each means."""
_NOT_LOST = ("capture_commit_failures", "capture_recorder_restarts")
"""Counters of trouble that loses nothing by itself (what it lost is counted by the others)."""
NOT_RECORDED_END = (
    "the session's end was not recorded (its processes died or the disk was full): rows of its last "
    "moments may be missing"
)
"""`capture_error` of a session found `running` after its processes had gone (`capture_status` unknown)."""


def capture_health(meta: dict[str, str]) -> tuple[str, int, str | None]:
    """(`ok` | `degraded`, rows lost, a one-line description) from a session's `capture_*` meta values.

    `degraded` means something was not recorded; failed commits whose rows were written by a
    later attempt leave the status `ok`, with the description saying what happened.
    """
    counts = {key: int(meta.get(key) or 0) for key in CAPTURE_COUNTS}
    problems = [f"{n} {CAPTURE_COUNTS[key]}" for key, n in counts.items() if n]
    if not problems:
        return "ok", 0, None
    last = meta.get("capture_last_error")
    lost = any(n for key, n in counts.items() if key not in _NOT_LOST)
    text = "; ".join(problems) + (f" (last error: {last})" if last else "")
    return (
        ("degraded" if lost else "ok"),
        counts["capture_rows_lost"],
        text if lost else text + "; nothing was lost",
    )


def capture_meta(conn: sqlite3.Connection, folder: Path | None) -> dict[str, str]:
    """A session's `capture_*` values: session_meta's, merged with the health file the recorder
    keeps beside session.db for when the disk is full (`capsem/health.py`)."""
    meta = dict(conn.execute("SELECT key, value FROM session_meta WHERE key LIKE 'capture%'").fetchall())
    return health.merged(meta, folder)


@dataclass(frozen=True)
class SessionRow:
    id: str
    status: str
    pid: int | None
    pid_started_at: float | None


def open_main(path: Path | None = None) -> sqlite3.Connection:
    return open_main_db(path or main_db_path())


def register_session(
    main: sqlite3.Connection,
    session_id: str,
    *,
    mode: str,
    command: str | None,
    created_at: str,
    scrubber: Scrubber | None = None,
    emulated: bool = False,
) -> None:
    """Insert the `running` row for a session owned by this process (its command line scrubbed by
    `scrubber`, the configured rules' one; the shipped rules' without it); `emulated`: its answers
    cost nothing (left out of budgets and cost totals)."""
    if scrubber is None:
        from capsem.redact import Scrubber

        scrubber = Scrubber()
    me = psutil.Process()
    main.execute(
        """INSERT INTO sessions (id, mode, command, status, created_at, capsem_version, pid,
                                 pid_started_at, hostname, emulated)
           VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?, ?)
           ON CONFLICT(id) DO UPDATE SET status='running', stopped_at=NULL, pid=excluded.pid,
                                         pid_started_at=excluded.pid_started_at""",
        (
            session_id,
            mode,
            scrubber.scrub_command(command),
            created_at,
            __version__,
            os.getpid(),
            me.create_time(),
            socket.gethostname(),
            int(emulated),
        ),
    )


def cache_break_costs(conn: sqlite3.Connection) -> dict[tuple[str, str], float]:
    """(provider, model) -> what its calls' prompt-cache breaks cost over reading from the cache."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'cache_breaks'").fetchone():
        return {}
    rows = conn.execute("""SELECT m.provider, COALESCE(m.model, ''), SUM(COALESCE(b.extra_cost_usd, 0))
                           FROM cache_breaks b JOIN model_calls m ON m.id = b.model_call_id
                           GROUP BY m.provider, COALESCE(m.model, '')""")  # fmt: skip
    return {(provider, model): cost for provider, model, cost in rows}


def read_totals(src: sqlite3.Connection) -> dict:
    """A session's totals as main.db's `sessions` columns hold them, read from its session.db: the one
    reading behind the rollup and every live view of a running session (`live_totals`)."""
    totals = dict(src.execute(TOTALS_SQL).fetchone())
    totals["refused_placeholders"] = refused_placeholders(src)  # a table older session.dbs lack
    return totals


def live_totals(session_id: str) -> dict | None:
    """A running session's totals read now from its session.db (None when it cannot be read)."""
    db_path = session_db_path(session_id)
    if not db_path.is_file():
        return None
    try:
        src = connect(db_path, readonly=True)
        try:
            return read_totals(src)
        finally:
            src.close()
    except sqlite3.Error:
        return None


def rollup(main: sqlite3.Connection, session_id: str, db_path: Path | None = None) -> bool:
    """Recompute a session's totals and usage rows from its session.db.

    Returns False (and changes nothing) when the session.db does not exist.
    """
    db_path = db_path or session_db_path(session_id)
    if not db_path.is_file():
        return False
    src = connect(db_path, readonly=True)
    try:
        totals = read_totals(src)
        broke = cache_break_costs(src)
        ai = [(*r, broke.get((r[0], r[1]), 0.0)) for r in src.execute(AI_USAGE_SQL).fetchall()]
        totals["lost_to_cache_breaks"] = sum(broke.values())
        tools = src.execute(_TOOL_USAGE_SQL).fetchall()
        mcp = src.execute(_MCP_USAGE_SQL).fetchall()
        spend = SpendTotals.of_session(src).rows()
        meta = capture_meta(src, db_path.parent)
    finally:
        src.close()
    status, lost, problem = capture_health(meta)
    assignments = ", ".join(f"{k} = :{k}" for k in totals)
    with main:
        main.execute("BEGIN IMMEDIATE")
        main.execute(
            f"""UPDATE sessions SET {assignments}, rolled_up_at = :now, capture_rows_lost = :lost,
                   capture_status = CASE WHEN capture_status = 'failed' THEN 'failed' ELSE :status END,
                   capture_error = CASE WHEN capture_status = 'failed' THEN capture_error ELSE :problem END
                WHERE id = :id""",
            {
                **totals,
                "now": utc_now(),
                "id": session_id,
                "lost": lost,
                "status": status,
                "problem": problem,
            },
        )
        ai_columns = "session_id, " + ", ".join(AI_USAGE_COLUMNS)
        for table, rows, columns in (("ai_usage", ai, ai_columns), ("tool_usage", tools, None),
                                     ("mcp_usage", mcp, None)):  # fmt: skip
            main.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            if rows:
                marks = ", ".join("?" * (len(rows[0]) + 1))
                names = f" ({columns})" if columns else ""
                main.executemany(
                    f"INSERT INTO {table}{names} VALUES ({marks})", [(session_id, *r) for r in rows]
                )
        record_spend(main, session_id, spend)
    return True


def finish_session(main: sqlite3.Connection, session_id: str, status: str = "stopped") -> None:
    """Roll a session up, mark it `stopped` (or `crashed`) with its stop time, and record its last
    signed head in main.db's chain of sessions (`capsem/store/sessions_chain.py`)."""
    rollup(main, session_id)
    main.execute(
        "UPDATE sessions SET status = ?, stopped_at = COALESCE(stopped_at, ?) WHERE id = ?",
        (status, utc_now(), session_id),
    )
    from capsem.store.sessions_chain import record_end

    record_end(main, session_id, session_db_path(session_id))


def set_exit_code(main: sqlite3.Connection, session_id: str, code: int) -> None:
    """Store the exit code of the agent a `capsem run` session ran."""
    main.execute("UPDATE sessions SET exit_code = ? WHERE id = ?", (code, session_id))


def process_alive(pid: int | None, started_at: float | None) -> bool:
    """Whether the process that registered a session (pid and start time) still runs."""
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        return started_at is None or abs(proc.create_time() - started_at) < 1.0
    except psutil.Error:
        return False


def _alive(row: SessionRow) -> bool:
    return process_alive(row.pid, row.pid_started_at)


def recover_crashed(main: sqlite3.Connection, *, exclude: str | None = None) -> list[str]:
    """Mark `running` sessions whose process is gone as `crashed` and roll them up. Nobody
    recorded their end, so their capture is never `ok`: `failed` when the rollup found a loss
    (session_meta or the health file), else `unknown`."""
    rows = [
        SessionRow(r["id"], r["status"], r["pid"], r["pid_started_at"])
        for r in main.execute("SELECT id, status, pid, pid_started_at FROM sessions WHERE status = 'running'")
    ]
    crashed = [r.id for r in rows if r.id != exclude and not _alive(r)]
    for session_id in crashed:
        finish_session(main, session_id, status="crashed")
        main.execute(
            """UPDATE sessions SET capture_status = CASE WHEN capture_status IN ('degraded', 'failed')
                                                         THEN 'failed' ELSE 'unknown' END,
                      capture_error = COALESCE(capture_error || '; ', '') || ? WHERE id = ?""",
            (NOT_RECORDED_END, session_id),
        )
    return crashed
