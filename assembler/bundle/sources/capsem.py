"""capsem sessions (session.db, or session.db.gz once vacuumed) with their main.db rows.

Every data table of the session database is copied whole into the bundle's table of the same
name, each row keyed by (session_id, id): net_events, model_calls, tool_calls, tool_responses,
mcp_calls, fs_events, and proc_samples/proc_anomalies when `capsem run` recorded them. A table
or column this capsem does not know (a newer recorder) is created on the fly, so nothing is
lost. The session's main.db row (status, command, times) comes from a main.db given as an input
or from the CAPSEM_HOME the session lives in (`<home>/sessions/<id>/session.db`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from assembler.bundle.schema import (
    CAPTURE_INTERNAL,
    CAPTURE_TABLES,
    CAPTURE_VIEWS,
    ensure_capture_table,
    quote,
    table_columns,
)
from assembler.bundle.sources.base import SourceContext, dumps
from assembler.sessiondb import SessionDbError, open_path
from capsem import health
from capsem.ids import is_session_id
from capsem.store.schema import connect

BATCH = 500
TIME_TABLES = ("net_events", "model_calls", "fs_events", "mcp_calls")


def session_id_of(conn: sqlite3.Connection, path: Path) -> tuple[str, dict[str, str]]:
    """The session's id (session_meta, else its directory's name, else the file's stem) and its meta."""
    meta: dict[str, str] = {}
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'session_meta'").fetchone():
        meta = {str(k): v for k, v in conn.execute("SELECT key, value FROM session_meta")}
    if meta.get("session_id"):
        return meta["session_id"], meta
    if is_session_id(path.parent.name):
        return path.parent.name, meta
    return path.name.split(".", 1)[0], meta


def main_db_candidates(ctx: SourceContext) -> list[Path]:
    """main.db files to look a session up in: the inputs, then the session's own CAPSEM_HOME."""
    home_main = ctx.path.resolve().parent.parent.parent / "main.db"
    found = list(ctx.siblings.get("capsem_main", []))
    if home_main.is_file() and home_main not in found:
        found.append(home_main)
    return found


def main_row(paths: Iterable[Path], session_id: str) -> dict[str, Any] | None:
    """The session's main.db `sessions` row from the first main.db that has it."""
    for path in paths:
        try:
            conn = connect(path, readonly=True)
        except sqlite3.Error:
            continue
        try:
            row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        except sqlite3.Error:
            row = None
        finally:
            conn.close()
        if row is not None:
            return dict(row)
    return None


def import_capsem_session(ctx: SourceContext, stream: IO[bytes]) -> None:
    """Copy one capsem session database into the bundle."""
    del stream  # SQLite opens the path itself (gunzipping a .gz to a temporary file first)
    try:
        with open_path(ctx.path) as src:
            _copy_session(ctx, src)
    except (SessionDbError, sqlite3.Error) as exc:
        ctx.malformed(None, f"cannot read the session database ({exc})")


def _copy_session(ctx: SourceContext, src: sqlite3.Connection) -> None:
    names = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not names & {"net_events", "model_calls"}:
        ctx.malformed(None, "not a capsem session database (no net_events or model_calls table)")
        return
    session_id, meta = session_id_of(src, ctx.path)
    meta = health.merged(meta, ctx.path.parent)  # the counts the recorder kept beside it, for a full disk
    previous = ctx.conn.execute(
        "SELECT source_id FROM sessions WHERE session_id = ? AND kind = 'capsem'", (session_id,)
    ).fetchone()
    if previous:
        ctx.warn(f"session {session_id} was already imported from source {previous[0]}; this copy is skipped")
        return
    tables = [
        r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")
        if r[0] not in CAPTURE_INTERNAL and not r[0].startswith("sqlite_")
    ]  # fmt: skip
    views = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    tables += [v for v in CAPTURE_VIEWS if v in views]
    bundle_tables = {r[0] for r in ctx.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table in tables:
        target = table if table in CAPTURE_TABLES or table not in bundle_tables else f"capture_{table}"
        if target != table:
            ctx.warn(f"table {table} is stored as {target} (its name is taken by a bundle table)")
        columns = table_columns(src, table)
        ensure_capture_table(ctx.conn, target, columns)
        _copy_rows(ctx, src, table, target, session_id, [c for c, _ in columns])
    main = main_row(main_db_candidates(ctx), session_id)
    first, last = _time_span(ctx, session_id)
    ctx.ensure_session(
        session_id, (main or {}).get("created_at") or meta.get("started_at") or first, "capsem",
        ended_at=(main or {}).get("stopped_at") or last, status=(main or {}).get("status") or meta.get("status"),
        command=(main or {}).get("command"), tags=dumps(meta), raw=dumps(main),
    )  # fmt: skip
    if main is None:
        ctx.warn(f"no main.db row found for session {session_id} (status and command unknown)")


def _copy_rows(
    ctx: SourceContext, src: sqlite3.Connection, table: str, target: str, session_id: str, columns: list[str]
) -> None:
    names = ["session_id", *columns, "source_id", "correlation"]
    sql = (f"INSERT INTO {quote(target)} ({', '.join(quote(n) for n in names)}) "
           f"VALUES ({', '.join('?' * len(names))})")  # fmt: skip
    cur = src.execute(f"SELECT {', '.join(quote(c) for c in columns)} FROM {quote(table)}")
    while batch := cur.fetchmany(BATCH):
        rows = [(session_id, *(ctx.scrub(v) for v in row), ctx.source_id, "explicit") for row in batch]
        ctx.conn.executemany(sql, rows)
        ctx.records += len(rows)


def _time_span(ctx: SourceContext, session_id: str) -> tuple[str | None, str | None]:
    union = " UNION ALL ".join(f"SELECT timestamp FROM {t} WHERE session_id = ?" for t in TIME_TABLES)
    row = ctx.conn.execute(
        f"SELECT MIN(timestamp), MAX(timestamp) FROM ({union})", (session_id,) * len(TIME_TABLES)
    )
    first, last = row.fetchone()
    return first, last


def import_capsem_main(ctx: SourceContext, stream: IO[bytes]) -> None:
    """A main.db: its rows enrich the imported sessions (read by `import_capsem_session`); count them."""
    del stream
    try:
        conn = connect(ctx.path, readonly=True)
        try:
            ids = [r[0] for r in conn.execute("SELECT id FROM sessions")]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        ctx.malformed(None, f"cannot read main.db ({exc})")
        return
    imported = {r[0] for r in ctx.conn.execute("SELECT session_id FROM sessions WHERE kind = 'capsem'")}
    ctx.records = sum(1 for i in ids if i in imported)
    missing = len(ids) - ctx.records
    if missing:
        ctx.warn(
            f"{missing} of its {len(ids)} sessions have no session database among the inputs (not imported)"
        )
