"""`capsem inspect-session`: integrity and data-quality checks on one session.

Each check is a small function `conn -> list[Finding]` (the rollup and file checks also take
the session's main.db row) so tests can call them one by one. Severities: `error` (data is
wrong or missing), `warning` (suspicious, worth a look), `info` (worth knowing, not a fault).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from addons.budgets import RULE_PREFIX, UNCONFIRMED
from assembler.cli_support import counted
from assembler.failures import Failure, model_failures, network_failures, tool_failures
from assembler.sessiondb import DB_NAME, db_file, main_row, open_main, open_session
from assembler.sessions import as_shown
from capsem.rollup import (
    AI_USAGE_COLUMNS,
    AI_USAGE_SQL,
    NOT_RECORDED_END,
    TOTALS_SQL,
    capture_health,
    capture_meta,
)
from capsem.store.schema import SESSION_MIGRATIONS, SESSION_TABLES, migrate

_OUTCOME_COUNTS = frozenset({"total_errors", "warned_requests", "asked_requests", "refused_placeholders"})
"""Totals added by main.db m009: sessions rolled up before it hold zeros, which is no damage."""

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")

# The columns of the Capsem seed (the contract): missing one is an error.
SEED_COLUMNS: dict[str, tuple[str, ...]] = {
    "net_events": ("id", "timestamp", "domain", "port", "decision", "process_name", "pid", "method", "path",
                   "query", "status_code", "bytes_sent", "bytes_received", "duration_ms", "matched_rule",
                   "request_headers", "response_headers", "request_body_preview", "response_body_preview",
                   "conn_type"),
    "model_calls": ("id", "timestamp", "provider", "model", "process_name", "pid", "method", "path", "stream",
                    "system_prompt_preview", "messages_count", "tools_count", "request_bytes",
                    "request_body_preview", "message_id", "status_code", "text_content", "thinking_content",
                    "stop_reason", "input_tokens", "output_tokens", "duration_ms", "response_bytes",
                    "estimated_cost_usd", "trace_id", "usage_details"),
    "tool_calls": ("id", "model_call_id", "call_index", "call_id", "tool_name", "arguments", "origin",
                   "mcp_call_id"),
    "tool_responses": ("id", "model_call_id", "call_id", "content_preview", "is_error"),
    "mcp_calls": ("id", "timestamp", "server_name", "method", "tool_name", "request_id", "request_preview",
                  "response_preview", "decision", "duration_ms", "error_message", "process_name", "bytes_sent",
                  "bytes_received"),
    "fs_events": ("id", "timestamp", "action", "path", "size"),
}  # fmt: skip


@dataclass(frozen=True)
class Finding:
    severity: Severity
    check: str
    message: str


def _count(conn: sqlite3.Connection, sql: str, params: tuple = ()) -> int:
    return int(conn.execute(sql, params).fetchone()[0] or 0)


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _capsem_columns() -> dict[str, list[str]]:
    """Every column the current capsem schema has, per table."""
    fresh = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrate(fresh, SESSION_MIGRATIONS)
        return {t: [r[1] for r in fresh.execute(f"PRAGMA table_info({t})")] for t in SESSION_TABLES}
    finally:
        fresh.close()


# --- checks -----------------------------------------------------------------------------------


def check_schema(conn: sqlite3.Connection) -> list[Finding]:
    """Missing tables or seed columns (errors); missing capsem columns (warning: older schema)."""
    tables = _tables(conn)
    out = []
    capsem = _capsem_columns()
    for table in SESSION_TABLES:
        if table not in tables:
            out.append(Finding("error", "schema", f"table {table} is missing"))
            continue
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        missing = [c for c in SEED_COLUMNS[table] if c not in have]
        if missing:
            out.append(Finding("error", "schema", f"{table} lacks seed columns {', '.join(missing)}"))
        extra = [c for c in capsem[table] if c not in have and c not in SEED_COLUMNS[table]]
        if extra:
            out.append(Finding("warning", "schema", f"{table} lacks capsem columns {', '.join(extra)} "
                                                    "(older schema; some checks cannot run)"))  # fmt: skip
    return out


def check_integrity(conn: sqlite3.Connection) -> list[Finding]:
    """`PRAGMA integrity_check` (a file too damaged to run it is an error too)."""
    try:
        result = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        return [Finding("error", "integrity", f"the database file is damaged: {exc}")]
    if result != ["ok"]:
        return [Finding("error", "integrity", "PRAGMA integrity_check: " + "; ".join(result[:5]))]
    return []


def check_tool_lifecycle(conn: sqlite3.Connection) -> list[Finding]:
    """Tool calls without results, results without calls, duplicate call ids.

    Calls made by the session's last model call may legitimately be unanswered (the agent
    stopped there): that is info, not a warning. Server-side tools (run by the provider) never
    get a result from the client and are not counted, nor are the calls a tool rule kept from the
    agent (denied, or asked about and never answered: `check_tool_decisions`).
    """
    out = []
    last_call = _count(conn, "SELECT MAX(id) FROM model_calls")
    orphans = conn.execute(
        "SELECT tc.call_id, tc.tool_name, tc.model_call_id FROM tool_calls tc WHERE tc.origin != 'server' "
        "AND NOT EXISTS (SELECT 1 FROM tool_responses tr WHERE tr.call_id = tc.call_id)"
        f" AND NOT ({_kept_from_agent(conn)})"
    ).fetchall()
    pending = [o for o in orphans if o[2] == last_call]
    lost = [o for o in orphans if o[2] != last_call]
    total = _count(conn, "SELECT COUNT(*) FROM tool_calls WHERE origin != 'server'")
    if lost:
        names = ", ".join(sorted({o[1] for o in lost}))
        out.append(Finding("warning", "tool lifecycle",
                           f"{len(lost)}/{total} tool calls never got a result ({names})"))  # fmt: skip
    if pending:
        out.append(Finding("info", "tool lifecycle", f"{len(pending)} tool calls of the last model call have no "
                                                     "result (the session ended there)"))  # fmt: skip
    n = _count(conn, "SELECT COUNT(*) FROM tool_responses tr WHERE NOT EXISTS "
                     "(SELECT 1 FROM tool_calls tc WHERE tc.call_id = tr.call_id)")  # fmt: skip
    if n:
        out.append(
            Finding("warning", "tool lifecycle", f"{n} tool results answer a call id no model call made")
        )
    n = _count(
        conn, "SELECT COUNT(*) FROM (SELECT call_id FROM tool_calls GROUP BY call_id HAVING COUNT(*) > 1)"
    )
    if n:
        out.append(
            Finding("warning", "tool lifecycle", f"{n} call ids appear in more than one tool_calls row")
        )
    return out


def _kept_from_agent(conn: sqlite3.Connection) -> str:
    """SQL: the tool call `tc` never reached the agent: a tool rule denied it, or asked and had no
    answer (a verdict of the MCP call that ran it does not count: that call did reach the agent)."""
    if "decision_rule" not in {r[1] for r in conn.execute("PRAGMA table_info(tool_calls)")}:
        return "0"
    return ("tc.decision IN ('denied', 'asked') AND NOT EXISTS (SELECT 1 FROM mcp_calls m "
            "WHERE m.id = tc.mcp_call_id AND m.decision = tc.decision)")  # fmt: skip


def check_tool_decisions(conn: sqlite3.Connection) -> list[Finding]:
    """What the tool rules decided (info, per rule and verdict), and a warning for a call they kept
    from the agent that got a result anyway (the agent ran it: the verdict did not hold)."""
    kept = _kept_from_agent(conn)
    if kept == "0":
        return []
    out = []
    for decision, rule, n, names in conn.execute(
        "SELECT decision, decision_rule, COUNT(*), GROUP_CONCAT(DISTINCT tool_name) FROM tool_calls tc "
        "WHERE decision_rule IS NOT NULL AND NOT EXISTS (SELECT 1 FROM mcp_calls m WHERE m.id = tc.mcp_call_id "
        "AND m.decision = tc.decision) GROUP BY decision, decision_rule ORDER BY MIN(id)"
    ):
        out.append(
            Finding("info", "tool rules", f"rule {rule}: {counted(n, 'tool call')} {decision} ({names})")
        )
    ran = conn.execute(
        f"SELECT tc.tool_name, tc.decision, tc.decision_rule FROM tool_calls tc WHERE {kept} "
        "AND EXISTS (SELECT 1 FROM tool_responses tr WHERE tr.call_id = tc.call_id)"
    ).fetchall()
    for name, decision, rule in ran:
        out.append(Finding("warning", "tool rules", f"a {name} call {decision} by rule {rule} got a tool result: "
                           "the agent ran it anyway"))  # fmt: skip
    return out


def check_references(conn: sqlite3.Connection) -> list[Finding]:
    """tool_calls / tool_responses rows whose model_call_id points nowhere."""
    out = []
    for table in ("tool_calls", "tool_responses"):
        n = _count(conn, f"SELECT COUNT(*) FROM {table} t WHERE NOT EXISTS "
                         "(SELECT 1 FROM model_calls m WHERE m.id = t.model_call_id)")  # fmt: skip
        if n:
            out.append(Finding("error", "references", f"{n} {table} rows point at missing model_calls"))
    return out


def check_provider_traffic(conn: sqlite3.Connection) -> list[Finding]:
    """Flows recognised as model calls (net_events.provider set) that produced no model_calls row."""
    # NOT IN over the whole column (one temporary index), not a NOT EXISTS per row: model_calls has
    # no index on net_event_id, and a correlated subquery took quadratic time (minutes on 560 MB)
    n = _count(conn, "SELECT COUNT(*) FROM net_events n WHERE n.provider IS NOT NULL AND n.decision != 'denied' "
                     "AND n.id NOT IN (SELECT net_event_id FROM model_calls WHERE net_event_id IS NOT NULL)")  # fmt: skip
    if n:
        total = _count(conn, "SELECT COUNT(*) FROM net_events WHERE provider IS NOT NULL")
        return [Finding("error", "provider traffic",
                        f"{n}/{total} model-call flows have no model_calls row (parsing may have failed)")]  # fmt: skip
    return []


# (severity, check, WHERE clause on model_calls, what it means)
_MODEL_CALL_RULES: list[tuple[Severity, str, str, str]] = [
    ("warning", "model", "model IS NULL", "model calls without a model"),
    ("warning", "tokens", "input_tokens IS NULL AND output_tokens IS NULL AND status_code BETWEEN 200 AND 299",
     "successful model calls without token counts"),
    ("warning", "tokens", "input_tokens < 0 OR output_tokens < 0 OR duration_ms < 0",
     "model calls with negative token counts or durations"),
    ("warning", "pricing", "estimated_cost_usd IS NULL AND COALESCE(input_tokens, output_tokens) IS NOT NULL",
     "model calls with tokens but no known price (unpriced model or provider)"),
    ("warning", "streams", "complete = 0 AND status_code BETWEEN 200 AND 299",
     "responses ended before their terminal event (truncated or cut mid-stream)"),
    ("warning", "parsing", "parse_errors > 0", "responses contained events capsem could not parse"),
]  # fmt: skip


def check_model_calls(conn: sqlite3.Connection) -> list[Finding]:
    """NULL model or tokens, unpriced models, truncated streams, parse and HTTP errors."""
    out = []
    for severity, check, where, what in _MODEL_CALL_RULES:
        n = _count(conn, f"SELECT COUNT(*) FROM model_calls WHERE {where}")
        if n:
            if n == 1:
                what = what.replace("model calls", "model call").replace("responses", "response")
            out.append(Finding(severity, check, f"{n} {what}"))
    return out


def _listed(items: list[Failure], limit: int = 3) -> str:
    shown = "; ".join(f"{f.where}: {f.message}" for f in items[:limit])
    return shown + (f"; … and {len(items) - limit} more" if len(items) > limit else "")


def check_failures(conn: sqlite3.Connection) -> list[Finding]:
    """Failed model calls and failed requests (connections that never reached the provider
    included) are errors, with their stored error text; tool results the agent marked as errors
    are info (the agent's business, recorded faithfully)."""
    out = []
    model, network, tools = model_failures(conn), network_failures(conn), tool_failures(conn)
    if model:
        out.append(
            Finding("error", "failed calls", f"{counted(len(model), 'model call')} failed: {_listed(model)}")
        )
    if network:
        out.append(Finding("error", "failed requests",
                           f"{counted(len(network), 'request')} failed: {_listed(network)}"))  # fmt: skip
    if tools:
        out.append(Finding("info", "tool errors", f"{counted(len(tools), 'tool result')} marked as errors: "
                                                  f"{_listed(tools)}"))  # fmt: skip
    return out


def check_usage(conn: sqlite3.Connection) -> list[Finding]:
    """usage_details is a JSON object whose breakdown fits the totals; estimated usage is flagged."""
    bad_json = breakdown = estimated = 0
    for details, inp, outp in conn.execute(
        "SELECT usage_details, input_tokens, output_tokens FROM model_calls"
    ):
        try:
            d = json.loads(details) if details else {}
            if not isinstance(d, dict):
                raise ValueError(details)
            cached = _num(d.get("cache_read")) + _num(d.get("cache_write"))
            reasoning = _num(d.get("reasoning"))
        except (ValueError, TypeError):
            bad_json += 1
            continue
        if (inp is not None and cached > inp) or (outp is not None and reasoning > outp):
            breakdown += 1
        if d.get("estimated"):
            estimated += 1
    out = []
    if bad_json:
        out.append(
            Finding("error", "usage", f"{bad_json} usage_details values are not JSON objects with numbers")
        )
    if breakdown:
        out.append(Finding("warning", "usage", f"{breakdown} usage breakdowns do not add up "
                                               "(cache_read + cache_write > input or reasoning > output)"))  # fmt: skip
    if estimated:
        out.append(Finding("info", "usage", f"{estimated} model calls have tokenizer-estimated usage "
                                            "(the provider never reported it)"))  # fmt: skip
    return out


def _num(value: Any) -> float:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(value)
    return value


def check_decoding(conn: sqlite3.Connection) -> list[Finding]:
    """Bodies that could not be decoded as their Content-Encoding declared."""
    n = _count(conn, "SELECT COUNT(*) FROM net_events WHERE decode_error IS NOT NULL")
    if n:
        return [Finding("warning", "decoding", f"{n} bodies could not be decoded as declared")]
    return []


def check_capture(conn: sqlite3.Connection, row: dict | None, folder: Path | None = None) -> list[Finding]:
    """Whether recording itself worked: rows or chunks lost, failed commits, flows missed while the
    recorder restarted (session.db, and the health file in `folder` for when the disk was full), a
    recorder that died or a session whose end was not recorded (main.db). Each is an error: the
    record is incomplete."""
    status, _, problem = capture_health(capture_meta(conn, folder))
    out = []
    if row is not None and row.get("capture_status") == "failed":
        out.append(
            Finding("error", "capture", f"capture failed: {row.get('capture_error') or 'the recorder died'}")
        )
    elif row is not None and row.get("capture_status") == "unknown":
        out.append(
            Finding("error", "capture", f"capture incomplete: {row.get('capture_error') or NOT_RECORDED_END}")
        )
    if status != "ok":
        out.append(Finding("error", "capture", f"capture degraded: {problem}"))
    elif problem:
        out.append(Finding("warning", "capture", f"capture recovered: {problem}"))
    return out


def check_rollup(
    conn: sqlite3.Connection, row: dict | None, ai_usage: list[dict] | None = None
) -> list[Finding]:
    """main.db totals (and ai_usage rows, when given) recomputed from session.db with rollup's SQL."""
    if row is None:
        return [Finding("warning", "rollup", "session has no row in main.db")]
    if row["status"] == "running":
        return [Finding("info", "rollup", "session is still running; totals are rolled up when it stops")]
    if row.get("process_gone"):
        return [Finding("info", "rollup", "its process is gone and main.db still says running: the next capsem "
                                          "start or capsem vacuum marks it crashed and rolls it up")]  # fmt: skip
    actual = dict(conn.execute(TOTALS_SQL).fetchone())
    diffs = [
        f"{k} {_shown(row[k])} != {_shown(v)}"
        for k, v in actual.items()
        if k in row and k not in _OUTCOME_COUNTS and _differs(row[k], v)
    ]
    out = []
    if diffs:
        out.append(Finding("error", "rollup", "main.db totals differ from session.db: " + ", ".join(diffs)))
    if ai_usage is not None:
        expected = {(r[0], r[1]): tuple(r[2:]) for r in conn.execute(AI_USAGE_SQL)}
        stored = {
            (r["provider"], r["model"]): tuple(r.get(c) for c in AI_USAGE_COLUMNS[2:]) for r in ai_usage
        }
        bad = sorted(
            f"{p}/{m or '?'}"
            for p, m in expected.keys() | stored.keys()
            if any(
                _differs(a, b) for a, b in zip(expected.get((p, m), ()), stored.get((p, m), ()), strict=False)
            )
            or ((p, m) in expected) != ((p, m) in stored)
        )
        if bad:
            out.append(
                Finding("error", "rollup", "main.db ai_usage differs from session.db for " + ", ".join(bad))
            )
    return out


def _shown(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return abs((a or 0) - (b or 0)) > 1e-9
    return a != b


def check_files(path: Path | None, row: dict | None) -> list[Finding]:
    """A non-empty `-wal` left next to a stopped session's database (it was not closed cleanly)."""
    if path is None or path.name != DB_NAME:
        return []
    wal = path.with_name(DB_NAME + "-wal")
    if not wal.exists() or wal.stat().st_size == 0:
        return []
    status = row["status"] if row else None
    if status == "running":
        return []
    if status == "crashed":
        return [Finding("info", "files", f"{wal.name} is left ({wal.stat().st_size} bytes): the session crashed; "
                                         "its last writes are in the WAL and are read with it")]  # fmt: skip
    return [Finding("warning", "files", f"{wal.name} is left ({wal.stat().st_size} bytes) although the session is "
                                        f"{status or 'not in main.db'}: it was not shut down cleanly")]  # fmt: skip


def check_processes(conn: sqlite3.Connection) -> list[Finding]:
    """Process anomalies that `capsem run` detected in the agent's process tree (proc_anomalies)."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'proc_anomalies'").fetchone():
        return []
    level: dict[str, Severity] = {"critical": "error", "warning": "warning"}
    rows = conn.execute(
        "SELECT kind, severity, COUNT(*), GROUP_CONCAT(DISTINCT COALESCE(name, pid)) FROM proc_anomalies "
        "GROUP BY kind, severity ORDER BY MIN(id)"
    )
    return [
        Finding(
            level.get(sev, "info"),
            "processes",
            f"{n} {kind} anomal{'y' if n == 1 else 'ies'} in the agent's processes ({names})",
        )
        for kind, sev, n, names in rows
    ]


def check_budgets(conn: sqlite3.Connection) -> list[Finding]:
    """Model calls a budget refused (warning: the agent was stopped) or let through at its warn level
    (info); calls decided while the budget's spend could not be confirmed (warning: refused for
    that, or let through unchecked by `on_unconfirmed: allow`)."""
    counts: dict[tuple[str, str, bool], int] = {}
    for rule, decision, n in conn.execute(
        "SELECT matched_rule, decision, COUNT(*) FROM net_events WHERE matched_rule LIKE '%budget:%' "
        "GROUP BY matched_rule, decision ORDER BY MIN(id)"
    ):
        for part in rule.split(", "):
            if part.startswith(RULE_PREFIX):
                name = part.removeprefix(RULE_PREFIX)
                key = (name.removesuffix(UNCONFIRMED), decision, name.endswith(UNCONFIRMED))
                counts[key] = counts.get(key, 0) + n
    out = []
    for (name, decision, unconfirmed), n in counts.items():
        calls = f"{n} model call{'s' * (n != 1)}"
        if unconfirmed:
            what = (f"refused {calls} because its spend could not be confirmed (its recorder was not answering)"
                    if decision == "denied" else
                    f"let {calls} through unchecked: its spend could not be confirmed (on_unconfirmed: allow)")  # fmt: skip
            out.append(Finding("warning", "budgets", f"budget {name} {what}"))
        elif decision == "denied":
            out.append(
                Finding(
                    "warning", "budgets", f"budget {name} refused {calls} (answered by capsem, never sent)"
                )
            )
        else:
            out.append(Finding("info", "budgets", f"budget {name}: {calls} went through at its warn level"))
    return out


def check_credentials(conn: sqlite3.Connection) -> list[Finding]:
    """Brokered credentials: placeholders capsem refused to replace (warning), keys it put in (info)."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'substitution_events'").fetchone():
        return []
    out = []
    for credential, outcome, n, hosts, reasons in conn.execute(
        "SELECT credential, outcome, COUNT(*), GROUP_CONCAT(DISTINCT host), GROUP_CONCAT(DISTINCT reason) "
        "FROM substitution_events GROUP BY credential, outcome ORDER BY MIN(id)"
    ):
        if outcome == "substituted":
            out.append(Finding("info", "credentials", f"credential {credential}: the real key went to {hosts} "
                                                      f"in {n} request{'s' * (n != 1)}"))  # fmt: skip
        else:
            out.append(Finding("warning", "credentials", f"credential {credential}: {n} placeholder{'s' * (n != 1)} "
                                                         f"not replaced ({reasons})"))  # fmt: skip
    return out


def check_cache_breaks(conn: sqlite3.Connection) -> list[Finding]:
    """Calls that read less from the prompt cache than their conversation had cached, and what it cost."""
    if "cache_breaks" not in {
        r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }:
        return []
    rows = conn.execute(
        "SELECT cause, item, extra_cost_usd, model_call_id FROM cache_breaks ORDER BY id"
    ).fetchall()
    if not rows:
        return []
    cost = sum(r[2] or 0 for r in rows)
    causes: dict[str, int] = {}
    for cause, item, _, _ in rows:
        label = f"{item} changed" if cause == "changed" and item else cause
        causes[label] = causes.get(label, 0) + 1
    listed = ", ".join(f"{label} ×{n}" if n > 1 else label for label, n in causes.items())
    return [Finding("warning", "cache breaks", f"{counted(len(rows), 'cache break')} cost ${cost:.4f} more than "
                    f"reading from the cache: {listed} (calls {', '.join(str(r[3]) for r in rows[:5])}"
                    f"{', …' if len(rows) > 5 else ''}; capsem show-call ID says why)")]  # fmt: skip


SHOWN_APPROVALS = 20


def check_approvals(conn: sqlite3.Connection) -> list[Finding]:
    """Requests `ask` rules held: each answer, who gave it and how long the request waited (info;
    a warning for those nobody answered)."""
    if "approvals" not in _tables(conn):
        return []
    out = []
    found = conn.execute("SELECT rule, decision, decided_by, waited_ms, reason, method, host, path, tool "
                         "FROM approvals ORDER BY id").fetchall()  # fmt: skip
    for rule, decision, by, waited_ms, reason, method, host, path, tool in found[:SHOWN_APPROVALS]:
        what = f"MCP tool {tool}" if tool else f"{method} {host}{path}"
        answer = "timed out" if decision == "timed_out" else f"{decision} by {by}"
        out.append(Finding("warning" if decision == "timed_out" else "info", "approvals",
                           f"rule {rule} asked about {what}: {answer} after {waited_ms / 1000:.1f} s"
                           + (f" ({reason})" if reason and decision != "timed_out" else "")))  # fmt: skip
    if len(found) > SHOWN_APPROVALS:
        out.append(
            Finding(
                "info", "approvals", f"{len(found) - SHOWN_APPROVALS} more asked requests (table approvals)"
            )
        )
    return out


CHECKS: list[Callable[[sqlite3.Connection], list[Finding]]] = [
    check_schema, check_integrity, check_tool_lifecycle, check_references, check_provider_traffic,
    check_model_calls, check_failures, check_usage, check_decoding, check_processes, check_budgets,
    check_credentials, check_cache_breaks, check_approvals, check_tool_decisions,
]  # fmt: skip


CHECK_SECONDS = 20.0
"""At most this long for one check, and TOTAL_SECONDS for all (a huge or damaged session): a check
cut short is reported as skipped, never waited for."""
TOTAL_SECONDS = 90.0


class Clock:
    """The time `inspect-session` may spend, enforced inside SQLite (a progress handler interrupts
    the statement, Python-side iteration over its rows included)."""

    def __init__(self, per_check: float = CHECK_SECONDS, total: float = TOTAL_SECONDS) -> None:
        self.per_check = per_check
        self.end = time.monotonic() + total

    @property
    def left(self) -> float:
        return self.end - time.monotonic()

    @contextmanager
    def bounded(self, conn: sqlite3.Connection, seconds: float | None = None) -> Iterator[float]:
        """Within the block, a statement on `conn` past the limit raises `sqlite3.OperationalError`
        ('interrupted'); yields the limit."""
        limit = max(0.0, min(self.per_check if seconds is None else seconds, self.left))
        deadline = time.monotonic() + limit
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            yield limit
        finally:
            conn.set_progress_handler(None, 0)


def _interrupted(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "interrupted" in str(exc)


class _CouldNotRun(Exception):
    def __init__(self, name: str, error: str) -> None:
        self.name, self.error = name, error


def _safe(
    name: str, check: Callable[[sqlite3.Connection], list[Finding]], conn: sqlite3.Connection
) -> list[Finding]:
    try:
        return check(conn)
    except sqlite3.Error as exc:
        raise _CouldNotRun(name, str(exc)) from exc


def run_checks(conn: sqlite3.Connection, row: dict | None, ai_usage: list[dict] | None,
               path: Path | None, clock: Clock | None = None) -> list[Finding]:  # fmt: skip
    """Every check, in order; checks that cannot run become one error finding per cause, checks
    cut short by the `clock` one warning naming them."""
    clock = clock or Clock()
    named = [(c.__name__.removeprefix("check_").replace("_", " "), c) for c in CHECKS]
    named.append(("rollup", lambda c: check_rollup(c, row, ai_usage)))
    named.append(("capture", lambda c: check_capture(c, row, path.parent if path is not None else None)))
    findings: list[Finding] = []
    failed: dict[str, list[str]] = {}
    skipped: list[str] = []
    for name, check in named:
        with clock.bounded(conn) as limit:
            try:
                if limit <= 0:
                    raise _CouldNotRun(name, "interrupted")
                findings += _safe(name, check, conn)
            except _CouldNotRun as exc:
                if exc.error == "interrupted":
                    skipped.append(name)
                else:
                    failed.setdefault(exc.error, []).append(exc.name)
    for error, names in failed.items():
        findings.append(
            Finding("error", "checks", f"{len(names)} checks could not run ({', '.join(names)}): {error}")
        )
    if skipped:
        findings.append(Finding("warning", "checks", f"{counted(len(skipped), 'check')} skipped ({', '.join(skipped)}): "
                                f"not done within {clock.per_check:g} s each, {TOTAL_SECONDS:g} s in all, on this "
                                "session; their findings are missing"))  # fmt: skip
    findings += check_files(path, row)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: order[f.severity])


# --- summaries ----------------------------------------------------------------------------------


def table_counts(conn: sqlite3.Connection) -> dict[str, int | None]:
    """Rows per seed table; None for a missing table."""
    tables = _tables(conn)
    return {t: _count(conn, f"SELECT COUNT(*) FROM {t}") if t in tables else None for t in SESSION_TABLES}


def tool_usage(conn: sqlite3.Connection) -> list[dict]:
    """Per tool and origin: calls, results, errors, and the calls a tool rule kept from the agent."""
    return [dict(r) for r in conn.execute(
        "SELECT tc.tool_name, tc.origin, COUNT(*) AS calls, COUNT(tr.call_id) AS results, "
        f"COALESCE(SUM(tr.is_error), 0) AS errors, COALESCE(SUM({_kept_from_agent(conn)}), 0) AS not_run "
        "FROM tool_calls tc "
        "LEFT JOIN (SELECT call_id, MAX(is_error) AS is_error FROM tool_responses GROUP BY call_id) tr "
        "ON tr.call_id = tc.call_id GROUP BY tc.tool_name, tc.origin ORDER BY calls DESC, tc.tool_name"
    )]  # fmt: skip


def mcp_usage(conn: sqlite3.Connection) -> list[dict]:
    """Per MCP server, tool (the method for calls without one: initialize, tools/list...) and
    decision: calls, average duration, bytes."""
    return [dict(r) for r in conn.execute(
        "SELECT server_name, COALESCE(tool_name, method) AS tool_name, decision, COUNT(*) AS calls, "
        "ROUND(AVG(duration_ms), 1) AS avg_ms, COALESCE(SUM(bytes_sent + bytes_received), 0) AS bytes "
        "FROM mcp_calls GROUP BY server_name, COALESCE(tool_name, method), decision ORDER BY server_name, calls DESC"
    )]  # fmt: skip


def input_breakdown(conn: sqlite3.Connection) -> list[dict]:
    """Per part of the input (tool definitions, system, history…): tokens, cost and their shares
    of the session's input (estimated split of the providers' counts; see addons/recorder/breakdown.py)."""
    rows = [dict(r) for r in conn.execute(
        "SELECT part, SUM(tokens) AS tokens, SUM(cache_read_tokens) AS cache_read, SUM(cost_usd) AS cost_usd "
        "FROM input_breakdown GROUP BY part ORDER BY SUM(COALESCE(cost_usd, 0)) DESC, SUM(tokens) DESC"
    )]  # fmt: skip
    tokens = sum(r["tokens"] for r in rows) or 1
    cost = sum(r["cost_usd"] or 0 for r in rows)
    for r in rows:
        r["token_share"] = r["tokens"] / tokens
        r["cost_share"] = (r["cost_usd"] or 0) / cost if cost else None
    return rows


def last_rows(conn: sqlite3.Connection, n: int) -> dict[str, list[dict]]:
    """The last `n` rows of each seed table that has rows."""
    out = {}
    for table, count in table_counts(conn).items():
        if count and n > 0:
            out[table] = [
                dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY id DESC LIMIT ?", (n,))
            ]
    return out


def replay_meta(conn: sqlite3.Connection) -> dict[str, str]:
    """The `replay_*` values of a `capsem replay` session's session_meta (empty for other sessions)."""
    return {
        k: v
        for k, v in conn.execute(
            "SELECT key, value FROM session_meta WHERE key LIKE 'replay\\_%' ESCAPE '\\'"
        )
    }


@dataclass
class Inspection:
    session_id: str
    path: str
    status: str | None
    counts: dict[str, int | None]
    """Rows per seed table (None: table missing); empty when the file cannot be read."""
    findings: list[Finding]
    tools: list[dict] = field(default_factory=list)
    mcp: list[dict] = field(default_factory=list)
    inputs: list[dict] = field(default_factory=list)
    """Where the session's input tokens went, per part (see `input_breakdown`)."""
    previews: dict[str, list[dict]] = field(default_factory=dict)
    replay: dict[str, str] = field(default_factory=dict)
    """A `capsem replay` session: its `replay_*` session_meta values (`replay_of`, counts, first miss)."""
    ledger: str = ""
    """Whether the session verifies against its signed chain (`capsem verify`), in words."""

    @property
    def problems(self) -> int:
        return sum(f.severity in ("error", "warning") for f in self.findings)

    @property
    def damaged(self) -> bool:
        """The database itself is damaged or unreadable (not just its content suspicious)."""
        return not self.counts or any(f.check == "integrity" for f in self.findings)

    def to_json(self) -> dict:
        data = asdict(self)
        data["previews"] = {t: [{k: _jsonable(v) for k, v in r.items()} for r in rows]
                            for t, rows in self.previews.items()}  # fmt: skip
        return data


def _jsonable(value: Any) -> Any:
    return f"<blob {len(value)} bytes>" if isinstance(value, bytes) else value


def ledger_check(
    conn: sqlite3.Connection, session_id: str, row: dict | None, clock: Clock
) -> tuple[str, str]:
    """Whether the session verifies (`capsem verify`'s check, assembler/ledger/): (severity, words)."""
    from assembler.ledger.marks import shown, verdict

    with clock.bounded(conn):
        try:
            return shown(verdict(conn, session_id, row["status"] if row else None))
        except sqlite3.Error as exc:
            return "warning", f"could not be verified: {exc}"


def inspect_session(session_id: str, preview_rows: int = 5, clock: Clock | None = None) -> Inspection:
    """Open a session (gzipped or not, read-only) and run every check on it, within the `clock`'s
    time (a check or summary cut short is reported as skipped).

    Raises:
        SessionNotFound, SessionDbError: the database is missing or cannot be opened.
    """
    path = db_file(session_id)
    row = main_row(session_id)
    if row is not None:
        row = as_shown(row)  # as list-sessions shows it
    ai_usage = None
    if row is not None:
        with open_main() as main:
            ai_usage = [
                dict(r) for r in main.execute("SELECT * FROM ai_usage WHERE session_id = ?", (session_id,))
            ]
    clock = clock or Clock()
    with open_session(session_id) as conn:
        findings = run_checks(conn, row, ai_usage, path, clock)
        severity, ledger = ledger_check(conn, session_id, row, clock)
        if severity == "error":  # a record changed after it was written
            findings.insert(0, Finding("error", "ledger", ledger))
        with clock.bounded(conn):
            try:
                counts = table_counts(conn)
            except sqlite3.Error:
                counts = {}  # unreadable
        result = Inspection(
            session_id, str(path), row["status"] if row else None, counts, findings, ledger=ledger
        )
        skipped = []
        for attr, fn in (("tools", tool_usage), ("mcp", mcp_usage), ("inputs", input_breakdown), ("replay", replay_meta),
                         ("previews", lambda c: last_rows(c, preview_rows))):  # fmt: skip
            with clock.bounded(conn):
                try:
                    setattr(result, attr, fn(conn))
                except sqlite3.Error as exc:
                    if _interrupted(exc):
                        skipped.append(attr)
        if skipped:
            result.findings.append(Finding("info", "checks", f"summaries left out for lack of time: "
                                                             f"{', '.join(skipped)}"))  # fmt: skip
    return result
