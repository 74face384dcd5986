import sqlite3

import pytest

from capsem.store.schema import (
    MAIN_MIGRATIONS,
    SESSION_MIGRATIONS,
    SESSION_TABLES,
    connect,
    migrate,
    open_session_db,
)

# Every column of the Capsem seed tables (000_bdf6624b76e0b077.txt), with its declared type.
SEED_COLUMNS = {
    "net_events": "id INTEGER timestamp TEXT domain TEXT port INTEGER decision TEXT process_name TEXT pid INTEGER "
    "method TEXT path TEXT query TEXT status_code INTEGER bytes_sent INTEGER bytes_received INTEGER "
    "duration_ms INTEGER matched_rule TEXT request_headers TEXT response_headers TEXT "
    "request_body_preview TEXT response_body_preview TEXT conn_type TEXT",
    "model_calls": "id INTEGER timestamp TEXT provider TEXT model TEXT process_name TEXT pid INTEGER method TEXT "
    "path TEXT stream INTEGER system_prompt_preview TEXT messages_count INTEGER tools_count INTEGER "
    "request_bytes INTEGER request_body_preview TEXT message_id TEXT status_code INTEGER text_content TEXT "
    "thinking_content TEXT stop_reason TEXT input_tokens INTEGER output_tokens INTEGER duration_ms INTEGER "
    "response_bytes INTEGER estimated_cost_usd REAL trace_id TEXT usage_details TEXT",
    "tool_calls": "id INTEGER model_call_id INTEGER call_index INTEGER call_id TEXT tool_name TEXT arguments TEXT "
    "origin TEXT mcp_call_id INTEGER",
    "tool_responses": "id INTEGER model_call_id INTEGER call_id TEXT content_preview TEXT is_error INTEGER",
    "mcp_calls": "id INTEGER timestamp TEXT server_name TEXT method TEXT tool_name TEXT request_id TEXT "
    "request_preview TEXT response_preview TEXT decision TEXT duration_ms INTEGER error_message TEXT "
    "process_name TEXT bytes_sent INTEGER bytes_received INTEGER",
    "fs_events": "id INTEGER timestamp TEXT action TEXT path TEXT size INTEGER",
}


def test_session_db_has_every_seed_column_in_order(tmp_path):
    conn = open_session_db(tmp_path / "s.db")
    for table in SESSION_TABLES:
        words = SEED_COLUMNS[table].split()
        expected = list(zip(words[::2], words[1::2], strict=True))
        actual = [(r[1], r[2]) for r in conn.execute(f"PRAGMA table_info({table})")]
        assert actual[: len(expected)] == expected, table
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(SESSION_MIGRATIONS)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_migrate_is_idempotent_and_rolls_back_a_failed_step(tmp_path):
    conn = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    names = [name for name, _ in MAIN_MIGRATIONS]
    assert migrate(conn, MAIN_MIGRATIONS) == names
    assert migrate(conn, MAIN_MIGRATIONS) == []

    def broken(c):
        c.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        migrate(conn, [*MAIN_MIGRATIONS, ("m999_broken", broken)])
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "half_done" not in tables
    assert [r[0] for r in conn.execute("SELECT name FROM _capsem_migrations")] == names


def test_refuses_a_database_from_a_newer_capsem(tmp_path):
    conn = sqlite3.connect(tmp_path / "n.db", isolation_level=None)
    migrate(conn, MAIN_MIGRATIONS)
    conn.execute("INSERT INTO _capsem_migrations VALUES ('m999_future', 'x')")
    with pytest.raises(RuntimeError, match="newer"):
        migrate(conn, MAIN_MIGRATIONS)


def test_pieces_and_items_stored_before_content_frames_read_back_after_the_migration(tmp_path):
    """A session.db written before m011 (pieces and items each on their own) keeps every body and item."""
    import hashlib

    import zstandard

    from capsem.store.bodies import read_body

    path = tmp_path / "session.db"
    conn = sqlite3.connect(path, isolation_level=None)
    names = [name for name, _ in SESSION_MIGRATIONS]
    migrate(conn, SESSION_MIGRATIONS[: names.index("m011_content_frames")])
    piece = b'{"role": "user", "content": "hello"}'
    key = hashlib.sha256(piece).digest()[:16]
    conn.execute("INSERT INTO body_chunks VALUES (?, ?, ?)", (key, len(piece), zstandard.compress(piece)))
    conn.execute(
        "INSERT INTO event_body_blobs (event_id, owner_event_id, source_table, row_id, direction, size, sha256, "
        "chunks) VALUES ('e1', 'o1', 'model_calls', 7, 'request', ?, ?, ?)",
        (len(piece), hashlib.sha256(piece).hexdigest(), key),
    )
    conn.execute("INSERT INTO item_contents VALUES ('h1', 'message', 5, '\"h\u00e9\"')")
    conn.close()
    with connect(path, readonly=True) as old:  # readers never migrate: they read the old layout as it is
        assert read_body(old, 7)[0] == piece
    conn = open_session_db(path)
    assert read_body(conn, 7)[0] == piece
    assert [tuple(r) for r in conn.execute("SELECT hash, kind, content FROM item_contents")] == [
        ("h1", "message", '"h\u00e9"')
    ]
    conn.close()


def test_bodies_listed_as_a_prefix_of_an_earlier_body_read_back_before_and_after_m016(tmp_path):
    """A session.db written before runs (a body = the leading pieces of an earlier one, then its own)
    reads back as it is, read-only, and the same once migrated to runs."""
    import hashlib

    import zstandard

    from capsem.store.bodies import read_body

    path = tmp_path / "session.db"
    conn = sqlite3.connect(path, isolation_level=None)
    names = [name for name, _ in SESSION_MIGRATIONS]
    migrate(conn, SESSION_MIGRATIONS[: names.index("m016_body_runs")])
    parts = [b'{"role": "user", "content": "a"}', b'{"type": "text", "text": "b"}', b'{"role": "c"}']
    keys = [hashlib.sha256(p).digest()[:16] for p in parts]
    conn.execute(
        "INSERT INTO content_frames VALUES (1, ?, ?)",
        (len(b"".join(parts)), zstandard.compress(b"".join(parts))),
    )
    for n, (key, part) in enumerate(zip(keys, parts, strict=True)):
        conn.execute(
            "INSERT INTO body_chunks VALUES (?, ?, 1, ?)", (key, len(part), sum(map(len, parts[:n])))
        )
    blobs = [(7, None, 0, keys[0] + keys[1]), (8, 1, 1, keys[2]), (9, 2, 2, b"")]
    for row_id, base, count, own in blobs:
        conn.execute(
            "INSERT INTO event_body_blobs (event_id, owner_event_id, source_table, row_id, direction, size, sha256, "
            "base_id, base_pieces, chunks) VALUES ('e', 'o', 'model_calls', ?, 'request', 0, '', ?, ?, ?)",
            (row_id, base, count, own),
        )
    conn.close()
    expected = {7: parts[0] + parts[1], 8: parts[0] + parts[2], 9: parts[0] + parts[2]}
    with connect(path, readonly=True) as old:
        assert {n: read_body(old, n)[0] for n in expected} == expected
    conn = open_session_db(path)
    assert {n: read_body(conn, n)[0] for n in expected} == expected
    assert [r[0] for r in conn.execute("SELECT runs FROM event_body_blobs ORDER BY id")] == [
        "[2]",
        "[[1,0,1],1]",
        "[[2,0,2],0]",
    ]
    conn.close()
