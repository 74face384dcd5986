"""The team's PostgreSQL schema, versioned: `capsem team init` creates it or brings it up to
date, one transaction per step; a server whose schema is newer than this capsem knows is refused
(never written to by an older client). Everything lives in the PostgreSQL schema `capsem`.

Every pushed row is keyed by (machine, session_id, id): session ids are unique per machine, row
ids per session.db, so a push repeated after a timeout or by `capsem team push` lands on the
rows it already wrote (`ON CONFLICT`) and never counts twice.
"""

from __future__ import annotations

from typing import Any

VERSION = 1
"""The newest schema this capsem writes."""

_KEY = "machine TEXT NOT NULL, session_id TEXT NOT NULL"

STEPS: dict[int, str] = {
    1: f"""
    CREATE TABLE capsem.sessions (
        {_KEY}, "user" TEXT NOT NULL, mode TEXT, program TEXT, status TEXT NOT NULL,
        created_at TEXT NOT NULL, day DATE NOT NULL, stopped_at TEXT, emulated BOOLEAN NOT NULL DEFAULT FALSE,
        replay_of TEXT, name TEXT, project TEXT, git_branch TEXT, tags TEXT[] NOT NULL DEFAULT '{{}}',
        total_requests BIGINT NOT NULL DEFAULT 0, denied_requests BIGINT NOT NULL DEFAULT 0,
        warned_requests BIGINT NOT NULL DEFAULT 0, total_errors BIGINT NOT NULL DEFAULT 0,
        total_model_calls BIGINT NOT NULL DEFAULT 0, total_tool_calls BIGINT NOT NULL DEFAULT 0,
        total_mcp_calls BIGINT NOT NULL DEFAULT 0, unpriced_calls BIGINT NOT NULL DEFAULT 0,
        total_input_tokens BIGINT NOT NULL DEFAULT 0, total_output_tokens BIGINT NOT NULL DEFAULT 0,
        total_estimated_cost DOUBLE PRECISION NOT NULL DEFAULT 0,
        lost_to_cache_breaks DOUBLE PRECISION NOT NULL DEFAULT 0,
        share TEXT NOT NULL, pushed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        PRIMARY KEY (machine, session_id)
    );
    CREATE INDEX sessions_day ON capsem.sessions (day);
    CREATE TABLE capsem.model_calls (
        {_KEY}, id BIGINT NOT NULL, ts TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
        host TEXT, protocol TEXT, status_code INT, stream BOOLEAN,
        input_tokens BIGINT, output_tokens BIGINT, cache_read_tokens BIGINT NOT NULL DEFAULT 0,
        cache_write_tokens BIGINT NOT NULL DEFAULT 0, reasoning_tokens BIGINT NOT NULL DEFAULT 0,
        cost DOUBLE PRECISION, input_cost DOUBLE PRECISION NOT NULL DEFAULT 0,
        cache_write_cost DOUBLE PRECISION NOT NULL DEFAULT 0, cache_read_cost DOUBLE PRECISION NOT NULL DEFAULT 0,
        output_cost DOUBLE PRECISION NOT NULL DEFAULT 0, reasoning_cost DOUBLE PRECISION NOT NULL DEFAULT 0,
        duration_ms BIGINT NOT NULL DEFAULT 0, ttft_ms BIGINT, stop_reason TEXT, error_type TEXT,
        trace_id TEXT, price_source TEXT,
        PRIMARY KEY (machine, session_id, id)
    );
    CREATE TABLE capsem.tool_calls (
        {_KEY}, id BIGINT NOT NULL, model_call_id BIGINT, ts TEXT, tool_name TEXT NOT NULL, origin TEXT,
        status TEXT, decision TEXT, duration_ms BIGINT, server_name TEXT,
        PRIMARY KEY (machine, session_id, id)
    );
    CREATE TABLE capsem.mcp_calls (
        {_KEY}, id BIGINT NOT NULL, ts TEXT NOT NULL, server_name TEXT, method TEXT, tool_name TEXT,
        decision TEXT, duration_ms BIGINT, failed BOOLEAN NOT NULL DEFAULT FALSE,
        PRIMARY KEY (machine, session_id, id)
    );
    CREATE TABLE capsem.net_events (
        {_KEY}, id BIGINT NOT NULL, ts TEXT NOT NULL, domain TEXT, method TEXT, status_code INT,
        decision TEXT, matched_rule TEXT, error TEXT, provider TEXT, duration_ms BIGINT,
        PRIMARY KEY (machine, session_id, id)
    );
    CREATE TABLE capsem.cache_breaks (
        {_KEY}, id BIGINT NOT NULL, model_call_id BIGINT NOT NULL, cause TEXT, cached_tokens BIGINT,
        read_tokens BIGINT, extra_cost_usd DOUBLE PRECISION,
        PRIMARY KEY (machine, session_id, id)
    );
    CREATE TABLE capsem.approvals (
        {_KEY}, id BIGINT NOT NULL, rule TEXT, asked_at TEXT, decision TEXT, decided_by TEXT,
        waited_ms BIGINT, host TEXT, mcp_server TEXT, tool TEXT,
        PRIMARY KEY (machine, session_id, id)
    );
    CREATE TABLE capsem.content (
        {_KEY}, kind TEXT NOT NULL, ref BIGINT NOT NULL, body TEXT NOT NULL,
        PRIMARY KEY (machine, session_id, kind, ref)
    );
    CREATE TABLE capsem.budgets (
        name TEXT NOT NULL, period TEXT NOT NULL, limit_usd DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (name, period)
    );
    CREATE TABLE capsem.leases (
        name TEXT NOT NULL, period TEXT NOT NULL, {_KEY},
        granted_usd DOUBLE PRECISION NOT NULL DEFAULT 0, used_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
        closed BOOLEAN NOT NULL DEFAULT FALSE, renewed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        PRIMARY KEY (name, period, machine, session_id)
    )
    """,
}
"""Step n brings the schema from version n-1 to n. Never edit a shipped step; add the next."""


class SchemaError(Exception):
    """The team database cannot be used by this capsem (missing, or newer)."""


def version(conn: Any) -> int:
    """The team schema's version on the server (0: none)."""
    row = conn.execute("SELECT to_regclass('capsem.meta')").fetchone()
    if row[0] is None:
        return 0
    found = conn.execute("SELECT value FROM capsem.meta WHERE key = 'schema_version'").fetchone()
    return int(found[0]) if found else 0


def check(conn: Any) -> None:
    """Raise SchemaError unless the server's schema is the one this capsem writes."""
    found = version(conn)
    if found == VERSION:
        return
    if found > VERSION:
        raise SchemaError(f"the team database's schema is version {found}, newer than this capsem's "
                          f"({VERSION}): upgrade capsem on this machine")  # fmt: skip
    raise SchemaError(f"the team database's schema is version {found}, this capsem needs {VERSION}: "
                      "run `capsem team init`")  # fmt: skip


def init(conn: Any) -> tuple[int, int]:
    """Create or migrate the team schema, each step in its own transaction (under an advisory lock,
    so two machines running `team init` at once do not race). Returns (version before, after).

    Raises:
        SchemaError: the server's schema is newer than this capsem's.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(7238)")
        conn.execute("CREATE SCHEMA IF NOT EXISTS capsem")
        conn.execute("CREATE TABLE IF NOT EXISTS capsem.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        before = version(conn)
        if before > VERSION:
            raise SchemaError(f"the team database's schema is version {before}, newer than this capsem's "
                              f"({VERSION}): upgrade capsem before running team init")  # fmt: skip
        for step in range(before + 1, VERSION + 1):
            conn.execute(STEPS[step])
            conn.execute("INSERT INTO capsem.meta VALUES ('schema_version', %s) ON CONFLICT (key) DO UPDATE "
                         "SET value = EXCLUDED.value", (str(step),))  # fmt: skip
    return before, VERSION
