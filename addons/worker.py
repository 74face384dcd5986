"""The recorder thread: takes messages from the hooks, writes rows, commits in batches.

Hooks and stream taps only `put()` tuples on a `SimpleQueue` (no locks, no I/O on the event
loop). This thread owns the `Recorder` and its SQLite connection, commits at least every
`commit_interval` seconds once rows are pending, and on `stop()` drains the queue, commits
and checkpoints. It works in batches: after draining the queue it pauses `batch_pause`
seconds, so a fast stream's chunks do not wake it (and take the GIL) once each. A failure
while handling one message is logged and never stops the thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from addons import websocket
from addons.recorder import Recorder

logger = logging.getLogger(__name__)

_STOP = ("stop",)


class RecorderThread:
    def __init__(
        self,
        make_recorder: Callable[[], Recorder],
        commit_interval: float = 0.25,
        batch_pause: float = 0.02,
        warm_up: Callable[[Recorder], None] | None = None,
    ) -> None:
        self.queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.commit_interval = commit_interval
        self.batch_pause = batch_pause
        self._warm_up = warm_up
        self.failures = 0
        self._make_recorder = make_recorder
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="capsem-recorder", daemon=True)

    def start(self) -> None:
        """Start the thread and wait until the database is open (raises if it could not be)."""
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def put(self, message: tuple[Any, ...]) -> None:
        self.queue.put(message)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything queued so far is committed (for tests and the CLI)."""
        done = threading.Event()
        self.queue.put(("barrier", done))
        return done.wait(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread.is_alive():
            self.queue.put(_STOP)
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning(
                    "capsem: recorder did not finish within %.0f s; some rows may be lost", timeout
                )

    def _run(self) -> None:
        try:
            recorder = self._make_recorder()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        if self._warm_up is not None:
            try:
                self._warm_up(recorder)
            except Exception as exc:  # prices or tokenizer missing: calls are recorded unpriced
                logger.warning("capsem: warming up the recorder failed: %r", exc)
        store = recorder.store
        last_commit = time.monotonic()
        try:
            while True:
                wait = self.commit_interval if store.pending else None
                try:
                    message = self.queue.get(timeout=wait)
                except queue.Empty:
                    message = None
                if message is not None and not self._handle_batch(recorder, message):
                    break
                now = time.monotonic()
                if store.pending and (message is None or now - last_commit >= self.commit_interval):
                    self._commit(store)
                    last_commit = now
        finally:
            self._drain(recorder)
            try:
                store.close()
            except Exception as exc:
                logger.warning("capsem: closing session.db failed: %r", exc)

    def _handle_batch(self, recorder: Recorder, message: tuple[Any, ...]) -> bool:
        """Handle `message` and everything queued behind it, then pause for `batch_pause` so that
        the stream taps' next chunks queue up without waking this thread once per chunk (each
        wake-up costs a GIL hand-over that the event loop would feel). False on stop."""
        deadline = time.monotonic() + self.commit_interval  # a busy queue must not hold back commits
        while message is not _STOP:
            self._handle(recorder, message)
            if time.monotonic() > deadline:
                return True
            try:
                message = self.queue.get_nowait()
            except queue.Empty:
                if message[0] not in ("barrier", "call"):  # someone may be waiting on those
                    time.sleep(self.batch_pause)
                return True
        return False

    def _handle(self, recorder: Recorder, message: tuple[Any, ...]) -> None:
        kind = message[0]
        try:
            if kind == "chunk":
                recorder.chunk(message[1], message[2], message[3])
            elif kind == "open":
                recorder.open(message[1])
            elif kind == "close":
                recorder.close(message[1])
            elif kind == "barrier":
                self._commit(recorder.store)
                message[1].set()
            elif kind == "call":
                message[1](recorder)
            elif kind == "ws":
                websocket.handle(recorder, message)
        except Exception as exc:
            self.failures += 1
            logger.warning("capsem: recording failed (%s): %r", kind, exc, exc_info=logger.isEnabledFor(10))

    def _commit(self, store: Any) -> None:
        try:
            store.commit()
        except Exception as exc:
            self.failures += 1
            logger.warning("capsem: commit failed: %r", exc)

    def _drain(self, recorder: Recorder) -> None:
        while True:
            try:
                message = self.queue.get_nowait()
            except queue.Empty:
                return
            if message is not _STOP:
                self._handle(recorder, message)
