"""session.db, as named migrations (`capsem.store.migrations`): one function per step, named once.

session.db keeps every column of the Capsem seed tables (same names and types) and adds columns
after them. Column meanings that matter are documented in DESIGN.md. Never rename or edit a
shipped migration; add a new one at the end.
"""

from __future__ import annotations

import sqlite3

from capsem.store.migrations import Migrations, run_script

SESSION_TABLES = ("net_events", "model_calls", "tool_calls", "tool_responses", "mcp_calls", "fs_events")
STORAGE_TABLES = ("body_chunks", "content_frames", "item_data")
"""Compressed storage of whole bodies and item contents: read through `addons.bodies.read_body` and
the `item_contents` view; copies and exports take those, not these."""

SESSION = Migrations()
"""session.db's migrations, in order."""


# Long: a migration's DDL (every table of the first schema), frozen once shipped.
@SESSION.migration
def m001_initial(conn: sqlite3.Connection) -> None:
    run_script(
        conn,
        """
        CREATE TABLE net_events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            timestamp TEXT NOT NULL,
            domain TEXT NOT NULL,
            port INTEGER DEFAULT 443,
            decision TEXT NOT NULL,
            process_name TEXT,
            pid INTEGER,
            method TEXT,
            path TEXT,
            query TEXT,
            status_code INTEGER,
            bytes_sent INTEGER DEFAULT 0,
            bytes_received INTEGER DEFAULT 0,
            duration_ms INTEGER DEFAULT 0,
            matched_rule TEXT,
            request_headers TEXT,
            response_headers TEXT,
            request_body_preview TEXT,
            response_body_preview TEXT,
            conn_type TEXT DEFAULT 'https',
            -- capsem additions
            flow_id TEXT,
            error TEXT,
            http_version TEXT,
            client_addr TEXT,
            ttfb_ms INTEGER,
            request_content_type TEXT,
            response_content_type TEXT,
            request_content_encoding TEXT,
            response_content_encoding TEXT,
            decode_error TEXT,
            streamed INTEGER DEFAULT 0,
            provider TEXT,
            trace_id TEXT
        );
        CREATE TABLE model_calls (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            timestamp TEXT NOT NULL,
            provider TEXT NOT NULL,
            model TEXT,
            process_name TEXT,
            pid INTEGER,
            method TEXT NOT NULL,
            path TEXT NOT NULL,
            stream INTEGER DEFAULT 0,
            system_prompt_preview TEXT,
            messages_count INTEGER DEFAULT 0,
            tools_count INTEGER DEFAULT 0,
            request_bytes INTEGER DEFAULT 0,
            request_body_preview TEXT,
            message_id TEXT,
            status_code INTEGER,
            text_content TEXT,
            thinking_content TEXT,
            stop_reason TEXT,
            input_tokens INTEGER,
            output_tokens INTEGER,
            duration_ms INTEGER DEFAULT 0,
            response_bytes INTEGER DEFAULT 0,
            estimated_cost_usd REAL DEFAULT 0,
            trace_id TEXT,
            usage_details TEXT,
            -- capsem additions
            net_event_id INTEGER,
            flow_id TEXT,
            protocol TEXT,
            host TEXT,
            response_model TEXT,
            ttft_ms INTEGER,
            complete INTEGER,
            error_type TEXT,
            error_message TEXT,
            price_source TEXT,
            cost_details TEXT,
            parse_errors INTEGER DEFAULT 0
        );
        CREATE TABLE tool_calls (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            model_call_id INTEGER NOT NULL,
            call_index INTEGER NOT NULL,
            call_id TEXT NOT NULL,
            tool_name TEXT NOT NULL,
            arguments TEXT,
            origin TEXT NOT NULL DEFAULT 'native',
            mcp_call_id INTEGER,
            -- capsem additions
            timestamp TEXT,
            trace_id TEXT,
            complete INTEGER DEFAULT 1
        );
        CREATE TABLE tool_responses (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            model_call_id INTEGER NOT NULL,
            call_id TEXT NOT NULL,
            content_preview TEXT,
            is_error INTEGER DEFAULT 0,
            -- capsem additions
            timestamp TEXT,
            trace_id TEXT,
            tool_name TEXT,
            content_bytes INTEGER
        );
        CREATE TABLE mcp_calls (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            timestamp TEXT NOT NULL,
            server_name TEXT NOT NULL,
            method TEXT NOT NULL,
            tool_name TEXT,
            request_id TEXT,
            request_preview TEXT,
            response_preview TEXT,
            decision TEXT NOT NULL,
            duration_ms INTEGER DEFAULT 0,
            error_message TEXT,
            process_name TEXT,
            bytes_sent INTEGER DEFAULT 0,
            bytes_received INTEGER DEFAULT 0
        );
        CREATE TABLE fs_events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            timestamp TEXT NOT NULL,
            action TEXT NOT NULL,
            path TEXT NOT NULL,
            size INTEGER
        );
        CREATE TABLE session_meta (key TEXT PRIMARY KEY, value TEXT);
        CREATE INDEX idx_net_events_domain ON net_events(domain);
        CREATE INDEX idx_net_events_timestamp ON net_events(timestamp);
        CREATE INDEX idx_model_calls_provider_ts ON model_calls(provider, timestamp);
        CREATE INDEX idx_model_calls_trace_id ON model_calls(trace_id);
        CREATE INDEX idx_tool_calls_model_call ON tool_calls(model_call_id);
        CREATE INDEX idx_tool_responses_model_call ON tool_responses(model_call_id);
        CREATE INDEX idx_tool_calls_call_id ON tool_calls(call_id);
        CREATE INDEX idx_tool_responses_call_id ON tool_responses(call_id);
        CREATE INDEX idx_mcp_calls_server ON mcp_calls(server_name);
        CREATE INDEX idx_mcp_calls_timestamp ON mcp_calls(timestamp);
        CREATE INDEX idx_fs_events_timestamp ON fs_events(timestamp);
        CREATE INDEX idx_fs_events_path ON fs_events(path);
        """,
    )


@SESSION.migration
def m002_proc_diagnostics(conn: sqlite3.Connection) -> None:
    """`capsem run`'s process diagnostics (assembler/procdiag): samples of the agent's process tree
    and the anomalies found in them at session end."""
    run_script(
        conn,
        """
        CREATE TABLE proc_samples (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            ts TEXT NOT NULL,
            seq INTEGER NOT NULL,
            pid INTEGER NOT NULL,
            ppid INTEGER,
            started_at TEXT,
            name TEXT,
            cmdline TEXT,
            state TEXT,
            rss_kb INTEGER,
            vms_kb INTEGER,
            threads INTEGER,
            fds INTEGER,
            fd_limit INTEGER,
            ctx_switches_voluntary INTEGER,
            ctx_switches_involuntary INTEGER,
            cpu_user REAL,
            cpu_system REAL,
            cpu_percent REAL,
            oom_score INTEGER,
            wchan TEXT,
            sig_pnd TEXT,
            sig_blk TEXT,
            sig_cgt TEXT,
            io_read_bytes INTEGER,
            io_write_bytes INTEGER
        );
        CREATE INDEX idx_proc_samples_pid ON proc_samples(pid, started_at, ts);
        CREATE INDEX idx_proc_samples_ts ON proc_samples(ts);
        CREATE TABLE proc_anomalies (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            kind TEXT NOT NULL,
            severity TEXT NOT NULL,
            pid INTEGER,
            name TEXT,
            first_ts TEXT,
            last_ts TEXT,
            samples INTEGER,
            value REAL,
            threshold REAL,
            detail TEXT,
            detected_at TEXT
        );
        CREATE INDEX idx_proc_anomalies_kind ON proc_anomalies(kind)
        """,
    )


@SESSION.migration
def m003_mcp_details(conn: sqlite3.Connection) -> None:
    """mcp_calls: the flow it came in, its policy rule, tool failure flag, HTTP status, endpoint,
    hashed Mcp-Session-Id, protocol version and response framing."""
    run_script(
        conn,
        """
        ALTER TABLE mcp_calls ADD COLUMN net_event_id INTEGER;
        ALTER TABLE mcp_calls ADD COLUMN flow_id TEXT;
        ALTER TABLE mcp_calls ADD COLUMN pid INTEGER;
        ALTER TABLE mcp_calls ADD COLUMN matched_rule TEXT;
        ALTER TABLE mcp_calls ADD COLUMN is_error INTEGER;
        ALTER TABLE mcp_calls ADD COLUMN status_code INTEGER;
        ALTER TABLE mcp_calls ADD COLUMN endpoint TEXT;
        ALTER TABLE mcp_calls ADD COLUMN mcp_session TEXT;
        ALTER TABLE mcp_calls ADD COLUMN protocol_version TEXT;
        ALTER TABLE mcp_calls ADD COLUMN response_framing TEXT;
        CREATE INDEX idx_tool_calls_mcp_call ON tool_calls(mcp_call_id)
        """,
    )


@SESSION.migration
def m004_event_ids(conn: sqlite3.Connection) -> None:
    """Capsem's identity model: a 12-hex `event_id` on every row, minted before the write (older
    rows get one here); `mcp_calls.tool_call_id`, the model tool call an MCP call ran when that
    tool call was recorded first, and the trigger that keeps the seed's `tool_calls.mcp_call_id`
    in step with it, so that links are made by inserts only."""
    tables = (*SESSION_TABLES, "proc_samples", "proc_anomalies")
    for table in tables:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN event_id TEXT")
        conn.execute(f"UPDATE {table} SET event_id = lower(hex(randomblob(6))) WHERE event_id IS NULL")
        conn.execute(f"CREATE INDEX idx_{table}_event_id ON {table}(event_id)")
    conn.execute("ALTER TABLE mcp_calls ADD COLUMN tool_call_id INTEGER")
    conn.execute("CREATE INDEX idx_net_events_flow_id ON net_events(flow_id)")
    conn.execute(
        """CREATE TRIGGER mcp_calls_link_tool_call AFTER INSERT ON mcp_calls
           WHEN NEW.tool_call_id IS NOT NULL
           BEGIN
               UPDATE tool_calls SET mcp_call_id = NEW.id, origin = 'mcp' WHERE id = NEW.tool_call_id;
           END"""
    )


@SESSION.migration
def m005_capsem_columns(conn: sqlite3.Connection) -> None:
    """Columns of Capsem's current `tool_calls` that mean something here, so Capsem's own tools
    (its `scripts/check_session.py`) run on our session.db. Rows stay insert-only: a value known
    only later is set by a trigger inside the later insert. Rows written before this migration
    keep the defaults.

    - `provider`: the provider of the model call that asked for the tool (`model_calls.provider`).
    - `transport`: how that call's response carried the tool call, in Capsem's words: `sse` for
      any streamed response (SSE, Bedrock's event stream, NDJSON), `websocket` for a turn on a
      WebSocket (OpenAI Responses), `http` for a whole body.
    - `status`: `observed` when the model asked for it; `responded` or `error` (the result's
      `is_error`) once the agent sent its result, set by the insert of that `tool_responses` row.
    - `decision`: the policy's verdict on the MCP `tools/call` that ran it (`allowed`, `warned`,
      `denied`; see `policy:`); `allowed` for a tool no policy sees (the agent ran it itself).
      Set when the tool call is built after its MCP call, else by the MCP call's insert.
    - `duration_ms`: how long the agent took to run it: from the end of the model response that
      asked for it to the start of the request that carried its result (the time `tool_usage`
      sums in main.db); NULL until that result is recorded.
    - `server_name`: the MCP server that ran it (`mcp_calls.server_name`), NULL when none did.
    """
    run_script(
        conn,
        """
        ALTER TABLE tool_calls ADD COLUMN provider TEXT;
        ALTER TABLE tool_calls ADD COLUMN transport TEXT NOT NULL DEFAULT 'unknown';
        ALTER TABLE tool_calls ADD COLUMN status TEXT NOT NULL DEFAULT 'observed';
        ALTER TABLE tool_calls ADD COLUMN decision TEXT NOT NULL DEFAULT 'allowed';
        ALTER TABLE tool_calls ADD COLUMN duration_ms INTEGER;
        ALTER TABLE tool_calls ADD COLUMN server_name TEXT
        """,
    )
    conn.execute(
        """CREATE TRIGGER tool_responses_finish_tool_call AFTER INSERT ON tool_responses
           BEGIN
               UPDATE tool_calls SET
                   status = CASE WHEN NEW.is_error THEN 'error' ELSE 'responded' END,
                   duration_ms = (
                       SELECT MAX(0, CAST(ROUND((julianday(NEW.timestamp) - julianday(m.timestamp)) * 86400000.0
                                                - COALESCE(m.duration_ms, 0)) AS INTEGER))
                       FROM model_calls m WHERE m.id = tool_calls.model_call_id)
               WHERE id = (SELECT MAX(id) FROM tool_calls
                           WHERE call_id = NEW.call_id AND model_call_id < NEW.model_call_id)
                 AND status = 'observed';
           END"""
    )
    conn.execute(
        """CREATE TRIGGER mcp_calls_tool_call_decision AFTER INSERT ON mcp_calls
           WHEN NEW.tool_call_id IS NOT NULL
           BEGIN
               UPDATE tool_calls SET server_name = NEW.server_name,
                   decision = CASE WHEN NEW.decision IN ('warned', 'denied') THEN NEW.decision ELSE 'allowed' END
               WHERE id = NEW.tool_call_id;
           END"""
    )


@SESSION.migration
def m006_bodies(conn: sqlite3.Connection) -> None:
    """The complete record: every model and MCP call's whole decoded request and response body,
    cut into pieces stored once per session (`body_chunks`, zstd) and listed per body
    (`event_body_blobs`, Capsem's name), so a conversation that resends its history grows
    linearly. See addons/bodies.py."""
    run_script(
        conn,
        """
        CREATE TABLE body_chunks (
            hash BLOB PRIMARY KEY,
            size INTEGER NOT NULL,
            data BLOB NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE event_body_blobs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            event_id TEXT NOT NULL,
            owner_event_id TEXT NOT NULL,
            source_table TEXT NOT NULL,
            row_id INTEGER,
            direction TEXT NOT NULL,
            size INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            truncated INTEGER NOT NULL DEFAULT 0,
            content_type TEXT,
            base_id INTEGER,
            base_pieces INTEGER NOT NULL DEFAULT 0,
            chunks BLOB NOT NULL
        );
        CREATE UNIQUE INDEX idx_event_body_blobs_owner ON event_body_blobs(source_table, row_id, direction);
        CREATE INDEX idx_event_body_blobs_event_id ON event_body_blobs(owner_event_id)
        """,
    )


@SESSION.migration
def m007_items(conn: sqlite3.Connection) -> None:
    """Conversation items (Capsem's `model_items`, see addons/items.py): each item's content once per
    session (`item_contents`), per call the items new in it and its outputs (`model_items`), its
    whole list compactly (`model_item_lists`), and on `model_calls` the hashes of its exact system
    prompt and tool surface with its item counts."""
    run_script(
        conn,
        """
        CREATE TABLE item_contents (
            hash TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            size INTEGER NOT NULL,
            content TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE model_items (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            event_id TEXT NOT NULL,
            model_call_id INTEGER NOT NULL,
            timestamp TEXT NOT NULL,
            provider TEXT NOT NULL,
            model TEXT,
            path TEXT NOT NULL,
            trace_id TEXT,
            turn_id TEXT,
            kind TEXT NOT NULL,
            direction TEXT NOT NULL,
            item_index INTEGER NOT NULL,
            role TEXT,
            call_id TEXT,
            tool_name TEXT,
            content_hash TEXT NOT NULL,
            new INTEGER NOT NULL DEFAULT 1
        );
        CREATE INDEX idx_model_items_call ON model_items(model_call_id, direction, item_index);
        CREATE INDEX idx_model_items_trace_id ON model_items(trace_id);
        CREATE INDEX idx_model_items_call_id ON model_items(call_id);
        CREATE TABLE model_item_lists (
            model_call_id INTEGER PRIMARY KEY,
            base_call_id INTEGER,
            shared INTEGER NOT NULL DEFAULT 0,
            hashes BLOB NOT NULL
        );
        ALTER TABLE model_calls ADD COLUMN system_hash TEXT;
        ALTER TABLE model_calls ADD COLUMN tools_hash TEXT;
        ALTER TABLE model_calls ADD COLUMN items_count INTEGER;
        ALTER TABLE model_calls ADD COLUMN items_new INTEGER
        """,
    )


@SESSION.migration
def m008_input_breakdown(conn: sqlite3.Connection) -> None:
    """Where each call's input tokens went (addons/breakdown.py): per part (tool definitions, MCP
    tool definitions, system, history, tool results, new input) its tokens (tokenizer estimates
    scaled to add up exactly to `model_calls.input_tokens`), the cached ones, and its cost."""
    run_script(
        conn,
        """
        CREATE TABLE input_breakdown (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            event_id TEXT NOT NULL,
            model_call_id INTEGER NOT NULL,
            part TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            cache_read_tokens INTEGER NOT NULL DEFAULT 0,
            cache_write_tokens INTEGER NOT NULL DEFAULT 0,
            cost_usd REAL,
            estimated INTEGER NOT NULL DEFAULT 1
        );
        CREATE INDEX idx_input_breakdown_call ON input_breakdown(model_call_id)
        """,
    )


@SESSION.migration
def m009_turns(conn: sqlite3.Connection) -> None:
    """Capsem's identity model beside `trace_id`: `turn_id` (one user-visible input and every call
    needed to answer it) and, for a subagent's calls, the parent's tool call that started it, so a
    session reads as a tree."""
    run_script(
        conn,
        """
        ALTER TABLE model_calls ADD COLUMN turn_id TEXT;
        ALTER TABLE model_calls ADD COLUMN parent_tool_call_id INTEGER;
        CREATE INDEX idx_model_calls_turn_id ON model_calls(turn_id);
        CREATE INDEX idx_model_calls_parent ON model_calls(parent_tool_call_id);
        CREATE INDEX idx_model_items_turn_id ON model_items(turn_id)
        """,
    )


@SESSION.migration
def m010_substitution_events(conn: sqlite3.Connection) -> None:
    """Brokered credentials: one row each time a request carried a credential's placeholder, with
    what capsem did (`substituted`: the real value went upstream in its place; `refused`: it did
    not, and why). Never the value itself."""
    run_script(
        conn,
        """
        CREATE TABLE substitution_events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            event_id TEXT,
            timestamp TEXT NOT NULL,
            credential TEXT NOT NULL,
            host TEXT NOT NULL,
            port INTEGER,
            location TEXT NOT NULL,
            outcome TEXT NOT NULL,
            reason TEXT,
            flow_id TEXT,
            net_event_id INTEGER,
            process_name TEXT,
            pid INTEGER
        );
        CREATE INDEX idx_substitution_events_net_event ON substitution_events(net_event_id)
        """,
    )


@SESSION.migration
def m011_content_frames(conn: sqlite3.Connection) -> None:
    """What a call adds (new item contents, new body pieces) compressed together as one zstd frame
    (`content_frames`); pieces (`body_chunks`) and items (`item_data`) name their frame, start and
    size; `item_contents` becomes a view reading items as text (`unzstd`, see capsem/packed.py).
    Existing pieces and items become one frame each. See addons/bodies.py."""
    import zstandard

    run_script(
        conn,
        """
        CREATE TABLE content_frames (
            id INTEGER PRIMARY KEY,
            size INTEGER NOT NULL,
            data BLOB NOT NULL
        );
        ALTER TABLE body_chunks RENAME TO _m011_body_chunks;
        CREATE TABLE body_chunks (
            hash BLOB PRIMARY KEY,
            size INTEGER NOT NULL,
            frame INTEGER NOT NULL,
            start INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID;
        CREATE TABLE item_data (
            hash TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            size INTEGER NOT NULL,
            frame INTEGER NOT NULL,
            start INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID
        """,
    )
    frame = 0
    for key, size, data in conn.execute("SELECT hash, size, data FROM _m011_body_chunks").fetchall():
        frame += 1
        conn.execute("INSERT INTO content_frames VALUES (?, ?, ?)", (frame, size, data))
        conn.execute("INSERT INTO body_chunks VALUES (?, ?, ?, 0)", (key, size, frame))
    for key, kind, content in conn.execute("SELECT hash, kind, content FROM item_contents").fetchall():
        frame += 1
        data = content.encode("utf-8", "surrogatepass")
        conn.execute(
            "INSERT INTO content_frames VALUES (?, ?, ?)", (frame, len(data), zstandard.compress(data, 3))
        )
        conn.execute("INSERT INTO item_data VALUES (?, ?, ?, ?, 0)", (key, kind, len(data), frame))
    run_script(
        conn,
        """
        DROP TABLE _m011_body_chunks;
        DROP TABLE item_contents;
        CREATE VIEW item_contents AS
            SELECT d.hash, d.kind, d.size, unzstd(f.data, d.start, d.size) AS content
            FROM item_data d JOIN content_frames f ON f.id = d.frame
        """,
    )


@SESSION.migration
def m012_item_indexes(conn: sqlite3.Connection) -> None:
    """No query looks up items by trace or turn (those go through `model_calls`, which has both
    indexes and joins on `model_call_id`): the two indexes were ~3 % of a long session's file."""
    run_script(conn, "DROP INDEX idx_model_items_trace_id; DROP INDEX idx_model_items_turn_id")


@SESSION.migration
def m013_cache_breaks(conn: sqlite3.Connection) -> None:
    """Cache breaks (a call that read less from the prompt cache than its conversation had cached,
    with the cause and what it cost) and compactions (a history the agent summarized)."""
    run_script(
        conn,
        """
        CREATE TABLE cache_breaks (
            id INTEGER PRIMARY KEY,
            event_id TEXT NOT NULL,
            model_call_id INTEGER NOT NULL REFERENCES model_calls(id),
            earlier_call_id INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            read_tokens INTEGER NOT NULL,
            cause TEXT NOT NULL,
            item_index INTEGER,
            item TEXT,
            before TEXT,
            after TEXT,
            extra_cost_usd REAL
        );
        CREATE INDEX idx_cache_breaks_call ON cache_breaks(model_call_id);
        CREATE TABLE compactions (
            id INTEGER PRIMARY KEY,
            event_id TEXT NOT NULL,
            model_call_id INTEGER NOT NULL REFERENCES model_calls(id),
            earlier_call_id INTEGER NOT NULL,
            tokens_before INTEGER NOT NULL,
            tokens_after INTEGER NOT NULL
        )
        """,
    )


@SESSION.migration
def m014_approvals(conn: sqlite3.Connection) -> None:
    """`ask`: one row per request a policy rule held for a person (its `net_events` row says
    `asked`), with the answer: `decision` approved, denied or timed_out; `decided_by` cli, view,
    rule (an earlier `--always` answer), timeout, shutdown or error (capsem could not hold it); how
    long it waited; an MCP call's
    server, tool and arguments (scrubbed)."""
    run_script(
        conn,
        """
        CREATE TABLE approvals (
            id INTEGER PRIMARY KEY,
            event_id TEXT NOT NULL,
            approval_id TEXT NOT NULL,
            net_event_id INTEGER,
            flow_id TEXT,
            rule TEXT NOT NULL,
            asked_at TEXT NOT NULL,
            decided_at TEXT NOT NULL,
            waited_ms INTEGER NOT NULL,
            decision TEXT NOT NULL,
            decided_by TEXT NOT NULL,
            reason TEXT,
            always INTEGER NOT NULL DEFAULT 0,
            method TEXT,
            host TEXT,
            path TEXT,
            mcp_server TEXT,
            tool TEXT,
            arguments TEXT,
            process_name TEXT,
            pid INTEGER
        );
        CREATE INDEX idx_approvals_net_event ON approvals(net_event_id)
        """,
    )


@SESSION.migration
def m015_response_chunks(conn: sqlite3.Connection) -> None:
    """How each streamed answer arrived, for `capsem replay`: per model call, each chunk's end offset
    in the stored response body and its ms after the request was sent (JSON [[end, ms], ...]; a
    WebSocket turn: one chunk per server message, its end counting the newline after it)."""
    run_script(
        conn,
        """
        CREATE TABLE response_chunks (
            model_call_id INTEGER PRIMARY KEY,
            chunks TEXT NOT NULL
        )
        """,
    )


@SESSION.migration
def m016_body_runs(conn: sqlite3.Connection) -> None:
    """A body's list of pieces as runs of earlier bodies' lists (`event_body_blobs.runs`, JSON: an
    integer n takes the next n keys of the row's own `chunks`, `[base_id, start, count]` takes keys
    start..start+count of body base_id), so a turn whose change lies in the middle of its request
    costs what is new plus a few bytes. The old form (the leading `base_pieces` keys of `base_id`,
    then `chunks`) is one such list; its columns go (the table is rebuilt: no DROP COLUMN, which
    older SQLite lacks). See addons/recorder/bodies.py."""
    columns = ("id, event_id, owner_event_id, source_table, row_id, direction, size, sha256, truncated, "
               "content_type, chunks")  # fmt: skip
    run_script(
        conn,
        """
        ALTER TABLE event_body_blobs RENAME TO _m016_event_body_blobs;
        CREATE TABLE event_body_blobs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            event_id TEXT NOT NULL,
            owner_event_id TEXT NOT NULL,
            source_table TEXT NOT NULL,
            row_id INTEGER,
            direction TEXT NOT NULL,
            size INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            truncated INTEGER NOT NULL DEFAULT 0,
            content_type TEXT,
            chunks BLOB NOT NULL,
            runs TEXT NOT NULL
        )
        """,
    )
    old = conn.execute(f"SELECT {columns}, base_id, base_pieces FROM _m016_event_body_blobs ORDER BY id")
    for row in old.fetchall():
        base, count, own = row[-2], row[-1], len(row[-3]) // 16
        runs = f"[{own}]" if base is None else f"[[{base},0,{count}],{own}]"
        conn.execute(f"INSERT INTO event_body_blobs ({columns}, runs) VALUES ({', '.join('?' * 12)})",
                     (*row[:-2], runs))  # fmt: skip
    run_script(
        conn,
        """
        DROP TABLE _m016_event_body_blobs;
        CREATE UNIQUE INDEX idx_event_body_blobs_owner ON event_body_blobs(source_table, row_id, direction);
        CREATE INDEX idx_event_body_blobs_event_id ON event_body_blobs(owner_event_id)
        """,
    )


@SESSION.migration
def m017_canonical_path(conn: sqlite3.Connection) -> None:
    """`net_events.canonical_path`: the path the policy decided on (`addons/canonical.py`: dot
    segments removed, slashes merged, unreserved escapes decoded, `;params` set aside) beside
    `path`, which keeps the path exactly as sent. NULL for rows written before it existed."""
    conn.execute("ALTER TABLE net_events ADD COLUMN canonical_path TEXT")


@SESSION.migration
def m018_tool_decisions(conn: sqlite3.Connection) -> None:
    """Tool rules (`tool:`/`tool_args:` in `policy.rules`) decide on the tool calls of the model's
    answer before the agent sees them; `tool_calls.decision` (m005) takes their verdict too:
    `allowed`, `warned`, `denied`, `asked` (still waiting, or timed out: the agent never got it),
    `approved`. It stays `allowed` (m005's default, as Capsem writes it) when no rule decided.

    - `decision_rule`: the rule that decided (a tool rule, or the policy rule that warned about or
      denied the MCP call that ran it); NULL when none did.
    - `approval_id`: the `approvals.approval_id` of a person's answer to an `ask`.

    The trigger `mcp_calls_tool_call_decision` is rewritten so that an MCP call the policy let
    through keeps the tool rule's verdict on the call that asked for it (before, it reset the
    verdict to `allowed`); a warned or denied MCP call still sets its own, with its rule."""
    run_script(
        conn,
        """
        ALTER TABLE tool_calls ADD COLUMN decision_rule TEXT;
        ALTER TABLE tool_calls ADD COLUMN approval_id TEXT;
        DROP TRIGGER mcp_calls_tool_call_decision
        """,
    )
    conn.execute(
        """CREATE TRIGGER mcp_calls_tool_call_decision AFTER INSERT ON mcp_calls
           WHEN NEW.tool_call_id IS NOT NULL
           BEGIN
               UPDATE tool_calls SET server_name = NEW.server_name,
                   decision = CASE WHEN NEW.decision IN ('warned', 'denied') THEN NEW.decision ELSE decision END,
                   decision_rule = CASE WHEN NEW.decision IN ('warned', 'denied') THEN NEW.matched_rule
                                        ELSE decision_rule END
               WHERE id = NEW.tool_call_id;
           END"""
    )


@SESSION.migration
def m019_ledger(conn: sqlite3.Connection) -> None:
    """The chain over every row written (`capsem/store/ledger.py`): `ledger` one row a commit
    batch, its entries (one a row written, in commit order: its table, key, shape, digest and
    running chain value) packed as one msgpack array from entry `first_seq` on (one insert a
    batch, not one a row; since `capsem.store.ledger.PACKED`, only keys, shapes and digests),
    `ledger_shapes` the column lists rows were written with, `ledger_heads` each commit batch's
    signed head (`final`: the head a writer closed with). Rows written before this migration
    are not covered: `capsem verify` says so. (m018 is the tool rules'.)"""
    run_script(
        conn,
        """
        CREATE TABLE ledger_shapes (
            id INTEGER PRIMARY KEY,
            tbl TEXT NOT NULL,
            columns TEXT NOT NULL
        );
        CREATE TABLE ledger (
            batch INTEGER PRIMARY KEY,
            first_seq INTEGER NOT NULL,
            entries BLOB NOT NULL
        );
        CREATE TABLE ledger_heads (
            batch INTEGER PRIMARY KEY,
            last_seq INTEGER NOT NULL,
            head BLOB NOT NULL,
            final INTEGER NOT NULL,
            at TEXT NOT NULL,
            key_id TEXT NOT NULL,
            signature BLOB NOT NULL
        )
        """,
    )
