"""`capsem run`'s rows reach session.db only through the recorder: sent before it listens, across
its restart, and written by `capsem run` itself only when no recorder will ever take them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from addons.feed import FsChanges, address_file
from assembler.feed import Feed
from assembler.offline_write import write_directly
from tests.conftest import rows
from tests.recording import recorder_process, recorder_thread


def changes(first: int, count: int) -> FsChanges:
    return FsChanges(
        "2026-01-01T00:00:00Z", tuple(("created", f"f{i}.txt", i) for i in range(first, first + count))
    )


def test_rows_given_before_the_recorder_listens_wait_and_arrive(tmp_path):
    session = tmp_path / "s"
    feed = Feed(session, "fswatch")
    feed.send(changes(0, 3))  # no recorder yet: kept, nothing raised, nothing waited for
    assert feed.pending == 3 and not feed.flush(0.2)
    with recorder_thread(session):
        feed.send(changes(3, 2))
        assert feed.flush(10)
    assert feed.pending == 0 and feed.committed[FsChanges] == 5
    assert [r["path"] for r in rows(session / "session.db", "SELECT path FROM fs_events ORDER BY id")] == [
        f"f{i}.txt" for i in range(5)
    ]


@pytest.mark.timeout(120)
def test_a_recorder_killed_mid_session_loses_no_row_and_writes_none_twice(tmp_path):
    """The real recorder process, killed with SIGKILL while batches flow: mitmdump's supervisor
    restarts it, the feed reconnects and sends again what was not acknowledged, and the new
    recorder skips what its predecessor had committed."""
    session = tmp_path / "s"
    feed = Feed(session, "fswatch")
    with recorder_process(session) as recorder:
        first = recorder.pid
        for n in range(40):
            feed.send(changes(n * 5, 5))
            if n == 20:
                assert feed.flush(10)  # some acknowledged, then more in flight when it dies
                feed.send(changes(1000, 5))
                os.kill(first, signal.SIGKILL)
            time.sleep(0.01)
        assert feed.flush(30)
        assert recorder.restarts == 1 and recorder.pid != first and feed.connects >= 2
    paths = [r["path"] for r in rows(session / "session.db", "SELECT path FROM fs_events")]
    assert len(paths) == len(set(paths)) == 205 and feed.committed[FsChanges] == 205


def test_what_no_recorder_took_is_written_once_none_runs(tmp_path):
    session = tmp_path / "s"
    secret = "tok-plain-value-98765"
    with recorder_thread(session):
        pass  # the session.db exists, its recorder has finished
    feed = Feed(session, "fswatch", learn=(secret,))
    feed.send(FsChanges("2026-01-01T00:00:00Z", (("created", f"{secret}.txt", 1),)))
    assert write_directly(session / "session.db", [feed]) == 1
    assert feed.pending == 0 and feed.committed[FsChanges] == 1
    (event,) = rows(session / "session.db", "SELECT path FROM fs_events")
    assert secret not in event["path"] and event["path"].startswith("[redacted ")


def test_the_watcher_and_the_sampler_open_no_writer(tmp_path, monkeypatch):
    """With the recorder running, every SessionWriter is opened on the recorder's own thread: the
    watcher's and the sampler's rows arrive all the same."""
    from assembler.fswatch import WorkspaceWatcher
    from assembler.procdiag import ProcessSampler, finish
    from capsem.store import writer as writer_module

    opened: list[str] = []
    original = writer_module.SessionWriter.__init__

    def spy(self, *args, **kwargs):
        import threading

        opened.append(threading.current_thread().name)
        original(self, *args, **kwargs)

    monkeypatch.setattr(writer_module.SessionWriter, "__init__", spy)
    session, workspace = tmp_path / "s", tmp_path / "ws"
    workspace.mkdir()
    db = session / "session.db"
    with recorder_thread(session):
        watcher = WorkspaceWatcher(workspace, db, skip=())
        watcher.start()
        agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
        sampler = ProcessSampler(agent.pid, db, interval_ms=50)
        sampler.start()
        (workspace / "made.txt").write_text("by the agent")
        agent.wait()
        report = finish(sampler)
        assert watcher.stop()
    assert opened == ["capsem-recorder"]
    assert report.error is None and report.samples == len(rows(db, "SELECT id FROM proc_samples")) > 0
    assert rows(db, "SELECT action, path FROM fs_events") == [{"action": "created", "path": "made.txt"}]
    assert watcher.events == 1
    assert not address_file(session).exists()


def test_samples_no_recorder_took_are_written_once_mitmdump_has_stopped(tmp_path, monkeypatch):
    """`capsem run`'s last resort (the recorder died for good): the first pass reports the samples
    unwritten, the retry after mitmdump stopped writes them and their anomalies itself."""
    from assembler.procdiag import ProcessSampler, finish
    from assembler.procdiag import sampler as sampler_module

    monkeypatch.setattr(sampler_module, "FINAL_WRITE_TIMEOUT", 0.3)
    session = tmp_path / "s"
    db = session / "session.db"
    with recorder_thread(session):
        pass  # session.db exists; no recorder runs any more
    agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    sampler = ProcessSampler(agent.pid, db, interval_ms=50)
    sampler.start()
    agent.wait()
    first = finish(sampler, warn=False)
    assert first.error is not None and "could not be written" in first.error
    assert rows(db, "SELECT id FROM proc_samples") == []
    second = finish(sampler, recorder_gone=True)
    assert second.error is None and second.samples == len(rows(db, "SELECT id FROM proc_samples")) > 0
    meta = {r["key"]: r["value"] for r in rows(db, "SELECT * FROM session_meta")}
    assert meta["procdiag_agent_pid"] == str(agent.pid)
