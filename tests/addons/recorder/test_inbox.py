"""The recorder's inbox: rows from `capsem run`'s other processes reach session.db through the
recorder's one writer, scrubbed by its scrubber, each batch once, and bad frames hurt nothing."""

from __future__ import annotations

import socket
import time

from addons.feed import (
    Batch,
    FsChanges,
    Hello,
    Meta,
    ProcAnomalies,
    ProcAnomaly,
    ProcSample,
    ProcSamples,
    address_file,
    decode_ack,
    decode_to_recorder,
    frame,
    split_frames,
)
from addons.recorder.inbox import CMDLINE_MAX_CHARS, MAX_FRAME, Inbox
from assembler.feed import Feed
from capsem.redact import hash_value
from capsem.store.writer import SessionWriter
from tests.conftest import rows
from tests.recording import recorder_thread

SECRET = "tok-plain-value-98765"  # no known shape: scrubbed only because the client said so


def test_every_feed_message_survives_the_wire():
    anomaly = ProcAnomaly("fd_high", "warning", 1, None, "a", "b", 2, 0.9, 0.8, "{}", "c")
    batch = Batch(3, (FsChanges("2026-01-01T00:00:00Z", (("created", "a.txt", 5), ("deleted", "b", None))),
                      ProcSamples((ProcSample("t", 1, 42, cmdline="x"),)), Meta({"procdiag_x": "1"}),
                      ProcAnomalies((anomaly,))))  # fmt: skip

    buffer = bytearray(frame(batch) + frame(Hello("fswatch", (SECRET,))) + b"\x00\x00")
    assert [decode_to_recorder(p) for p in split_frames(buffer)] == [batch, Hello("fswatch", (SECRET,))]
    assert buffer == b"\x00\x00"  # an incomplete frame waits for its rest
    assert SECRET not in repr(Hello("fswatch", (SECRET,)))


def test_rows_sent_to_the_recorder_are_written_scrubbed_by_it(tmp_path):
    session = tmp_path / "s"
    with recorder_thread(session):
        feed = Feed(session, "procdiag", learn=(SECRET,))
        long_tail = "y" * (CMDLINE_MAX_CHARS + 100)
        feed.send(Meta({"procdiag_agent_pid": "42", "capture_rows_lost": "0"}),  # a key not its own: refused
                  ProcSamples((ProcSample("2026-01-01T00:00:00Z", 0, 42, name="agent",
                                          cmdline=f"agent --token {SECRET} {long_tail}"),)))  # fmt: skip
        fs = Feed(session, "fswatch")
        fs.send(FsChanges("2026-01-01T00:00:01Z", (("created", f"notes-{SECRET}.txt", 5),)))
        assert feed.flush(10) and fs.flush(10)
        assert feed.committed[ProcSamples] == 1 and fs.committed[FsChanges] == 1
    db = session / "session.db"
    (sample,) = rows(db, "SELECT pid, name, cmdline FROM proc_samples")
    marker = f"[redacted {hash_value(SECRET)}]"
    assert (
        sample["cmdline"].startswith(f"agent --token {marker} yyy")
        and len(sample["cmdline"]) == CMDLINE_MAX_CHARS
    )
    (event,) = rows(db, "SELECT action, path, size FROM fs_events")
    assert event == {"action": "created", "path": f"notes-{marker}.txt", "size": 5}
    meta = {r["key"]: r["value"] for r in rows(db, "SELECT * FROM session_meta")}
    assert (
        meta["procdiag_agent_pid"] == "42"
        and meta["procdiag_feed_seq"] == "1"
        and meta["fswatch_feed_seq"] == "1"
    )
    assert meta.get("capture_rows_lost", "0") == "0"
    assert (
        not address_file(session).exists() and not (session / "recorder.sock").exists()
    )  # removed at the end


def test_a_batch_sent_again_after_a_restart_is_written_once(tmp_path):
    """The recorder died after committing a batch but before acknowledging it: its successor, which
    reads the client's last batch number from session_meta, acknowledges it without writing it again."""
    db = tmp_path / "session.db"
    batch = Batch(1, (FsChanges("2026-01-01T00:00:00Z", (("created", "a.txt", 1),)),))
    for _ in range(2):  # two recorders, one after the other, handed the same batch
        writer = SessionWriter(db)
        inbox = Inbox.open(writer)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(address_file(tmp_path).read_text())
        client.sendall(frame(Hello("fswatch")) + frame(batch))
        deadline = time.monotonic() + 10
        received = []
        while len(received) < 2 and time.monotonic() < deadline:
            received += inbox.take()
            time.sleep(0.01)
        inbox.handle(writer, received)
        assert writer.commit()
        inbox.acknowledge()
        client.settimeout(10)
        assert decode_ack(client.recv(64)[4:]).seq == 1  # acknowledged either way
        client.close()
        inbox.close()
        writer.close()
    assert len(rows(db, "SELECT id FROM fs_events")) == 1


def test_a_bad_frame_closes_its_connection_and_nothing_else(tmp_path):
    session = tmp_path / "s"
    with recorder_thread(session) as recorder:
        bad = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bad.connect(address_file(session).read_text())
        bad.sendall(b"\x00\x00\x00\x03abc")  # not msgpack of a Hello
        bad.settimeout(10)
        assert bad.recv(10) == b""  # closed by the recorder
        early = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        early.connect(address_file(session).read_text())
        early.sendall(frame(Batch(1, ())))  # a batch before its Hello
        early.settimeout(10)
        assert early.recv(10) == b""
        huge = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        huge.connect(address_file(session).read_text())
        huge.sendall((MAX_FRAME + 1).to_bytes(4, "big") + b"x")  # it would have to be held in memory
        huge.settimeout(10)
        assert huge.recv(10) == b""
        feed = Feed(session, "fswatch")
        feed.send(FsChanges("2026-01-01T00:00:00Z", (("modified", "a", 1),)))
        assert feed.flush(10)
        assert recorder.exit_reason is None
    assert len(rows(session / "session.db", "SELECT id FROM fs_events")) == 1


def test_the_feed_rows_are_the_tables_columns(tmp_path):
    from capsem.store.schema import open_session_db

    conn = open_session_db(tmp_path / "session.db")
    for struct, table in ((ProcSample, "proc_samples"), (ProcAnomaly, "proc_anomalies")):
        columns = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        assert set(struct.__struct_fields__) == columns - {"id", "event_id"}, table
    conn.close()
