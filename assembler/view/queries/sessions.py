"""The sessions list: one summary per session, anomaly counts, cost per day."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from assembler.sessions import parse_time as parse_ts
from assembler.view.queries.common import tables


@dataclass(frozen=True)
class SessionSummary:
    id: str
    created_at: str
    duration: str
    status: str
    command: str
    cost: float
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    model_calls: int
    tool_calls: int
    mcp_calls: int
    file_events: int
    errors: int
    models: list[str]
    has_db: bool
    capture_status: str | None
    anomalies: int | None = None
    """Process anomalies in its session.db (None: gzipped or unreadable, not opened for the list)."""
    unpriced: bool = False
    """Model calls with tokens and no known price, and nothing priced: shown `unpriced`, not `$0.0000`."""
    stepped_in: list[tuple[str, int]] = field(default_factory=list)
    """(kind, n): requests capsem denied, warned or asked about, placeholders it refused."""
    culled_reason: str | None = None
    """Why retention culled it (status `culled`)."""
    name: str | None = None
    project: str | None = None
    branch: str | None = None
    tags: list[str] = field(default_factory=list)
    emulated: bool = False
    """Its answers cost nothing (run --emulator, demo, a replay): not in budgets or cost totals."""


def _stepped_in(row: dict[str, Any]) -> list[tuple[str, int]]:
    keys = (("denied", "denied_requests"), ("warned", "warned_requests"), ("asked", "asked_requests"),
            ("refused", "refused_placeholders"))  # fmt: skip
    return [(kind, row[k]) for kind, k in keys if row.get(k)]


def summaries(rows: list[dict[str, Any]], models: dict[str, list[str]],
              anomalies: dict[str, int | None] | None = None) -> list[SessionSummary]:  # fmt: skip
    """`list_sessions` rows (main.db) as the sessions page shows them."""
    anomalies = anomalies or {}
    from assembler.sessions import duration

    return [
        SessionSummary(
            id=r["id"], created_at=r["created_at"] or "", duration=duration(r), status=r["status"],
            command=r.get("command") or "", cost=r.get("total_estimated_cost") or 0.0,
            input_tokens=r.get("total_input_tokens") or 0, output_tokens=r.get("total_output_tokens") or 0,
            cache_read_tokens=r.get("total_cache_read_tokens") or 0,
            cache_write_tokens=r.get("total_cache_write_tokens") or 0,
            model_calls=r.get("total_model_calls") or 0, tool_calls=r.get("total_tool_calls") or 0,
            mcp_calls=r.get("total_mcp_calls") or 0, file_events=r.get("total_file_events") or 0,
            errors=r.get("total_errors") or 0, stepped_in=_stepped_in(r), name=r.get("name"),
            unpriced=bool(r.get("unpriced_calls")) and not r.get("total_estimated_cost"),
            culled_reason=r.get("culled_reason"),
            project=r.get("project"), branch=r.get("git_branch"), tags=r.get("tags") or [],
            models=models.get(r["id"], []), has_db=bool(r.get("has_db")),
            capture_status=r.get("capture_status"), anomalies=anomalies.get(r["id"]),
            emulated=bool(r.get("emulated")),
        )
        for r in rows
    ]  # fmt: skip


def anomaly_counts(paths: dict[str, str | None]) -> dict[str, int | None]:
    """`proc_anomalies` rows per session, from each plain session.db (a gzipped one is not
    decompressed for a list: None)."""
    from pathlib import Path

    from capsem.store.schema import connect

    out: dict[str, int | None] = {}
    for sid, path in paths.items():
        out[sid] = None
        if not path or path.endswith(".gz"):
            continue
        try:
            conn = connect(Path(path), readonly=True, timeout=0.5)
            try:
                if "proc_anomalies" in tables(conn):
                    out[sid] = conn.execute("SELECT COUNT(*) FROM proc_anomalies").fetchone()[0]
            finally:
                conn.close()
        except sqlite3.Error:
            continue
    return out


def models_by_session(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """main.db's `ai_usage`: each session's models, most expensive first."""
    out: dict[str, list[str]] = {}
    for r in conn.execute(
        "SELECT session_id, model FROM ai_usage ORDER BY estimated_cost DESC, call_count DESC"
    ):
        if r["model"]:
            out.setdefault(r["session_id"], []).append(r["model"])
    return out


def cost_by_day(sessions: list[SessionSummary]) -> list[tuple[str, float]]:
    """Cost per UTC day (of each session's start), oldest first, days without sessions included."""
    days: dict[str, float] = {}
    for s in sessions:
        moment = parse_ts(s.created_at)
        if moment is not None:
            day = moment.date().isoformat()
            days[day] = days.get(day, 0.0) + s.cost
    if not days:
        return []
    from datetime import date, timedelta

    first, last = date.fromisoformat(min(days)), date.fromisoformat(max(days))
    span = min((last - first).days, 365)
    return [((first + timedelta(d)).isoformat(), days.get((first + timedelta(d)).isoformat(), 0.0))
            for d in range(span + 1)]  # fmt: skip
