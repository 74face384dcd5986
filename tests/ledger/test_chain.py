"""The chain in-process, through the store's writer: what SQLite's column affinities do to a value
does not break it, a failed commit or a restarted writer continues it, a crashed session
verifies up to its last signed batch, overwritten `session_meta` values verify and changed ones
do not, main.db's chain notices an edited entry, and the key is private and never logged."""

from __future__ import annotations

import logging
import sqlite3
import stat

import msgspec
import pytest

from capsem.rollup import finish_session, open_main, register_session
from capsem.store.keys import load_public
from capsem.store.ledger import genesis, link, unpack
from capsem.store.schema import connect
from capsem.store.verify import verify_session
from capsem.store.writer import SessionWriter


def verdict(home, db, status="stopped"):
    conn = connect(db, readonly=True)
    try:
        return verify_session(conn, db.parent.name, load_public(home / "ledger.pub"), status=status)
    finally:
        conn.close()


@pytest.fixture
def db(capsem_home):
    return capsem_home / "sessions" / "20260101-000000-aaaa" / "session.db"


def net(i: int, **values):
    return {"id": i, "timestamp": "2026-01-01T00:00:00Z", "domain": "x.test", "decision": "allowed", **values}


def test_values_sqlite_retypes_still_verify(db, capsem_home):
    writer = SessionWriter(db)
    writer.add_dicts("net_events", [net(1, streamed=True, port=443.0, path=5), net(2, bytes_sent="12")])
    writer.add_dicts("model_calls", [{"id": 1, "timestamp": "t", "provider": "p", "method": "POST", "path": "/",
                                      "estimated_cost_usd": 2, "input_tokens": 10.0}])  # fmt: skip
    writer.close(end=True)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT streamed, port, path FROM net_events WHERE id = 1").fetchone() == (
        1,
        443,
        "5",
    )
    assert conn.execute("SELECT bytes_sent FROM net_events WHERE id = 2").fetchone() == (12,)
    assert conn.execute("SELECT estimated_cost_usd, input_tokens FROM model_calls").fetchone() == (2.0, 10)
    conn.close()
    assert verdict(capsem_home, db).ok


def test_a_failed_commit_and_a_restarted_writer_continue_the_chain(db, capsem_home):
    writer = SessionWriter(db)
    writer.add_dicts("net_events", [net(1)])
    writer.conn.execute("PRAGMA query_only = ON")
    assert not writer.commit()
    writer.conn.execute("PRAGMA query_only = OFF")
    writer.add_dicts("net_events", [net(2)])
    assert writer.commit()
    writer.conn.close()  # killed: no final head
    again = SessionWriter(db)
    again.add_dicts("net_events", [net(3)])
    again.close(end=True)
    v = verdict(capsem_home, db)
    assert v.ok and v.batches == 3 and v.last.final  # 3 rows, 3 capture_* values of the failure


def test_a_crashed_session_verifies_up_to_its_last_batch_and_a_stopped_one_does_not(db, capsem_home):
    writer = SessionWriter(db)
    writer.add_dicts("net_events", [net(1)])
    assert writer.commit()
    writer.add_dicts("net_events", [net(2)])
    assert writer.commit()
    writer.conn.close()  # kill -9: the last batch is signed, the end is not
    crashed = verdict(capsem_home, db, status="crashed")
    assert crashed.ok and crashed.note == "no signed end (crashed): verified up to batch 2, entry 2"
    stopped = verdict(capsem_home, db, status="stopped")
    assert [str(p) for p in stopped.problems] == [
        "cut (the session says it stopped but its signed end is missing; the record ends at batch 2)"
    ]


def test_overwritten_meta_verifies_and_a_changed_value_does_not(db, capsem_home):
    writer = SessionWriter(db)
    writer.set_meta(mode="run", capture_rows_lost="0")
    assert writer.commit()
    writer.set_meta(capture_rows_lost="3")
    writer.close(end=True)
    assert verdict(capsem_home, db).ok
    conn = sqlite3.connect(db)
    conn.execute("UPDATE session_meta SET value = '0' WHERE key = 'capture_rows_lost'")
    conn.commit()
    conn.close()
    assert str(verdict(capsem_home, db).first).startswith("session_meta key capture_rows_lost: changed")


def test_main_db_chains_each_end_and_an_edited_entry_fails(db, capsem_home):
    from capsem.store.sessions_chain import entries
    from capsem.store.verify import verify_sessions_chain

    main = open_main(capsem_home / "main.db")
    register_session(main, db.parent.name, mode="run", command="agent", created_at="2026-01-01T00:00:00Z")
    writer = SessionWriter(db)
    writer.add_dicts("net_events", [net(1)])
    writer.close(end=True)
    finish_session(main, db.parent.name)
    public = load_public(capsem_home / "ledger.pub")
    (entry,) = entries(main)
    assert (entry.kind, entry.session_id, entry.batch) == ("end", db.parent.name, 2)
    assert verify_sessions_chain(entries(main), public) == []
    main.execute("UPDATE ledger_sessions SET batch = 1")
    assert [p.what for p in verify_sessions_chain(entries(main), public)] == ["chain"]
    main.close()


def test_the_key_is_private_and_never_logged(db, capsem_home, caplog):
    caplog.set_level(logging.DEBUG)
    writer = SessionWriter(db)
    writer.add_dicts("net_events", [net(1)])
    writer.close(end=True)
    key = capsem_home / "ledger.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(capsem_home.stat().st_mode) == 0o700
    assert b"PRIVATE KEY" in key.read_bytes()
    body = key.read_text().splitlines()[1]
    assert body not in caplog.text and "PRIVATE KEY" not in caplog.text


def test_two_writers_on_one_session_take_turns_on_the_chain(db, capsem_home):
    """An offline writer while another is open (capsem run's last resort beside a recorder that
    is finishing): each continues the chain the file holds."""
    first, second = SessionWriter(db), SessionWriter(db)
    first.add_dicts("net_events", [net(1)])
    assert first.commit()
    second.add_dicts("net_events", [net(2)])
    assert second.commit()
    first.add_dicts("fs_events", [{"timestamp": "t", "action": "created", "path": "/a"}])
    assert first.commit()
    second.close()
    first.close(end=True)
    v = verdict(capsem_home, db)
    assert v.ok and v.batches == 5 and v.last.final


def _rewrite_as_before_packed(db) -> None:
    """The ledger as files written before `PACKED` hold it: each entry whole, its table and chain."""
    conn = sqlite3.connect(db)
    tables = {sid: t for sid, t in conn.execute("SELECT id, tbl FROM ledger_shapes")}
    chain = genesis(db.parent.name)
    for batch, packed in conn.execute("SELECT batch, entries FROM ledger ORDER BY batch").fetchall():
        whole = []
        for table, key, shape, digest, _ in unpack(packed, tables):
            chain = link(chain, digest)
            whole.append([table, key, shape, digest, chain])
        conn.execute("UPDATE ledger SET entries = ? WHERE batch = ?", (msgspec.msgpack.encode(whole), batch))
    conn.commit()
    conn.close()


def test_a_ledger_written_before_packed_entries_verifies_and_continues(db, capsem_home):
    """Entries are stored as keys, shapes and digests (45 bytes an entry, not 99): a session.db
    written before, each entry whole, still verifies, its stored chain values still checked, and a
    writer continues it in the new form."""
    writer = SessionWriter(db)
    writer.add_dicts("net_events", [net(1), net(2)])
    assert writer.commit()
    writer.conn.close()  # killed: a restarted writer continues the chain
    (packed,) = sqlite3.connect(db).execute("SELECT entries FROM ledger").fetchone()
    assert len(packed) == 1 + 1 + 3 + 3 + 2 + 64  # [2, [1, 2], [1, 1], 64 bytes of digests]
    _rewrite_as_before_packed(db)
    assert verdict(capsem_home, db, status="crashed").ok
    again = SessionWriter(db)
    again.add_dicts("net_events", [net(3)])
    again.close(end=True)
    v = verdict(capsem_home, db)
    assert v.ok and v.rows == 3 and v.batches == 3 and v.last.final  # the first, the restarted one's, its end
    conn = sqlite3.connect(db)
    first = conn.execute("SELECT entries FROM ledger ORDER BY batch LIMIT 1").fetchone()[0]
    whole = msgspec.msgpack.decode(first)
    whole[0][4] = bytes(32)  # an edited chain value of an entry written whole
    conn.execute("UPDATE ledger SET entries = ? WHERE batch = 1", (msgspec.msgpack.encode(whole),))
    conn.commit()
    conn.close()
    assert "entry 1 does not link to the one before" in str(verdict(capsem_home, db).first)


def test_a_ledger_batch_cut_short_is_a_problem_not_a_crash(db, capsem_home):
    writer = SessionWriter(db)
    writer.add_dicts("net_events", [net(1), net(2)])
    writer.close(end=True)
    conn = sqlite3.connect(db)
    (packed,) = conn.execute("SELECT entries FROM ledger").fetchone()
    version, keys, shapes, digests = msgspec.msgpack.decode(packed)
    cut = msgspec.msgpack.encode([version, keys, shapes, digests[:-5]])
    conn.execute("UPDATE ledger SET entries = ?", (cut,))
    conn.commit()
    conn.close()
    problems = [str(p) for p in verdict(capsem_home, db).problems]
    assert any("unreadable: a ledger batch of" in p for p in problems), problems
    conn = sqlite3.connect(db)
    conn.execute("UPDATE ledger SET entries = ?", (msgspec.msgpack.encode([7, 8]),))  # neither form
    conn.commit()
    conn.close()
    problems = [str(p) for p in verdict(capsem_home, db).problems]
    assert any("ledger entries from 1 unreadable" in p for p in problems), problems
