"""`capsem list-sessions`: the session index from main.db (works after a session is vacuumed)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from assembler.sessiondb import db_file
from capsem.paths import main_db_path
from capsem.schema import connect


@dataclass(frozen=True)
class SessionFilters:
    limit: int = 10
    include_vacuumed: bool = False
    with_db: bool = False
    with_model: bool = False
    with_net: bool = False
    with_mcp: bool = False
    with_tools: bool = False
    min_cost: float | None = None


def list_sessions(filters: SessionFilters) -> list[dict[str, Any]]:
    """Newest first; each row is the main.db row plus `has_db`.

    Raises:
        FileNotFoundError: when main.db does not exist yet.
    """
    if not main_db_path().is_file():
        raise FileNotFoundError(f"no main.db at {main_db_path()} (no session recorded yet)")
    where, params = ["1 = 1"], []
    if not filters.include_vacuumed:
        where.append("status NOT IN ('vacuumed', 'terminated')")
    if filters.with_model:
        where.append("total_input_tokens + total_output_tokens > 0")
    if filters.with_net:
        where.append("total_requests > 0")
    if filters.with_mcp:
        where.append("total_mcp_calls > 0")
    if filters.with_tools:
        where.append("total_tool_calls > 0")
    if filters.min_cost is not None:
        where.append("total_estimated_cost >= ?")
        params.append(filters.min_cost)
    conn = connect(main_db_path(), readonly=True)
    try:
        found = [
            dict(r)
            for r in conn.execute(
                f"SELECT * FROM sessions WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC",
                params,
            )
        ]
    finally:
        conn.close()
    out = []
    for row in found:
        row["has_db"] = db_file(row["id"]) is not None
        if filters.with_db and not row["has_db"]:
            continue
        out.append(row)
        if len(out) >= filters.limit:
            break
    return out


def _parse(ts: str | None) -> datetime | None:
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None


def duration(row: dict[str, Any]) -> str:
    """`42s`, `3m05s`, `2h10m`; `running` for a live session; `?` when unknown."""
    start, stop = _parse(row.get("created_at")), _parse(row.get("stopped_at"))
    if stop is None:
        return "running" if row.get("status") == "running" else "?"
    if start is None:
        return "?"
    seconds = int((stop - start).total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def created(row: dict[str, Any]) -> str:
    moment = _parse(row.get("created_at"))
    return moment.strftime("%m-%d %H:%M") if moment else "?"
