"""Live OTLP export from the recorder process, on a thread of its own.

The recorder's loop calls `wake()` after each commit: one put on a queue of size one, never a
wait. The thread reads what was committed after the session's watermark from session.db (its own
read-only connection: session.db is the buffer, so memory stays bounded however long the backend
is away), sends it, and moves the watermark in main.db. A failed request backs off (1 s doubling
to 30 s); a slow one holds up only this thread. At the end `close()` gives the thread a few
seconds to send the rest and the turns; what it could not send waits for `capsem export otlp`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from pathlib import Path

from addons.recorder.otlp.send import Target, export_session, exporter
from capsem.store.schema import connect, open_main_db

logger = logging.getLogger("addons.recorder.otlp")
TIMEOUT = 5.0
"""Seconds one export request may take (retries on connection errors included)."""
CLOSE_TIMEOUT = 3.0
"""Seconds the session's last spans may take when recording stops."""
MAX_BACKOFF = 30.0


class LiveExport:
    def __init__(self, target: Target, session_id: str, db_path: Path, main_db_path: Path) -> None:
        self.target = target
        self.session_id = session_id
        self.db_path = db_path
        self.main_db_path = main_db_path
        self.wakes: queue.Queue[bool] = queue.Queue(maxsize=1)
        self.closing = threading.Event()
        self.sent = 0
        self.failures = 0
        self.done = False
        self.thread = threading.Thread(target=self._run, name="capsem-otlp", daemon=True)

    def start(self) -> LiveExport:
        self.thread.start()
        return self

    def wake(self) -> None:
        """New rows were committed (never blocks)."""
        try:
            self.wakes.put_nowait(True)
        except queue.Full:
            pass

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """session.db is complete: send the rest and the turns, for at most `timeout` seconds."""
        self.closing.set()
        self.wake()
        self.thread.join(timeout)
        if self.thread.is_alive() or not self.done:
            logger.warning("capsem: OTLP export to %s is incomplete (%d spans sent, %d failed attempts); "
                           "`capsem export otlp %s` sends the rest", self.target.endpoint, self.sent,
                           self.failures, self.session_id)  # fmt: skip

    def _run(self) -> None:
        try:
            session = connect(self.db_path, readonly=True)
            main = open_main_db(self.main_db_path)
        except Exception as exc:
            logger.warning("capsem: OTLP export cannot open the session's databases: %r", exc)
            return
        send = exporter(self.target, TIMEOUT)
        backoff, retry_at = 1.0, 0.0
        try:
            while True:
                closing = self.closing.is_set()
                try:
                    self.wakes.get(timeout=None if closing else 1.0)
                except queue.Empty:
                    pass
                closing = self.closing.is_set()
                if not closing and time.monotonic() < retry_at:
                    continue
                try:
                    sent = export_session(session, main, self.session_id, self.target, send, finished=closing)
                except Exception as exc:  # a bug or a broken database: export stops, recording goes on
                    logger.warning("capsem: OTLP export stopped: %r", exc)
                    return
                self.sent += sent.spans
                self.done = sent.done
                if sent.failed:
                    if self.failures == 0:
                        logger.warning("capsem: OTLP endpoint %s does not accept spans; retrying in the "
                                       "background", self.target.endpoint)  # fmt: skip
                    self.failures += 1
                    retry_at, backoff = time.monotonic() + backoff, min(MAX_BACKOFF, backoff * 2)
                else:
                    backoff = 1.0
                if closing:
                    return
        finally:
            send.shutdown()
            session.close()
            main.close()
