"""Whether a session verifies, for the pages and commands that show sessions: `inspect-session`
and the session page check in full (`shown`); `list-sessions` marks the sessions that do not
verify (`failing`), with a small cache in `$CAPSEM_HOME/verified.json` keyed by the session
database's size and time (and its -wal's, and `ledger.pub`'s), so a listing verifies only what
changed. The cache only spares time on screen: `capsem verify` never reads it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from assembler.ledger.check import public_key
from assembler.sessiondb import MainDbMissing, db_file, open_main, open_path
from capsem.paths import capsem_home
from capsem.private import write_private
from capsem.store.keys import PUB_NAME
from capsem.store.sessions_chain import entries
from capsem.store.verify import Verdict, verify_session

CACHE_NAME = "verified.json"


def verdict(conn: sqlite3.Connection, session_id: str, status: str | None) -> Verdict:
    """A session's verdict on an open connection (its ledger, main.db's chain, `ledger.pub`)."""
    try:
        with open_main() as main:
            recorded = [e for e in entries(main) if e.session_id == session_id]
    except MainDbMissing:
        recorded = []
    return verify_session(conn, session_id, public_key(), status=status, recorded=recorded)


def shown(v: Verdict) -> tuple[str, str]:
    """(severity, words) of a verdict: info when it verifies, warning when it cannot be checked,
    error naming the first problem when it does not verify."""
    if v.ok:
        end = "signed end" if v.last and v.last.final else v.note or "no signed end"
        return "info", f"verifies: {v.rows:,} rows in {v.batches:,} signed batches, {end}"
    if {p.what for p in v.problems} == {"uncovered"}:
        return "warning", "cannot be verified: recorded before capsem kept a ledger"
    more = f" (+{len(v.problems) - 1} more; capsem verify names them)" if len(v.problems) > 1 else ""
    return "error", f"does not verify: {v.first}{more}"


def _stamp(path: Path) -> list[int]:
    out = []
    for p in (path, path.with_name(path.name + "-wal"), capsem_home() / PUB_NAME):
        try:
            st = p.stat()
            out += [st.st_size, st.st_mtime_ns]
        except OSError:
            out += [-1, -1]
    return out


def failing(rows: list[dict]) -> set[str]:
    """The ids of the listed sessions (main.db rows with a database on disk) that do not verify."""
    cache_path = capsem_home() / CACHE_NAME
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    out, changed = set(), False
    for row in rows:
        path = db_file(row["id"])
        if path is None:
            continue
        stamp = [*_stamp(path), row.get("status") or ""]
        hit = cache.get(row["id"])
        if hit is None or hit[0] != stamp:
            try:
                with open_path(path) as conn:
                    v = verdict(conn, row["id"], row.get("status"))
                bad = shown(v)[0] == "error"
            except (sqlite3.Error, OSError, RuntimeError):
                bad = True
            hit = cache[row["id"]] = [stamp, bad]
            changed = True
        if hit[1]:
            out.add(row["id"])
    if changed:
        try:
            write_private(cache_path, json.dumps(cache))
        except OSError:
            pass
    return out
