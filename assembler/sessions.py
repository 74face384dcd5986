"""`capsem list-sessions`: the session index from main.db (works after a session is vacuumed).

Only main.db is read (plus a check whether each session's database is still on disk), so the
listing stays available for vacuumed and culled sessions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from assembler.sessiondb import db_file, open_main
from capsem.rollup import NOT_RECORDED_END, live_totals, process_alive


@dataclass(frozen=True)
class SessionFilters:
    limit: int = 10
    """At most this many sessions; 0 for all."""
    include_culled: bool = False
    with_db: bool = False
    with_model: bool = False
    with_net: bool = False
    with_mcp: bool = False
    with_tools: bool = False
    min_cost: float | None = None
    project: str | None = None
    """Only sessions of this project (the git repository's or workspace's folder name), or of a
    workspace or repository at this path."""
    branch: str | None = None
    tag: str | None = None
    name: str | None = None


@dataclass
class Listing:
    sessions: list[dict[str, Any]]
    """The sessions shown, newest first."""
    matched: int
    """How many sessions match the filters (more than shown when the limit cut the list)."""


def list_sessions(filters: SessionFilters) -> Listing:
    """Newest first; each row is the main.db `sessions` row plus `tags`, `has_db` and `db_file`.

    Culled sessions (status `culled`, or `terminated` as Capsem calls it), whose database is gone, are left out unless
    `include_culled`; vacuumed ones are listed (their gzipped database is queryable). A
    `running` session whose process is gone is shown `crashed`, with `process_gone` set (main.db
    says so after the next start or `capsem vacuum`). `min_cost` is a bind parameter.

    Raises:
        MainDbMissing: when main.db does not exist yet.
    """
    where, params = _where(filters)
    sql = "SELECT * FROM sessions"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY created_at DESC, id DESC"
    out: list[dict[str, Any]] = []
    matched = 0
    with open_main() as conn:
        tags: dict[str, list[str]] = {}
        for session_id, tag in conn.execute("SELECT session_id, tag FROM session_tags ORDER BY rowid"):
            tags.setdefault(session_id, []).append(tag)
        for r in conn.execute(sql, params):
            row = dict(r)
            path = db_file(row["id"])
            if filters.with_db and path is None:
                continue
            matched += 1
            if filters.limit and len(out) >= filters.limit:
                continue
            row["tags"] = tags.get(row["id"], [])
            row["has_db"] = path is not None
            row["db_file"] = str(path) if path else None
            out.append(as_shown(row))
    return Listing(out, matched)


def _where(filters: SessionFilters) -> tuple[list[str], list[Any]]:
    """The WHERE conditions of `list_sessions` and their bind parameters (all but `with_db` and `limit`)."""
    where: list[str] = []
    params: list[Any] = []
    if not filters.include_culled:
        where.append("status NOT IN ('culled', 'terminated')")
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
    if filters.project:
        where.append("(project = ? OR workspace = ? OR git_repo = ?)")
        params += [filters.project] * 3
    if filters.branch:
        where.append("git_branch = ?")
        params.append(filters.branch)
    if filters.name:
        where.append("name = ?")
        params.append(filters.name)
    if filters.tag:
        where.append("id IN (SELECT session_id FROM session_tags WHERE tag = ?)")
        params.append(filters.tag)
    return where, params


LOSSY = ("degraded", "failed", "unknown")
"""`capture_status` values of a session whose record is not known to be whole."""


def as_shown(row: dict[str, Any]) -> dict[str, Any]:
    """A main.db `sessions` row as every command shows it: a `running` session whose process is
    gone is `crashed` (`process_gone` set; main.db says so after the next start or `capsem
    vacuum`), its capture `unknown` (nobody recorded its end); a live one has its totals read now
    from its session.db (`live_totals`: main.db holds them once it stops)."""
    row["process_gone"] = (row["status"] == "running" and row.get("pid") is not None
                           and not process_alive(row["pid"], row.get("pid_started_at")))  # fmt: skip
    if row["process_gone"]:
        row["status"] = "crashed"
        if row.get("capture_status") in (None, "ok"):
            row["capture_status"] = "unknown"
            row["capture_error"] = NOT_RECORDED_END
    elif row["status"] == "running":  # main.db has its totals only once it stops: read them live
        row.update(live_totals(row["id"]) or {})
    return row


def parse_time(ts: str | None) -> datetime | None:
    """An RFC 3339 timestamp as stored (`...Z`), or None when missing or unreadable."""
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None


def format_duration(seconds: float) -> str:
    """`42s`, `3m05s`, `2h10m`."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def duration(row: dict[str, Any]) -> str:
    """`42s`, `3m05s`, `2h10m`; `running` for a live session; `?` when unknown."""
    if row.get("status") == "running":
        return "running"
    if row.get("process_gone"):
        return "?"
    start, stop = parse_time(row.get("created_at")), parse_time(row.get("stopped_at"))
    if start is None or stop is None:
        return "?"
    return format_duration((stop - start).total_seconds())


def created(row: dict[str, Any]) -> str:
    """`MM-DD HH:MM:SS` in UTC (the clock of session ids)."""
    moment = parse_time(row.get("created_at"))
    return moment.strftime("%m-%d %H:%M:%S") if moment else "?"


def projects() -> list[str]:
    """The projects sessions were recorded in, most recent first (for pickers)."""
    with open_main() as conn:
        return [r[0] for r in conn.execute(
            "SELECT project FROM sessions WHERE project IS NOT NULL GROUP BY project ORDER BY MAX(created_at) DESC"
        )]  # fmt: skip
