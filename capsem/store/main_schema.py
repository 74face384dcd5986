"""main.db, as named migrations (`capsem.store.migrations`): one function per step, named once.

Column names follow Capsem's main.db (DESIGN.md), so tools written for it work on ours. Never
rename or edit a shipped migration; add a new one at the end.
"""

from __future__ import annotations

import sqlite3

from capsem.store.migrations import Migrations, run_script

MAIN = Migrations()
"""main.db's migrations, in order."""


# Long: a migration's DDL (every table of the first schema), frozen once shipped.
@MAIN.migration
def m001_initial(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            mode TEXT NOT NULL DEFAULT 'mitmdump',
            command TEXT,
            status TEXT NOT NULL DEFAULT 'running',
            created_at TEXT NOT NULL,
            stopped_at TEXT,
            total_requests INTEGER NOT NULL DEFAULT 0,
            allowed_requests INTEGER NOT NULL DEFAULT 0,
            denied_requests INTEGER NOT NULL DEFAULT 0,
            total_input_tokens INTEGER NOT NULL DEFAULT 0,
            total_output_tokens INTEGER NOT NULL DEFAULT 0,
            total_estimated_cost REAL NOT NULL DEFAULT 0,
            total_tool_calls INTEGER NOT NULL DEFAULT 0,
            total_mcp_calls INTEGER NOT NULL DEFAULT 0,
            total_file_events INTEGER NOT NULL DEFAULT 0,
            -- capsem additions
            total_model_calls INTEGER NOT NULL DEFAULT 0,
            error_requests INTEGER NOT NULL DEFAULT 0,
            unpriced_calls INTEGER NOT NULL DEFAULT 0,
            compressed_size_bytes INTEGER,
            vacuumed_at TEXT,
            capsem_version TEXT,
            pid INTEGER,
            pid_started_at REAL,
            hostname TEXT,
            rolled_up_at TEXT
        );
        CREATE INDEX idx_sessions_created ON sessions(created_at);
        CREATE INDEX idx_sessions_status ON sessions(status);
        CREATE TABLE ai_usage (
            session_id TEXT NOT NULL,
            provider TEXT NOT NULL,
            model TEXT NOT NULL DEFAULT '',
            call_count INTEGER NOT NULL DEFAULT 0,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            estimated_cost REAL NOT NULL DEFAULT 0,
            total_duration_ms INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (session_id, provider, model)
        );
        CREATE TABLE tool_usage (
            session_id TEXT NOT NULL,
            tool_name TEXT NOT NULL,
            call_count INTEGER NOT NULL DEFAULT 0,
            total_bytes INTEGER NOT NULL DEFAULT 0,
            total_duration_ms INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (session_id, tool_name)
        );
        CREATE TABLE mcp_usage (
            session_id TEXT NOT NULL,
            server_name TEXT NOT NULL,
            tool_name TEXT NOT NULL DEFAULT '',
            call_count INTEGER NOT NULL DEFAULT 0,
            total_bytes INTEGER NOT NULL DEFAULT 0,
            total_duration_ms INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (session_id, server_name, tool_name)
        );
        """,
    )


@MAIN.migration
def m002_capture_health(conn: sqlite3.Connection) -> None:
    """Whether recording itself worked: `ok`, `degraded` (rows or chunks lost, commits failed) or
    `failed` (the recorder process died), how many rows were lost, and the last error."""
    run_script(
        conn,
        """
        ALTER TABLE sessions ADD COLUMN capture_status TEXT;
        ALTER TABLE sessions ADD COLUMN capture_rows_lost INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN capture_error TEXT
        """,
    )


@MAIN.migration
def m003_spend(conn: sqlite3.Connection) -> None:
    """The spend ledger budgets read: cost per session, UTC day, provider, model and host. A running
    session's recorder keeps its rows current; the rollup recomputes them from session.db. Sessions
    rolled up before it get one row per provider and model, on the day they started (host unknown)."""
    run_script(
        conn,
        """
        CREATE TABLE spend (
            session_id TEXT NOT NULL,
            day TEXT NOT NULL,
            provider TEXT NOT NULL,
            model TEXT NOT NULL DEFAULT '',
            host TEXT NOT NULL DEFAULT '',
            call_count INTEGER NOT NULL DEFAULT 0,
            estimated_cost REAL NOT NULL DEFAULT 0,
            PRIMARY KEY (session_id, day, provider, model, host)
        );
        CREATE INDEX idx_spend_day ON spend(day);
        INSERT INTO spend (session_id, day, provider, model, host, call_count, estimated_cost)
            SELECT a.session_id, substr(s.created_at, 1, 10), a.provider, a.model, '', a.call_count, a.estimated_cost
            FROM ai_usage a JOIN sessions s ON s.id = a.session_id
        """,
    )


@MAIN.migration
def m004_token_breakdown(conn: sqlite3.Connection) -> None:
    """Cache reads, cache writes and reasoning beside the inclusive token totals, and the cost by
    token type per provider and model (uncached input, cache writes, cache reads, output other
    than reasoning, reasoning: they add up to `estimated_cost`)."""
    run_script(
        conn,
        """
        ALTER TABLE sessions ADD COLUMN total_cache_read_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN total_cache_write_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN total_reasoning_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE ai_usage ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE ai_usage ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE ai_usage ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE ai_usage ADD COLUMN input_cost REAL NOT NULL DEFAULT 0;
        ALTER TABLE ai_usage ADD COLUMN cache_write_cost REAL NOT NULL DEFAULT 0;
        ALTER TABLE ai_usage ADD COLUMN cache_read_cost REAL NOT NULL DEFAULT 0;
        ALTER TABLE ai_usage ADD COLUMN output_cost REAL NOT NULL DEFAULT 0;
        ALTER TABLE ai_usage ADD COLUMN reasoning_cost REAL NOT NULL DEFAULT 0
        """,
    )


@MAIN.migration
def m005_exit_code(conn: sqlite3.Connection) -> None:
    """The exit code of the agent `capsem run` ran (NULL for a plain mitmdump session)."""
    conn.execute("ALTER TABLE sessions ADD COLUMN exit_code INTEGER")


@MAIN.migration
def m006_otlp_exports(conn: sqlite3.Connection) -> None:
    """The OTLP export watermark, per session and endpoint: every span of the model calls up to
    `model_call_id` and of the MCP calls up to `mcp_call_id` was accepted by the endpoint, and with
    `done` the session's closing spans (its turns) too. Live export and `capsem export otlp` both
    start after it, so nothing is sent twice."""
    run_script(
        conn,
        """
        CREATE TABLE otlp_exports (
            session_id TEXT NOT NULL,
            endpoint TEXT NOT NULL,
            model_call_id INTEGER NOT NULL DEFAULT 0,
            mcp_call_id INTEGER NOT NULL DEFAULT 0,
            done INTEGER NOT NULL DEFAULT 0,
            spans INTEGER NOT NULL DEFAULT 0,
            updated_at TEXT,
            PRIMARY KEY (session_id, endpoint)
        )
        """,
    )


@MAIN.migration
def m007_culled_and_keep(conn: sqlite3.Connection) -> None:
    """Retention says what it did: a culled session has status `culled` (it was `terminated`, which
    reads as "the agent was killed"), with when and why; `keep` (set by `capsem keep ID`) exempts a
    session from every cull."""
    run_script(
        conn,
        """
        ALTER TABLE sessions ADD COLUMN keep INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN culled_at TEXT;
        ALTER TABLE sessions ADD COLUMN culled_reason TEXT;
        UPDATE sessions SET status = 'culled' WHERE status = 'terminated'
        """,
    )


@MAIN.migration
def m008_session_context(conn: sqlite3.Connection) -> None:
    """Where a `capsem run` ran and what the user called it: the workspace, its git repository
    (top-level directory), branch and commit at start, `project` (the repository's folder name, else
    the workspace's), `--name`, and its `--tag`s (one row each in `session_tags`)."""
    run_script(
        conn,
        """
        ALTER TABLE sessions ADD COLUMN name TEXT;
        ALTER TABLE sessions ADD COLUMN workspace TEXT;
        ALTER TABLE sessions ADD COLUMN project TEXT;
        ALTER TABLE sessions ADD COLUMN git_repo TEXT;
        ALTER TABLE sessions ADD COLUMN git_branch TEXT;
        ALTER TABLE sessions ADD COLUMN git_commit TEXT;
        CREATE TABLE session_tags (
            session_id TEXT NOT NULL,
            tag TEXT NOT NULL,
            PRIMARY KEY (session_id, tag)
        );
        CREATE INDEX idx_session_tags_tag ON session_tags(tag)
        """,
    )


@MAIN.migration
def m009_outcome_counts(conn: sqlite3.Connection) -> None:
    """Where capsem stepped in and what went wrong, counted as `capsem.outcomes` defines them (the
    CLI, the list and the pages count the same): warned and asked requests (denied ones are
    `denied_requests`), credential placeholders refused, and errors (failed model calls, other failed
    requests, tool results marked as errors). Sessions rolled up earlier keep zeros until rolled up again."""
    run_script(
        conn,
        """
        ALTER TABLE sessions ADD COLUMN warned_requests INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN asked_requests INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN refused_placeholders INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN total_errors INTEGER NOT NULL DEFAULT 0
        """,
    )


@MAIN.migration
def m010_spend_entries(conn: sqlite3.Connection) -> None:
    """The spend ledger insert-only: a session's spend per key (UTC day, provider, model, host) is
    a new `spend_entries` row each time it changes (the recorder's running totals, then the
    rollup's final ones; `call_count` 0 marks a key the rollup no longer finds), and `spend` is
    the view of each key's latest row, so budgets and `capsem costs` read it as before."""
    run_script(
        conn,
        """
        CREATE TABLE spend_entries (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            day TEXT NOT NULL,
            provider TEXT NOT NULL,
            model TEXT NOT NULL DEFAULT '',
            host TEXT NOT NULL DEFAULT '',
            call_count INTEGER NOT NULL DEFAULT 0,
            estimated_cost REAL NOT NULL DEFAULT 0
        );
        INSERT INTO spend_entries (session_id, day, provider, model, host, call_count, estimated_cost)
            SELECT session_id, day, provider, model, host, call_count, estimated_cost FROM spend;
        DROP TABLE spend;
        CREATE INDEX idx_spend_entries_key ON spend_entries(session_id, day, provider, model, host, id);
        CREATE INDEX idx_spend_entries_day ON spend_entries(day);
        CREATE VIEW spend AS
            SELECT session_id, day, provider, model, host, call_count, estimated_cost FROM spend_entries
            WHERE id IN (SELECT MAX(id) FROM spend_entries GROUP BY session_id, day, provider, model, host)
              AND call_count > 0
        """,
    )


@MAIN.migration
def m011_cache_break_cost(conn: sqlite3.Connection) -> None:
    """What prompt-cache breaks cost over reading from the cache, per session and per model."""
    run_script(
        conn,
        """
        ALTER TABLE ai_usage ADD COLUMN cache_break_cost REAL NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN lost_to_cache_breaks REAL NOT NULL DEFAULT 0
        """,
    )


@MAIN.migration
def m012_replay_of(conn: sqlite3.Connection) -> None:
    """`capsem replay`: the session a replay session answered its calls from."""
    conn.execute("ALTER TABLE sessions ADD COLUMN replay_of TEXT")


@MAIN.migration
def m013_emulated(conn: sqlite3.Connection) -> None:
    """Sessions whose answers cost nothing (`run --emulator`, `demo`, a replay from the recording):
    left out of budgets (the `spend` ledger's view skips them) and cost totals. Earlier replays
    and demos are known by their rows."""
    run_script(
        conn,
        """
        ALTER TABLE sessions ADD COLUMN emulated INTEGER NOT NULL DEFAULT 0;
        UPDATE sessions SET emulated = 1 WHERE replay_of IS NOT NULL OR mode = 'demo';
        DROP VIEW spend;
        CREATE VIEW spend AS
            SELECT session_id, day, provider, model, host, call_count, estimated_cost FROM spend_entries
            WHERE id IN (SELECT MAX(id) FROM spend_entries GROUP BY session_id, day, provider, model, host)
              AND call_count > 0
              AND session_id NOT IN (SELECT id FROM sessions WHERE emulated = 1)
        """,
    )


@MAIN.migration
def m014_ledger(conn: sqlite3.Connection) -> None:
    """main.db's chain of sessions (`capsem/store/sessions_chain.py`): each session's final head
    when it ends (`end`), and each session retention removes (`cull`), so a session that
    disappears is noticed. Each entry's running `chain` value is signed with the ledger key.
    (m015 is the team's.)"""
    run_script(
        conn,
        """
        CREATE TABLE ledger_sessions (
            seq INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,
            session_id TEXT NOT NULL,
            batch INTEGER,
            head BLOB,
            at TEXT NOT NULL,
            chain BLOB NOT NULL,
            key_id TEXT NOT NULL,
            signature BLOB NOT NULL
        );
        CREATE INDEX idx_ledger_sessions_session ON ledger_sessions(session_id)
        """,
    )
