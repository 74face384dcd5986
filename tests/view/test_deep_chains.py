"""Reading a call's items and body back follows its chain of links in a loop: a session whose
calls each build on the previous one (thousands of them) must not exhaust Python's stack."""

from __future__ import annotations

import hashlib

import zstandard

from addons.items import call_items
from capsem.store.bodies import read_body
from capsem.store.schema import open_session_db

DEPTH = 3000


def test_a_chain_deeper_than_the_recursion_limit_reads_back(tmp_path):
    conn = open_session_db(tmp_path / "session.db")
    key = hashlib.sha256(b"x").digest()[:16]
    conn.execute("INSERT INTO content_frames (id, size, data) VALUES (1, 1, ?)", (zstandard.compress(b"x"),))
    conn.execute("INSERT INTO body_chunks (hash, size, frame, start) VALUES (?, 1, 1, 0)", (key,))
    for n in range(1, DEPTH + 1):
        own = hashlib.md5(str(n).encode()).digest()
        conn.execute(
            "INSERT INTO model_item_lists VALUES (?, ?, ?, ?)", (n, n - 1 if n > 1 else None, n - 1, own)
        )
        conn.execute(
            "INSERT INTO event_body_blobs (id, event_id, owner_event_id, source_table, row_id, direction, size, "
            "sha256, chunks, runs) VALUES (?, 'e', 'o', 'model_calls', ?, 'request', ?, '', ?, ?)",
            (n, n, n, key, f"[[{n - 1},0,{n - 1}],1]" if n > 1 else "[1]"),
        )
    hashes = call_items(conn, DEPTH)
    assert len(hashes) == DEPTH and hashes[0] == hashlib.md5(b"1").hexdigest()
    assert hashes[-1] == hashlib.md5(str(DEPTH).encode()).hexdigest()
    data, _blob = read_body(conn, DEPTH)
    assert data == b"x" * DEPTH
    conn.close()
