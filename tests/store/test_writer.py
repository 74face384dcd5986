"""The one write path: scrubbed, batched, failed commits kept and retried, losses counted."""

from __future__ import annotations

from capsem.redact import Scrubber
from capsem.store.rows import FsEvent, new_event_id
from capsem.store.writer import SessionWriter
from tests.conftest import rows


def fs(path: str) -> FsEvent:
    return FsEvent(new_event_id(), "2026-01-01T00:00:00Z", "created", path, 1)


def test_a_failed_commit_keeps_its_rows_for_the_next_one(tmp_path):
    writer = SessionWriter(tmp_path / "session.db")
    writer.add([fs("a"), fs("b")])
    writer.conn.execute("PRAGMA query_only = ON")  # the database refuses writes, as a full disk would
    assert not writer.commit() and writer.pending == 2
    assert writer.health.commit_failures == 1 and "readonly" in writer.health.last_error
    writer.add([fs("c")])
    writer.conn.execute("PRAGMA query_only = OFF")
    assert writer.commit() and writer.pending == 0
    writer.close()
    assert [r["path"] for r in rows(tmp_path / "session.db", "SELECT path FROM fs_events ORDER BY id")] == [
        "a",
        "b",
        "c",
    ]
    meta = dict((r["key"], r["value"]) for r in rows(tmp_path / "session.db", "SELECT * FROM session_meta"))
    assert meta["capture_commit_failures"] == "1" and meta["capture_rows_lost"] == "0"


def test_past_its_bound_the_queue_drops_the_oldest_rows_and_counts_them(tmp_path):
    writer = SessionWriter(tmp_path / "session.db", max_queued_rows=3)
    writer.conn.execute("PRAGMA query_only = ON")
    writer.add([fs(str(n)) for n in range(5)])
    assert not writer.commit() and writer.health.rows_lost == 2
    writer.conn.execute("PRAGMA query_only = OFF")
    writer.close()
    assert [r["path"] for r in rows(tmp_path / "session.db", "SELECT path FROM fs_events ORDER BY id")] == [
        "2",
        "3",
        "4",
    ]
    meta = dict((r["key"], r["value"]) for r in rows(tmp_path / "session.db", "SELECT * FROM session_meta"))
    assert meta["capture_rows_lost"] == "2"


def test_a_secret_learned_later_is_scrubbed_from_a_text_seen_before(tmp_path):
    scrubber = Scrubber()
    writer = SessionWriter(tmp_path / "session.db", scrubber)
    text = "deploy with q7Zr9xLp2mVw4tYk"  # no known shape: kept (and remembered) as is
    writer.add([fs(text)])
    assert writer.commit()
    writer.add([fs(text)])
    scrubber.learn("q7Zr9xLp2mVw4tYk")  # then seen in a credential header, before the next commit
    writer.close()
    first, second = (
        r["path"] for r in rows(tmp_path / "session.db", "SELECT path FROM fs_events ORDER BY id")
    )
    assert first == text  # written before anyone knew it was a secret
    assert second == scrubber.scrub(text) and "q7Zr9xLp2mVw4tYk" not in second
