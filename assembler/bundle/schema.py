"""The bundle's tables: the seed's, the capture tables, process diagnostics, and `sources`.

Seed tables (bundle_meta, sessions, logs, slice_items, tool_invocations, prompt_events, files)
keep the seed's columns and add `source_id` (the `sources` row the record came from), `raw`
(the record as read, after redaction: lossless) and `correlation` (how the row's session was
found: `explicit`, `process`, `time`, `directory`, or NULL when unknown).

The capture tables (net_events, model_calls, tool_calls, tool_responses, mcp_calls, fs_events,
proc_samples, proc_anomalies) take their columns from capsem's own session.db migrations, so a
new capsem column reaches bundles without editing this file; each gets a leading `session_id`
and the key `(session_id, id)`. A session.db table or column this capsem does not know is added
on the fly (`ensure_capture_table`).

`SCHEMA_VERSION` is stored in `bundle_meta.schema_version` and `PRAGMA user_version`; a bundle
with a higher number is refused by `DebugBundle.open`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from capsem.packed import register as register_packed
from capsem.store.schema import SESSION_MIGRATIONS, STORAGE_TABLES, migrate

SCHEMA_VERSION = 1

# Tables capsem itself keeps in session.db that are not data (never copied into a bundle).
CAPTURE_INTERNAL = frozenset(
    {"_capsem_migrations", "session_meta", "sqlite_sequence", "event_body_blobs", *STORAGE_TABLES}
)
"""Tables of a session.db that a bundle does not copy: bookkeeping, the whole bodies (compressed pieces;
`capsem show-call` reads them from the session), and compressed item contents (copied as text from their
view, `CAPTURE_VIEWS`)."""
CAPTURE_VIEWS = ("item_contents",)
"""Views of a session.db that a bundle copies as tables (Datasette has no `unzstd`)."""
# Extra columns every capture table carries in a bundle.
CAPTURE_EXTRA = (("source_id", "INTEGER"), ("correlation", "TEXT"), ("raw", "TEXT"))

SEED_TABLES = """
CREATE TABLE bundle_meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    bundle_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    capsem_version TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    root_session_id TEXT,
    source_directory TEXT,
    description TEXT,
    tags TEXT
);
CREATE TABLE sources (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    kind TEXT NOT NULL,
    sha256 TEXT,
    size INTEGER,
    records INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    warnings TEXT,
    detail TEXT,
    imported_at TEXT
);
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    parent_session_id TEXT REFERENCES sessions(session_id),
    created_at TEXT NOT NULL,
    tags TEXT,
    kind TEXT NOT NULL,
    ended_at TEXT,
    status TEXT,
    command TEXT,
    correlated_session_id TEXT REFERENCES sessions(session_id),
    correlation TEXT,
    source_id INTEGER REFERENCES sources(id),
    raw TEXT
);
CREATE INDEX idx_sessions_parent ON sessions(parent_session_id);
CREATE TABLE logs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT REFERENCES sessions(session_id),
    timestamp TEXT,
    level TEXT NOT NULL,
    logger TEXT NOT NULL,
    event TEXT,
    message TEXT NOT NULL,
    context TEXT,
    source_id INTEGER REFERENCES sources(id),
    line INTEGER,
    correlation TEXT,
    raw TEXT
);
CREATE INDEX idx_logs_session ON logs(session_id);
CREATE INDEX idx_logs_level ON logs(level);
CREATE INDEX idx_logs_event ON logs(event);
CREATE INDEX idx_logs_timestamp ON logs(timestamp);
CREATE TABLE slice_items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    slice_type TEXT NOT NULL,
    item_index INTEGER NOT NULL,
    item_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    source_id INTEGER REFERENCES sources(id),
    line INTEGER
);
CREATE INDEX idx_slice_items_session ON slice_items(session_id);
CREATE INDEX idx_slice_items_type ON slice_items(slice_type);
CREATE INDEX idx_slice_items_item_type ON slice_items(item_type);
CREATE TABLE tool_invocations (
    event_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    prompt_name TEXT NOT NULL,
    adapter TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    call_id TEXT,
    timestamp TEXT NOT NULL,
    params TEXT NOT NULL,
    result_success INTEGER NOT NULL,
    result_message TEXT,
    result_value TEXT,
    rendered_output TEXT,
    input_tokens INTEGER,
    output_tokens INTEGER,
    cached_tokens INTEGER,
    source_id INTEGER REFERENCES sources(id),
    raw TEXT
);
CREATE INDEX idx_tools_session ON tool_invocations(session_id);
CREATE INDEX idx_tools_name ON tool_invocations(tool_name);
CREATE INDEX idx_tools_success ON tool_invocations(result_success);
CREATE INDEX idx_tools_timestamp ON tool_invocations(timestamp);
CREATE TABLE prompt_events (
    event_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    event_type TEXT NOT NULL,
    prompt_ns TEXT,
    prompt_key TEXT,
    prompt_name TEXT,
    adapter TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    rendered_text TEXT,
    char_count INTEGER,
    tool_count INTEGER,
    tool_names TEXT,
    result TEXT,
    input_tokens INTEGER,
    output_tokens INTEGER,
    total_tokens INTEGER,
    cached_tokens INTEGER,
    source_id INTEGER REFERENCES sources(id),
    raw TEXT
);
CREATE INDEX idx_prompt_events_session ON prompt_events(session_id);
CREATE INDEX idx_prompt_events_type ON prompt_events(event_type);
CREATE INDEX idx_prompt_events_timestamp ON prompt_events(timestamp);
CREATE TABLE files (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    archive_id TEXT NOT NULL,
    session_id TEXT REFERENCES sessions(session_id),
    path TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    content TEXT,
    is_binary INTEGER NOT NULL DEFAULT 0,
    data BLOB,
    sha256 TEXT,
    modified_at TEXT,
    truncated INTEGER NOT NULL DEFAULT 0,
    source_id INTEGER REFERENCES sources(id),
    correlation TEXT
);
CREATE INDEX idx_files_session ON files(session_id);
CREATE INDEX idx_files_path ON files(path);
CREATE INDEX idx_files_archive ON files(archive_id);
CREATE TABLE diag_sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT REFERENCES sessions(session_id),
    record_kind TEXT NOT NULL,
    dir_name TEXT,
    pid INTEGER,
    cwd TEXT,
    skill_command TEXT,
    success INTEGER,
    subtype TEXT,
    exit_code INTEGER,
    start_ts TEXT,
    end_ts TEXT,
    duration_seconds REAL,
    termination_reason TEXT,
    snapshot_count INTEGER,
    anomaly_count INTEGER,
    peak_rss_kb INTEGER,
    peak_oom_score INTEGER,
    input_tokens INTEGER,
    output_tokens INTEGER,
    source_id INTEGER REFERENCES sources(id),
    line INTEGER,
    raw TEXT
);
CREATE INDEX idx_diag_sessions_session ON diag_sessions(session_id);
CREATE TABLE documents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT REFERENCES sessions(session_id),
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    source_id INTEGER REFERENCES sources(id),
    correlation TEXT,
    raw TEXT NOT NULL
);
"""


def _capsem_columns() -> dict[str, list[tuple[str, str]]]:
    """Columns (name, declared type) of every data table of a current capsem session.db."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    register_packed(conn)
    try:
        migrate(conn, SESSION_MIGRATIONS)
        names = [
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")
        ]
        return {
            name: table_columns(conn, name)
            for name in [*names, *CAPTURE_VIEWS]
            if name not in CAPTURE_INTERNAL
        }
    finally:
        conn.close()


def table_columns(conn: sqlite3.Connection, table: str, schema: str = "main") -> list[tuple[str, str]]:
    """(name, declared type) of each column of `table`, in order."""
    return [(r[1], r[2] or "") for r in conn.execute(f"PRAGMA {schema}.table_info({quote(table)})")]


def quote(name: str) -> str:
    """An SQL identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


CAPTURE_TABLES: dict[str, list[tuple[str, str]]] = _capsem_columns()


def ensure_capture_table(conn: sqlite3.Connection, table: str, columns: Iterable[tuple[str, str]]) -> None:
    """Create a capture table (`session_id` + `columns` + extras, key (session_id, id)) or add the
    columns it lacks."""
    columns = [(n, t) for n, t in columns if n not in ("session_id", *(e for e, _ in CAPTURE_EXTRA))]
    have = {n for n, _ in table_columns(conn, table)}
    if not have:
        cols = ["session_id TEXT NOT NULL REFERENCES sessions(session_id)"]
        cols += [f"{quote(n)} {t}".strip() for n, t in columns]
        cols += [f"{n} {t}" for n, t in CAPTURE_EXTRA]
        key = ", PRIMARY KEY (session_id, id)" if any(n == "id" for n, _ in columns) else ""
        conn.execute(f"CREATE TABLE {quote(table)} ({', '.join(cols)}{key})")
        if any(n == "timestamp" for n, _ in columns):
            conn.execute(
                f"CREATE INDEX {quote('idx_' + table + '_ts')} ON {quote(table)}(session_id, timestamp)"
            )
        return
    for name, decl in columns:
        if name not in have:
            conn.execute(f"ALTER TABLE {quote(table)} ADD COLUMN {quote(name)} {decl}".strip())


def create_schema(conn: sqlite3.Connection) -> None:
    """Create every table of an empty bundle (views come later, from `views.create_views`)."""
    for statement in SEED_TABLES.split(";"):
        if statement.strip():
            conn.execute(statement)
    for table, columns in CAPTURE_TABLES.items():
        ensure_capture_table(conn, table, columns)
    conn.execute("CREATE INDEX idx_model_calls_trace ON model_calls(session_id, trace_id, id)")
    conn.execute("CREATE INDEX idx_tool_calls_call ON tool_calls(session_id, call_id)")
    conn.execute("CREATE INDEX idx_tool_responses_call ON tool_responses(session_id, call_id)")
    conn.execute("CREATE INDEX idx_proc_samples_pid ON proc_samples(pid, ts)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
