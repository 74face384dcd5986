"""Verifying sessions under `$CAPSEM_HOME`: each session's chain (`capsem/store/verify.py`) read
from its session.db (or session.db.gz), main.db's chain of sessions, and the sessions it or
main.db's `sessions` table know whose folder is gone.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from assembler.sessiondb import MainDbMissing, SessionDbError, db_file, open_main, open_path
from capsem.paths import capsem_home
from capsem.store.keys import PUB_NAME, load_public
from capsem.store.sessions_chain import Entry, entries
from capsem.store.verify import Problem, Verdict, verify_session, verify_sessions_chain

GONE = ("culled", "terminated")


@dataclass
class HomeReport:
    """What `capsem verify` found: one verdict per session, main.db's chain's problems."""

    sessions: list[Verdict] = field(default_factory=list)
    chain: list[Problem] = field(default_factory=list)
    chain_entries: int = 0
    no_key: str | None = None

    @property
    def ok(self) -> bool:
        return self.no_key is None and not self.chain and all(v.ok for v in self.sessions)

    @property
    def uncovered(self) -> bool:
        """Only sessions that cannot be checked failed (recorded before the ledger, or no key)."""
        return self.no_key is not None or (
            not self.chain
            and all(v.ok or {p.what for p in v.problems} == {"uncovered"} for v in self.sessions)
        )


def public_key() -> Ed25519PublicKey | None:
    path = capsem_home() / PUB_NAME
    try:
        return load_public(path)
    except (OSError, ValueError):
        return None


def _main_state() -> tuple[dict[str, dict], list[Entry]]:
    try:
        with open_main() as conn:
            rows = {r["id"]: dict(r) for r in conn.execute("SELECT * FROM sessions")}
            return rows, entries(conn)
    except MainDbMissing:
        return {}, []


def verify_one(session_id: str, public: Ed25519PublicKey | None, row: dict | None,
               recorded: list[Entry]) -> Verdict:  # fmt: skip
    """One session's verdict; a session whose folder is gone is `missing` unless retention culled it."""
    path = db_file(session_id)
    status = row["status"] if row else None
    mine = [e for e in recorded if e.session_id == session_id]
    if path is None:
        verdict = Verdict(session_id)
        culled = any(e.kind == "cull" for e in mine)
        if not culled:
            known = "main.db's chain" if mine else "main.db"
            verdict.problems.append(
                Problem("missing", detail=f"in {known} but its session directory is gone")
            )
        else:
            verdict.note = "culled by retention (recorded in main.db's chain)"
        return verdict
    try:
        with open_path(path) as conn:
            return verify_session(conn, session_id, public, status=status, recorded=mine)
    except (SessionDbError, sqlite3.Error) as exc:
        return Verdict(session_id, [Problem("removed", detail=f"cannot read {path}: {exc}")])


def verify_home(session_ids: list[str] | None) -> HomeReport:
    """Every session (`session_ids` None) or the ones named, and main.db's chain."""
    report = HomeReport()
    public = public_key()
    if public is None:
        report.no_key = f"no readable {capsem_home() / PUB_NAME}: nothing was signed under this CAPSEM_HOME"
    rows, recorded = _main_state()
    report.chain = verify_sessions_chain(recorded, public) if public else []
    report.chain_entries = len(recorded)
    if session_ids is None:
        on_disk = set()
        folder = capsem_home() / "sessions"
        if folder.is_dir():
            on_disk = {p.name for p in folder.iterdir() if p.is_dir()}
        known = {sid for sid, r in rows.items() if r["status"] not in GONE} | {e.session_id for e in recorded}
        session_ids = sorted(on_disk | known)
    for session_id in session_ids:
        report.sessions.append(verify_one(session_id, public, rows.get(session_id), recorded))
    return report
