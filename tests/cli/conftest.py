"""Fixtures for the CLI tests: a CAPSEM_HOME with one session recorded through real mitmdump,
and helpers that derive more sessions (older, running, empty, crashed...) from that recording."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from assembler.cli import cli
from assembler.demo import anthropic_loop, openai_loop
from capsem.emulator import Emulator
from capsem.rollup import rollup
from capsem.store.schema import open_main_db, open_session_db
from tests.conftest import emulated_client, environ
from tests.ledger.reseal import reseal


@pytest.fixture(scope="session")
def recorded(tmp_path_factory) -> Path:
    """A CAPSEM_HOME holding one stopped session: two tool loops (anthropic + openai)."""
    home = tmp_path_factory.mktemp("recorded-home")
    work = tmp_path_factory.mktemp("recorded-work")
    with environ(CAPSEM_HOME=str(home)), Emulator() as emu, emulated_client(emu, work) as client:
        anthropic_loop(client, lambda _msg: None)
        openai_loop(client, lambda _msg: None)
    (db,) = home.glob("sessions/*/session.db")
    _RECORDED["id"] = db.parent.name
    return home


_RECORDED: dict[str, str] = {}


@pytest.fixture
def home(recorded, capsem_home) -> Path:
    shutil.copytree(recorded, capsem_home)
    return capsem_home


def recorded_id(home: Path) -> str:
    """The id of the session recorded through mitmdump (present in every `home`)."""
    return _RECORDED["id"]


def session_db(home: Path) -> Path:
    """The recorded session's session.db under `home`."""
    return home / "sessions" / recorded_id(home) / "session.db"


def run(*args: str, code: int = 0) -> str:
    """Invoke the CLI; assert the exit code; return stdout and stderr together."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def execute(db: Path, *sql: str) -> None:
    """Run `sql` on a database; on a session.db, re-seal its ledger after (the defect a test makes
    is the subject, not that the record was changed: tests/ledger/ tests that)."""
    conn = sqlite3.connect(db)
    for statement in sql:
        conn.execute(statement)
    conn.commit()
    conn.close()
    if db.name == "session.db":
        with contextlib.suppress(sqlite3.Error):
            reseal(db)


def clone_session(
    home: Path,
    created: datetime,
    *,
    status: str = "stopped",
    empty: bool = False,
    rolled_up: bool = True,
    suffix: str = "0000",
) -> str:
    """A new session made from the recorded one (or an empty session.db), registered in main.db.

    Its totals come from the real rollup; a `running` or not `rolled_up` one keeps zeros.
    """
    session_id = created.strftime("%Y%m%d-%H%M%S-") + suffix
    folder = home / "sessions" / session_id
    folder.mkdir(parents=True)
    if empty:
        open_session_db(folder / "session.db").close()
    else:
        shutil.copy(session_db(home), folder / "session.db")
        reseal(folder / "session.db")  # a copy under another id is a session of its own
    stamp = created.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    stopped = (
        None if status == "running" else (created + timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    )
    main = open_main_db(home / "main.db")
    try:
        main.execute("INSERT INTO sessions (id, mode, status, created_at, stopped_at) VALUES (?, 'mitmdump', ?, ?, ?)",
                     (session_id, status, stamp, stopped))  # fmt: skip
        if rolled_up and status != "running":
            rollup(main, session_id)
    finally:
        main.close()
    return session_id


def days_ago(n: float) -> datetime:
    return datetime.now(UTC).replace(microsecond=0) - timedelta(days=n)


def leave_wal(db: Path, sql: str) -> None:
    """Write `sql` to `db` in WAL mode from a process that dies without closing: a real leftover -wal."""
    code = textwrap.dedent(f"""
        import os, sqlite3
        conn = sqlite3.connect({str(db)!r}, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute({sql!r})
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", code], check=True)
    assert db.with_name(db.name + "-wal").stat().st_size > 0


def main_rows(home: Path) -> dict[str, dict]:
    conn = sqlite3.connect(home / "main.db")
    conn.row_factory = sqlite3.Row
    try:
        return {r["id"]: dict(r) for r in conn.execute("SELECT * FROM sessions")}
    finally:
        conn.close()
