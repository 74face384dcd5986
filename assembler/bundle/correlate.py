"""Tie rows and sessions of different sources together, explicit ids first.

Readers set a row's `session_id` when the record names it (`explicit`: a log's
`context.session_id`, a snapshot's tags, a capsem row's own database, a summary.json). What is
left is decided here, in this order, and the method is written next to the result:

1. rows (logs) without a session: `time` when their timestamp falls in exactly one capsem
   session's span; then `directory` when their file sits next to exactly one root session's file.
2. non-capsem sessions get a `correlated_session_id`, a capsem session: `explicit` when a tag
   names it, `process` when a diagnostics pid made requests in it while they overlapped, `time`
   when their spans overlap exactly one capsem session, `directory` as above; a child session
   without a match of its own inherits its parent's.

Sessions that rows name but no source described get a row of kind `referenced`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path

# Tables whose rows name a session (capture tables are always explicit).
SESSION_TABLES = ("logs", "slice_items", "tool_invocations", "prompt_events", "files", "diag_sessions",
                  "documents", "proc_samples", "proc_anomalies")  # fmt: skip
# (table, time column) of rows that may still lack a session after import.
UNSET_ROWS = {"logs": "timestamp", "files": None, "documents": None}


def correlate(conn: sqlite3.Connection, source_dirs: Mapping[int, Path]) -> None:
    """Fill in the sessions of rows and sessions that their sources did not name."""
    _add_referenced_sessions(conn)
    conn.execute("DROP TABLE IF EXISTS temp.capsem_windows")
    conn.execute(
        "CREATE TEMP TABLE capsem_windows AS SELECT session_id, created_at AS start, "
        "COALESCE(NULLIF(ended_at, ''), created_at) AS end FROM sessions WHERE kind = 'capsem' AND created_at != ''"
    )
    conn.execute(
        "UPDATE logs SET correlation = 'time', session_id = (SELECT w.session_id FROM capsem_windows w "
        "WHERE logs.timestamp BETWEEN w.start AND w.end) WHERE session_id IS NULL AND timestamp IS NOT NULL "
        "AND (SELECT COUNT(*) FROM capsem_windows w WHERE logs.timestamp BETWEEN w.start AND w.end) = 1"
    )
    by_dir = _directory_sessions(conn, source_dirs)
    for table in UNSET_ROWS:
        for source_id, folder in source_dirs.items():
            session_id = by_dir.get(folder)
            if session_id:
                conn.execute(
                    f"UPDATE {table} SET session_id = ?, correlation = 'directory' "
                    "WHERE session_id IS NULL AND source_id = ?",
                    (session_id, source_id),
                )
    _correlate_sessions(conn, source_dirs, by_dir)
    conn.execute("DROP TABLE temp.capsem_windows")


def _add_referenced_sessions(conn: sqlite3.Connection) -> None:
    for table in SESSION_TABLES:
        time_col = {"logs": "timestamp", "tool_invocations": "timestamp", "prompt_events": "timestamp",
                    "proc_samples": "ts", "proc_anomalies": "first_ts", "diag_sessions": "start_ts"}.get(table)  # fmt: skip
        first = f"COALESCE(MIN({time_col}), '')" if time_col else "''"
        last = f"MAX({time_col})" if time_col else "NULL"
        conn.execute(
            f"INSERT INTO sessions (session_id, created_at, ended_at, kind) SELECT session_id, {first}, {last}, "
            f"'referenced' FROM {table} WHERE session_id IS NOT NULL "
            "AND session_id NOT IN (SELECT session_id FROM sessions) GROUP BY session_id"
        )


def _directory_sessions(conn: sqlite3.Connection, source_dirs: Mapping[int, Path]) -> dict[Path, str]:
    """Directory -> the one root session its sources describe (a capsem one wins a tie with others)."""
    roots: dict[Path, set[tuple[str, str]]] = {}
    for session_id, kind, source_id in conn.execute(
        "SELECT session_id, kind, source_id FROM sessions WHERE parent_session_id IS NULL "
        "AND kind IN ('capsem', 'snapshot', 'diagnostics')"
    ):
        if source_id in source_dirs:
            roots.setdefault(source_dirs[source_id], set()).add((session_id, kind))
    out = {}
    for folder, found in roots.items():
        capsem = [s for s, k in found if k == "capsem"]
        if len(found) == 1:
            out[folder] = next(iter(found))[0]
        elif len(capsem) == 1:
            out[folder] = capsem[0]
    return out


def _correlate_sessions(
    conn: sqlite3.Connection, source_dirs: Mapping[int, Path], by_dir: Mapping[Path, str]
) -> None:
    pending = "s.kind != 'capsem' AND s.correlated_session_id IS NULL"
    # explicit: a tag's value is a capsem session id
    conn.execute(
        f"UPDATE sessions AS s SET correlation = 'explicit', correlated_session_id = (SELECT w.session_id "
        f"FROM json_each(CASE WHEN json_valid(s.tags) THEN s.tags ELSE '{{}}' END) j "
        f"JOIN capsem_windows w ON w.session_id = j.value LIMIT 1) WHERE {pending} AND EXISTS (SELECT 1 "
        f"FROM json_each(CASE WHEN json_valid(s.tags) THEN s.tags ELSE '{{}}' END) j "
        f"JOIN capsem_windows w ON w.session_id = j.value)"
    )
    # process: a pid of the diagnostics session made requests in exactly one capsem session it overlaps
    conn.execute(
        "CREATE TEMP TABLE session_pids AS SELECT DISTINCT session_id, pid FROM ("
        "SELECT session_id, pid FROM proc_samples UNION ALL SELECT session_id, pid FROM diag_sessions) "
        "WHERE pid IS NOT NULL"
    )
    conn.execute(
        "CREATE TEMP TABLE capsem_pids AS SELECT DISTINCT session_id, pid FROM ("
        "SELECT session_id, pid FROM net_events UNION ALL SELECT session_id, pid FROM model_calls) "
        "WHERE pid IS NOT NULL"
    )
    overlap = "w.start <= COALESCE(NULLIF(s.ended_at, ''), s.created_at) AND w.end >= s.created_at"
    by_pid = (
        f"SELECT DISTINCT w.session_id FROM session_pids sp JOIN capsem_pids cp ON cp.pid = sp.pid "
        f"JOIN capsem_windows w ON w.session_id = cp.session_id WHERE sp.session_id = s.session_id AND {overlap}"
    )
    conn.execute(
        f"UPDATE sessions AS s SET correlation = 'process', correlated_session_id = ({by_pid}) "
        f"WHERE {pending} AND (SELECT COUNT(*) FROM ({by_pid})) = 1"
    )
    conn.execute("DROP TABLE temp.session_pids")
    conn.execute("DROP TABLE temp.capsem_pids")
    # time: the session's span overlaps exactly one capsem session
    by_time = f"SELECT w.session_id FROM capsem_windows w WHERE s.created_at != '' AND {overlap}"
    conn.execute(
        f"UPDATE sessions AS s SET correlation = 'time', correlated_session_id = ({by_time}) "
        f"WHERE {pending} AND (SELECT COUNT(*) FROM ({by_time})) = 1"
    )
    # directory: its file sits next to one capsem session's
    capsem = {r[0] for r in conn.execute("SELECT session_id FROM capsem_windows")}
    for session_id, source_id in conn.execute(
        f"SELECT session_id, source_id FROM sessions AS s WHERE {pending}"
    ).fetchall():
        match = by_dir.get(source_dirs.get(source_id)) if source_id in source_dirs else None
        if match in capsem and match != session_id:
            conn.execute(
                "UPDATE sessions SET correlation = 'directory', correlated_session_id = ? WHERE session_id = ?",
                (match, session_id),
            )
    _inherit_from_parents(conn, pending)


def _inherit_from_parents(conn: sqlite3.Connection, pending: str) -> None:
    """Children still unmatched (`pending`) inherit their parent's match."""
    for _ in range(8):  # a few levels of nesting; deeper trees are rare
        cur = conn.execute(
            f"UPDATE sessions AS s SET (correlated_session_id, correlation) = (SELECT p.correlated_session_id, "
            f"p.correlation FROM sessions p WHERE p.session_id = s.parent_session_id) WHERE {pending} "
            "AND EXISTS (SELECT 1 FROM sessions p WHERE p.session_id = s.parent_session_id "
            "AND p.correlated_session_id IS NOT NULL)"
        )
        if cur.rowcount == 0:
            break
