"""The only writes of a session.db outside its recorder: when no recorder runs it.

The recorder is the one writer of a session.db while its session runs (`addons/recorder/inbox.py`
takes `capsem run`'s rows). Two things are written here instead, each with a `SessionWriter`
of its own and the recorder's own row conversion (`addons/recorder/inbox.py: queue_rows`), so
the rows are the same and as scrubbed:

- `write_directly`: what `capsem run`'s feeds hold that no recorder took (it died for good, or
  never listened), after mitmdump has stopped;
- `record_anomalies`: the anomaly pass over a session.db's stored samples, rerun offline (or
  `capsem run`'s last resort after mitmdump stopped).

Never call them while a recorder writes the session.db. The recorder side is imported only when
they run: the watcher, the sampler and the feed import nothing of it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from addons.feed import ProcAnomalies, address_file
from assembler.feed import Feed
from assembler.procdiag.anomalies import CLIENT, detect_stored
from assembler.procdiag.detect import Anomaly

LAST_CHANCE = 3.0
"""Seconds `write_directly` gives a recorder that still announces its socket."""


def write_directly(db_path: Path, feeds: list[Feed]) -> int:
    """Write what `feeds` hold unacknowledged to session.db with a writer of our own, when no
    recorder will take it (after mitmdump stopped). Returns the rows written; raises on failure."""
    from addons.recorder.inbox import queue_rows
    from capsem.redact import Scrubber
    from capsem.store.writer import SessionWriter

    if address_file(db_path.parent).exists():  # a recorder may still be finishing: it takes them
        for feed in feeds:
            feed.flush(LAST_CHANCE)
    waiting = [(feed, feed.unacknowledged()) for feed in feeds if feed.waiting]
    if not waiting:
        return 0
    scrubber = Scrubber()
    for feed, _ in waiting:
        for value in feed.learn:
            scrubber.learn(value)
    writer = SessionWriter(db_path, scrubber)
    try:
        for feed, batches in waiting:
            for rows in batches:
                queue_rows(writer, feed.client, rows)
        count = writer.pending
        if not writer.commit():
            raise RuntimeError(f"cannot write {db_path}: {writer.health.last_error}")
    finally:
        writer.close(checkpoint=False)
    for feed, _ in waiting:
        feed.written()
    return count


def record_anomalies(db_path: Path, *, agent_pid: int | None = None) -> list[Anomaly]:
    """Detect anomalies in the stored samples and add those not stored yet, writing session.db
    directly: for a session.db no recorder writes (a rerun on an old session, or `capsem run`
    after mitmdump stopped). Insert-only, so a rerun keeps the rows and the `detected_at` of the
    first pass.

    Args:
        db_path: a session.db (migrated on open).
        agent_pid: the process capsem started; default: the one recorded in session_meta.
    """
    from addons.recorder.inbox import queue_rows
    from capsem.store.writer import SessionWriter

    writer = SessionWriter(db_path)
    try:
        writer.conn.row_factory = sqlite3.Row
        found, new = detect_stored(writer.conn, agent_pid)
        queue_rows(writer, CLIENT, ProcAnomalies(tuple(new)))
        if not writer.commit():
            raise sqlite3.OperationalError(f"cannot write proc_anomalies: {writer.health.last_error}")
        return found
    finally:
        writer.conn.close()
