"""`capsem inspect-session`: integrity and data-quality checks on one session.

Each check is a small function `conn -> list[Finding]` so tests can call them one by one.
Severities: `error` (data is wrong or missing), `warning` (suspicious, worth a look), `info`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from assembler.sessiondb import db_file
from capsem.paths import main_db_path
from capsem.rollup import TOTALS_SQL
from capsem.schema import SESSION_MIGRATIONS, SESSION_TABLES, connect, migrate

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    severity: Severity
    check: str
    message: str


def _count(conn: sqlite3.Connection, sql: str, params: tuple = ()) -> int:
    return int(conn.execute(sql, params).fetchone()[0] or 0)


def _expected_columns() -> dict[str, list[str]]:
    fresh = sqlite3.connect(":memory:", isolation_level=None)
    migrate(fresh, SESSION_MIGRATIONS)
    cols = {t: [r[1] for r in fresh.execute(f"PRAGMA table_info({t})")] for t in SESSION_TABLES}
    fresh.close()
    return cols


def check_schema(conn: sqlite3.Connection) -> list[Finding]:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    out = []
    for table, columns in _expected_columns().items():
        if table not in tables:
            out.append(Finding("error", "schema", f"table {table} is missing"))
            continue
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        missing = [c for c in columns if c not in have]
        if missing:
            out.append(Finding("error", "schema", f"{table} lacks columns {', '.join(missing)}"))
    return out


def check_integrity(conn: sqlite3.Connection) -> list[Finding]:
    result = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    if result != ["ok"]:
        return [Finding("error", "integrity", "PRAGMA integrity_check: " + "; ".join(result[:5]))]
    return []


def check_tools(conn: sqlite3.Connection) -> list[Finding]:
    out = []
    last_call = _count(conn, "SELECT MAX(model_call_id) FROM tool_calls")
    orphans = conn.execute(
        "SELECT tc.call_id, tc.tool_name, tc.model_call_id FROM tool_calls tc WHERE tc.origin != 'server' "
        "AND NOT EXISTS (SELECT 1 FROM tool_responses tr WHERE tr.call_id = tc.call_id)"
    ).fetchall()
    pending = [o for o in orphans if o[2] == last_call]
    lost = [o for o in orphans if o[2] != last_call]
    if lost:
        names = ", ".join(sorted({o[1] for o in lost}))
        out.append(
            Finding("warning", "tool lifecycle", f"{len(lost)} tool calls never got a result ({names})")
        )
    if pending:
        out.append(Finding("info", "tool lifecycle", f"{len(pending)} tool calls of the last model call have no "
                                                     "result yet (the session may have ended there)"))  # fmt: skip
    n = _count(conn, "SELECT COUNT(*) FROM tool_responses tr WHERE NOT EXISTS "
                     "(SELECT 1 FROM tool_calls tc WHERE tc.call_id = tr.call_id)")  # fmt: skip
    if n:
        out.append(
            Finding("warning", "tool lifecycle", f"{n} tool results answer a call id no model call made")
        )
    for table in ("tool_calls", "tool_responses"):
        n = _count(conn, f"SELECT COUNT(*) FROM {table} t WHERE NOT EXISTS "
                         "(SELECT 1 FROM model_calls m WHERE m.id = t.model_call_id)")  # fmt: skip
        if n:
            out.append(Finding("error", "references", f"{n} {table} rows point at missing model_calls"))
    n = _count(
        conn, "SELECT COUNT(*) FROM (SELECT call_id FROM tool_calls GROUP BY call_id HAVING COUNT(*) > 1)"
    )
    if n:
        out.append(
            Finding("warning", "tool lifecycle", f"{n} call ids appear in more than one tool_calls row")
        )
    return out


def check_model_calls(conn: sqlite3.Connection) -> list[Finding]:
    out = []
    n = _count(conn, "SELECT COUNT(*) FROM net_events n WHERE n.provider IS NOT NULL AND n.decision != 'denied' "
                     "AND NOT EXISTS (SELECT 1 FROM model_calls m WHERE m.net_event_id = n.id)")  # fmt: skip
    if n:
        out.append(Finding("error", "provider traffic", f"{n} model-call flows have no model_calls row"))
    simple = [
        ("warning", "model", "model IS NULL", "model calls without a model"),
        ("warning", "tokens", "input_tokens IS NULL AND output_tokens IS NULL AND status_code BETWEEN 200 AND 299",
         "successful model calls without token counts"),
        ("warning", "pricing", "estimated_cost_usd IS NULL AND COALESCE(input_tokens, output_tokens) IS NOT NULL",
         "model calls with tokens but no known price (unpriced model or provider)"),
        ("warning", "streams", "complete = 0 AND status_code BETWEEN 200 AND 299",
         "responses ended before their terminal event (truncated or errored mid-stream)"),
        ("warning", "parsing", "parse_errors > 0", "responses contained events capsem could not parse"),
        ("info", "http errors", "status_code >= 400", "model calls got an HTTP error"),
        ("info", "estimates", "usage_details LIKE '%\"estimated\"%'", "model calls have tokenizer-estimated usage"),
    ]  # fmt: skip
    for severity, check, where, what in simple:
        n = _count(conn, f"SELECT COUNT(*) FROM model_calls WHERE {where}")
        if n:
            out.append(Finding(severity, check, f"{n} {what}"))  # type: ignore[arg-type]
    bad_json = breakdown = 0
    for details, inp, outp in conn.execute(
        "SELECT usage_details, input_tokens, output_tokens FROM model_calls"
    ):
        try:
            d = json.loads(details) if details else {}
            if not isinstance(d, dict):
                raise ValueError
        except ValueError:
            bad_json += 1
            continue
        cached = (d.get("cache_read") or 0) + (d.get("cache_write") or 0)
        if (inp is not None and cached > inp) or (outp is not None and (d.get("reasoning") or 0) > outp):
            breakdown += 1
    if bad_json:
        out.append(Finding("error", "usage", f"{bad_json} usage_details values are not JSON objects"))
    if breakdown:
        out.append(Finding("warning", "usage", f"{breakdown} usage breakdowns do not add up (cache > input or "
                                               "reasoning > output)"))  # fmt: skip
    n = _count(conn, "SELECT COUNT(*) FROM net_events WHERE decode_error IS NOT NULL")
    if n:
        out.append(Finding("warning", "decoding", f"{n} bodies could not be decoded as declared"))
    return out


def check_rollup(conn: sqlite3.Connection, session_id: str) -> list[Finding]:
    if not main_db_path().is_file():
        return [Finding("warning", "rollup", "main.db does not exist")]
    main = connect(main_db_path(), readonly=True)
    try:
        row = main.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
    finally:
        main.close()
    if row is None:
        return [Finding("warning", "rollup", f"session {session_id} has no row in main.db")]
    if row["status"] == "running":
        return [Finding("info", "rollup", "session is still running; totals are rolled up when it stops")]
    actual = dict(conn.execute(TOTALS_SQL).fetchone())
    diffs = [f"{k} {row[k]} != {v}" for k, v in actual.items() if k in row.keys() and _differs(row[k], v)]  # noqa: SIM118
    if diffs:
        return [Finding("error", "rollup", "main.db totals differ from session.db: " + ", ".join(diffs))]
    return []


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return abs((a or 0) - (b or 0)) > 1e-9
    return a != b


def check_files(session_id: str) -> list[Finding]:
    path = db_file(session_id)
    wal = path.with_name("session.db-wal") if path is not None and path.name == "session.db" else None
    if wal is not None and wal.exists() and wal.stat().st_size:
        return [Finding("info", "files", "a -wal file is left (session running, or not shut down cleanly)")]
    return []


CHECKS: list[Callable[[sqlite3.Connection], list[Finding]]] = [
    check_schema, check_integrity, check_tools, check_model_calls,
]  # fmt: skip


def inspect_session(conn: sqlite3.Connection, session_id: str) -> list[Finding]:
    """Every check, in order."""
    findings = [f for check in CHECKS for f in _safe(check, conn)]
    return findings + _safe(lambda c: check_rollup(c, session_id), conn) + check_files(session_id)


def _safe(check: Callable[[sqlite3.Connection], list[Finding]], conn: sqlite3.Connection) -> list[Finding]:
    try:
        return check(conn)
    except sqlite3.Error as exc:
        return [Finding("error", getattr(check, "__name__", "check"), f"check could not run: {exc}")]


def table_counts(conn: sqlite3.Connection) -> dict[str, int | None]:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return {t: _count(conn, f"SELECT COUNT(*) FROM {t}") if t in tables else None for t in SESSION_TABLES}


def tool_usage(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT tool_name, origin, COUNT(*) AS calls FROM tool_calls GROUP BY tool_name, origin ORDER BY calls DESC"
    ).fetchall()


def mcp_usage(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT server_name, tool_name, decision, COUNT(*) AS calls, ROUND(AVG(duration_ms), 1) AS avg_ms "
        "FROM mcp_calls GROUP BY server_name, tool_name, decision ORDER BY calls DESC"
    ).fetchall()
