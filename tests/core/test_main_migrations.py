"""main.db migrations of issue 18: the token breakdown and the exit code, on a main.db of the
previous schema (rows kept, new columns zero or NULL), and a rollup that fills them."""

from __future__ import annotations

import contextlib
import sqlite3

from capsem.store.schema import MAIN_MIGRATIONS, migrate


def test_token_breakdown_and_exit_code_on_an_older_main_db(tmp_path):
    conn = sqlite3.connect(tmp_path / "main.db", isolation_level=None)
    names = [name for name, _ in MAIN_MIGRATIONS]
    older = MAIN_MIGRATIONS[: names.index("m004_token_breakdown")]
    migrate(conn, older)
    conn.execute("INSERT INTO sessions (id, created_at) VALUES ('old', '2026-11-02T10:00:00.000Z')")
    conn.execute("INSERT INTO ai_usage (session_id, provider, model, call_count, estimated_cost) "
                 "VALUES ('old', 'anthropic', 'claude', 2, 0.5)")  # fmt: skip
    assert migrate(conn, MAIN_MIGRATIONS)[:3] == [
        "m004_token_breakdown",
        "m005_exit_code",
        "m006_otlp_exports",
    ]
    row = conn.execute(
        "SELECT total_cache_read_tokens, total_cache_write_tokens, exit_code FROM sessions"
    ).fetchone()
    assert row == (0, 0, None)
    usage = conn.execute(
        "SELECT call_count, cache_read_tokens, input_cost, estimated_cost FROM ai_usage"
    ).fetchone()
    assert usage == (2, 0, 0.0, 0.5)
    assert migrate(conn, MAIN_MIGRATIONS) == []  # applied once


def test_two_processes_migrating_the_same_file_take_turns(tmp_path):
    """The recorder and `capsem run`'s workspace watcher may open a new session.db together."""
    import threading

    from capsem.store.schema import SESSION_MIGRATIONS, open_session_db

    errors = []

    def open_it() -> None:
        try:
            open_session_db(tmp_path / "session.db").close()
        except Exception as exc:  # pragma: no cover - the failure this test is about
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    conn = sqlite3.connect(tmp_path / "session.db")
    assert len(conn.execute("SELECT name FROM _capsem_migrations").fetchall()) == len(SESSION_MIGRATIONS)


def test_opening_waits_for_the_write_lock_of_a_file_not_yet_in_wal_mode(tmp_path):
    """What made the test above fail under load: turning a file to WAL while another connection
    holds its write lock (still a rollback journal) is refused at once, not after the busy timeout."""
    import threading

    from capsem.store.schema import connect

    path = tmp_path / "session.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, holder.execute, ("COMMIT",)).start()
    with contextlib.closing(connect(path, timeout=5.0)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    holder.close()


def test_culled_keep_and_context_on_an_older_main_db(tmp_path):
    """Issue 25: sessions culled before m007 (status `terminated`) read `culled`; `keep` is 0; the
    run context columns and `session_tags` exist and are empty."""
    conn = sqlite3.connect(tmp_path / "main.db", isolation_level=None)
    names = [name for name, _ in MAIN_MIGRATIONS]
    migrate(conn, MAIN_MIGRATIONS[: names.index("m007_culled_and_keep")])
    conn.execute(
        "INSERT INTO sessions (id, status, created_at) VALUES ('gone', 'terminated', '2026-11-02T10:00:00Z')"
    )
    conn.execute(
        "INSERT INTO sessions (id, status, created_at) VALUES ('here', 'stopped', '2026-11-02T11:00:00Z')"
    )
    assert migrate(conn, MAIN_MIGRATIONS)[:2] == ["m007_culled_and_keep", "m008_session_context"]
    rows = conn.execute(
        "SELECT id, status, keep, culled_reason, project, name FROM sessions ORDER BY id"
    ).fetchall()
    assert rows == [("gone", "culled", 0, None, None, None), ("here", "stopped", 0, None, None, None)]
    assert conn.execute("SELECT COUNT(*) FROM session_tags").fetchone() == (0,)
