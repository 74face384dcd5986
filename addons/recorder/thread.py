"""The recorder on a thread of the test process: `Capsem(recorder=RecorderThread)`.

It stands where `addons/proxy/handover.py: RecorderProcess` stands in mitmdump (same outbox, same
barriers and spend reports), and runs the recorder's own loop (`addons/recorder/main.py`) on a
thread, so in-process tests see the rows a real session writes. It lives on the recorder side:
the proxy side never imports it, the tests hand it in.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from addons.messages import Message
from addons.proxy.outbox import BATCH_INTERVAL, Barriers, Outbox
from addons.recorder.main import finish, open_recorder, run, warm_up
from addons.spec import RecorderSpec

logger = logging.getLogger(__name__)


class RecorderThread(Barriers):
    """The recorder on a thread of this process (in-process tests): same loop, same writer."""

    def __init__(self, outbox: Outbox, spec: RecorderSpec, interval: float = BATCH_INTERVAL) -> None:
        super().__init__()
        self.outbox = outbox
        self.spec = spec
        self.interval = interval
        self.ready = threading.Event()
        self.exit_reason: str | None = None
        self._thread = threading.Thread(target=self._main, name="capsem-recorder", daemon=True)

    def start(self) -> None:
        """Start the thread and wait until session.db is open (raises if it could not be)."""
        self._thread.start()
        self.ready.wait()
        if self.exit_reason is not None:
            raise RuntimeError(self.exit_reason)

    def _batches(self) -> list[Message]:
        if not self.outbox.waiting and self.outbox.wake.wait(0.25):  # ≥ every 250 ms: the loop commits
            self.outbox.wake.clear()
            self.outbox.pause(self.interval)
        return self.outbox.take()

    def _main(self) -> None:
        try:
            loop = open_recorder(self.spec)
        except BaseException as exc:
            self.exit_reason = f"cannot open {self.spec.db_path}: {exc!r}"
            self.ready.set()
            return
        self.ready.set()
        try:
            warm_up(loop)
            stop = run(loop, self._batches, self.ack, self._report)
            finish(loop, stop, Path(self.spec.main_db_path))
        except BaseException as exc:  # the session ends without its recorder
            self.exit_reason = f"recorder failed: {exc!r}"
            logger.warning("capsem: %s", self.exit_reason)

    def _report(self, line: str) -> None:
        if line.startswith("spend "):
            self._spend(line.removeprefix("spend "))

    def stop(self, status: str = "stopped", timeout: float = 30.0) -> str | None:
        """Stop the recorder; None when it finished cleanly, else why not."""
        self.outbox.put(self.outbox.stop_message(status))
        self._thread.join(timeout)
        self.outbox.closed = True
        if self._thread.is_alive():
            return f"the recorder did not finish within {timeout:.0f} s"
        return self.exit_reason
