"""Pushing sessions to the team's PostgreSQL: `push_session` (one session, one transaction) and
the pusher process (`python -m addons.recorder.team_push`), which the recorder starts when a team
is set so that nothing in the proxy's path, nor the recorder's loop, ever waits for PostgreSQL.

The pusher pushes every session the outbox says is waiting, every `PUSH_SECONDS` while one runs
and once more when it has ended; while PostgreSQL is down or slow the rows stay where they are
(session.db) and the outbox keeps the error; the pusher retries, and exits once nothing waits or
nothing could be pushed for `GIVE_UP_SECONDS` after the last session ended (the next session's
pusher, or `capsem team push`, pushes what is left). One pusher per CAPSEM_HOME (a file lock).

Rows go up with COPY into a temporary table and one `INSERT ... ON CONFLICT` per table, keyed by
(machine, session_id, id): a repeated push writes nothing twice.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from addons.recorder.team_rows import (
    CONTENT,
    SESSION_COLUMNS,
    TABLES,
    bodies_of,
    items_after,
    rows_after,
    session_row,
)
from capsem.paths import capsem_home, main_db_path
from capsem.private import open_private, private_dir
from capsem.store.reading import db_file, open_path
from capsem.store.schema import connect
from capsem.team import outbox
from capsem.team.config import Team, team_of

logger = logging.getLogger(__name__)

PUSH_SECONDS = float(os.environ.get("CAPSEM_TEAM_PUSH_SECONDS", "2"))
"""How often a running session is pushed (and a failed push retried)."""
GIVE_UP_SECONDS = 120.0
CONNECT_TIMEOUT = 5


@dataclass(frozen=True)
class Pushed:
    session_id: str
    rows: int
    final: bool


def connect_team(team: Team) -> Any:
    import psycopg

    return psycopg.connect(team.url, connect_timeout=CONNECT_TIMEOUT, autocommit=True,
                           application_name="capsem")  # fmt: skip


def _copy(cur: Any, table: str, columns: tuple[str, ...], key: tuple[str, ...], rows: list[tuple],
          prefix: tuple, update: bool) -> None:  # fmt: skip
    """`rows` into capsem.<table> (each after `prefix`, the machine and session), new keys only or,
    with `update`, replacing the columns of keys already there."""
    if not rows:
        return
    cols = ("machine", "session_id", *columns)
    quoted = ", ".join(f'"{c}"' for c in cols)
    cur.execute(f"CREATE TEMP TABLE incoming (LIKE capsem.{table} INCLUDING DEFAULTS) ON COMMIT DROP")
    with cur.copy(f"COPY incoming ({quoted}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row((*prefix, *row))
    conflict = ", ".join(key)
    action = (
        "DO UPDATE SET " + ", ".join(f'"{c}" = EXCLUDED."{c}"' for c in columns if c not in key)
        if update
        else "DO NOTHING"
    )
    cur.execute(f"INSERT INTO capsem.{table} ({quoted}) SELECT {quoted} FROM incoming ON CONFLICT ({conflict}) "
                f"{action}")  # fmt: skip
    cur.execute("DROP TABLE incoming")


# Long: one transaction that sends every table of a session, in order.
def push_session(
    pg: Any,
    team: Team,
    box: sqlite3.Connection,
    session_id: str,
    cursors: dict[str, int],
    *,
    current: bool = False,
) -> Pushed | None:
    """Send what PostgreSQL lacks of one session (from `cursors`; everything once it has ended),
    in one transaction; the outbox's cursors move after the commit. `current`: the last push went
    through, so a running session with no new row is left alone (None: its totals are not read
    again, which costs more the larger the session)."""
    db = db_file(session_id)  # session.db, or session.db.gz once vacuumed
    if db is None:
        raise FileNotFoundError(f"session {session_id} has no database on this machine")
    main = connect(main_db_path(), readonly=True)
    try:
        with open_path(db) as conn:
            status = main.execute("SELECT status FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if status is None:
                raise FileNotFoundError(f"main.db has no session {session_id}")
            final = status[0] != "running"
            start = {} if final else cursors  # once ended: all of it again (the keys skip what is there)
            batches = [(t, rows_after(conn, t, start.get(t.name, 0))) for t in TABLES]
            content: list[tuple] = []
            moved = dict(cursors)
            if team.share in ("redacted", "full"):
                items = items_after(conn, cursors.get("items", 0))
                content += items
                moved["items"] = max([cursors.get("items", 0), *(r[1] for r in items)])
            if team.share == "full":
                calls = [r[0] for t, rows in batches if t.name == "model_calls" for r in rows
                         if r[0] > cursors.get("bodies", 0)]  # fmt: skip
                content += bodies_of(conn, calls)
                moved["bodies"] = max([cursors.get("bodies", 0), *calls])
            if current and not final and not content and not any(rows for _, rows in batches):
                return None
            session = session_row(main, conn, session_id, team.user, team.share)
            if session is None:
                raise FileNotFoundError(f"main.db has no session {session_id}")
    finally:
        main.close()
    prefix = (team.machine, session_id)
    with pg.transaction(), pg.cursor() as cur:
        _copy(cur, "sessions", SESSION_COLUMNS, ("machine", "session_id"), [session[0:]], prefix, update=True)
        for table, rows in batches:
            _copy(cur, table.name, table.columns, ("machine", "session_id", "id"), rows, prefix, table.upsert)
        _copy(
            cur, "content", CONTENT, ("machine", "session_id", "kind", "ref"), content, prefix, update=False
        )
    for table, rows in batches:
        if rows:
            moved[table.name] = max(moved.get(table.name, 0), rows[-1][0])
    sent = sum(len(rows) for _, rows in batches) + len(content)
    outbox.pushed(box, session_id, moved, sent, final)
    return Pushed(session_id, sent, final)


def push_waiting(team: Team, only: list[str] | None = None) -> tuple[list[Pushed], dict[str, str]]:
    """Push every session the outbox holds as waiting (or `only` these): what was pushed, and the
    error of each session that could not be."""
    from capsem.team.schema import check

    box = outbox.open_outbox()
    try:
        waiting = [
            e for e in outbox.entries(box, waiting=only is None) if only is None or e.session_id in only
        ]
        if not waiting:
            return [], {}
        errors: dict[str, str] = {}
        done: list[Pushed] = []
        try:
            pg = connect_team(team)
        except Exception as exc:
            for e in waiting:
                errors[e.session_id] = f"cannot reach {team.where}: {team.said(exc)}"
                outbox.failed(box, e.session_id, errors[e.session_id])
            return [], errors
        try:
            check(pg)
            for e in waiting:
                try:
                    current = e.pushed_at is not None and e.error is None
                    pushed = push_session(pg, team, box, e.session_id, e.cursors, current=current)
                    if pushed is not None:
                        done.append(pushed)
                except Exception as exc:  # this session's turn failed; the others still go
                    errors[e.session_id] = team.said(exc)
                    outbox.failed(box, e.session_id, errors[e.session_id])
                    if pg.closed or pg.broken:
                        break
        except Exception as exc:
            for e in waiting:
                if e.session_id not in errors and e.session_id not in {d.session_id for d in done}:
                    errors[e.session_id] = team.said(exc)
                    outbox.failed(box, e.session_id, errors[e.session_id])
        finally:
            pg.close()
        return done, errors
    finally:
        box.close()


def start_pusher(session_id: str) -> None:
    """Put the session in the outbox and start a pusher (one runs per CAPSEM_HOME; a second one
    exits at once, the first pushes this session too). Never raises: the team is not capture."""
    try:
        box = outbox.open_outbox()
        try:
            outbox.enqueue(box, [session_id])
        finally:
            box.close()
        folder = private_dir(capsem_home() / "team")
        with open_private(folder / "pusher.log", "a") as log:
            subprocess.Popen([sys.executable, "-m", "addons.recorder.team_push"], stdin=subprocess.DEVNULL,
                             stdout=log, stderr=log, start_new_session=True, close_fds=True)  # fmt: skip
    except Exception as exc:
        logger.warning("capsem: the team pusher could not start (%r); `capsem team push` sends the session later",
                       exc)  # fmt: skip


def _lock() -> Any:
    """The pusher's lock file, held; None when another pusher holds it."""
    path = private_dir(capsem_home() / "team") / "pusher.lock"
    handle = open_private(path, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


def _running(session_ids: list[str]) -> bool:
    try:
        main = connect(main_db_path(), readonly=True)
        try:
            marks = ", ".join("?" * len(session_ids))
            sql = f"SELECT COUNT(*) FROM sessions WHERE status = 'running' AND id IN ({marks})"
            return main.execute(sql, session_ids).fetchone()[0] > 0
        finally:
            main.close()
    except sqlite3.Error:
        return True


def run_pusher() -> int:
    """The pusher's loop (see the module's docstring)."""
    team = team_of()
    if team is None:
        return 0
    said: dict[str, str] = {}
    while True:
        lock = _lock()
        if lock is None:
            return 0
        last_progress = time.monotonic()
        try:
            while True:
                box = outbox.open_outbox()
                try:
                    waiting = [e.session_id for e in outbox.entries(box, waiting=True)]
                finally:
                    box.close()
                if not waiting:
                    break
                done, errors = push_waiting(team)
                if done:
                    last_progress = time.monotonic()
                for session_id, error in errors.items():  # once per error, not once per attempt
                    if said.get(session_id) != error:
                        said[session_id] = error
                        logger.warning("capsem team: %s not pushed yet: %s", session_id, error)
                for pushed in done:
                    if said.pop(pushed.session_id, None) is not None:
                        logger.warning("capsem team: %s pushed again", pushed.session_id)
                if errors and not _running(waiting) and time.monotonic() - last_progress > GIVE_UP_SECONDS:
                    return 1
                time.sleep(PUSH_SECONDS)
        finally:
            lock.close()
        box = outbox.open_outbox()  # enqueued while we were letting go? then go on
        try:
            if not outbox.entries(box, waiting=True):
                return 0
        finally:
            box.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    sys.exit(run_pusher())
