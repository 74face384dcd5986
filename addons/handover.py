"""From the hooks to the recorder: a bounded outbox that never makes a flow wait.

The hooks call `Outbox.put(message)`, which appends to a deque and returns: no lock, no I/O,
and a wake-up only when the deque was empty (or for a `Barrier` or `Stop`). The consumer thread
then waits `interval` seconds, so the chunks of a busy stream pile up and go on as one batch.
When more than `budget` bytes wait (the recorder has fallen behind), the chunks of streamed
bodies are dropped, counted, and every later chunk of the same flow too, so the recorder sees a
clean prefix of that body and the flow's row says how many chunks it lost (capture degrades;
the flow never waits).

Two recorders drain an outbox:
- `RecorderProcess`, what mitmdump uses: a child process (`python -m addons.recorder_process`)
  fed msgpack batches through a pipe. Whatever faults in the recorder (SQLite, a full disk, a
  SIGBUS on a mapped WAL index) cannot take mitmdump down: if the child dies the proxy keeps
  forwarding, further messages are dropped and counted, and the session is marked `crashed`
  with the reason.
- `RecorderThread`, for in-process tests: the same `Recorder` and `SessionWriter` on a thread.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from addons.messages import Barrier, Chunk, FlowEnded, Message, Stop, encode

if TYPE_CHECKING:
    from addons.recorder_process import RecorderSpec

logger = logging.getLogger(__name__)

_URGENT = (Barrier, Stop)


@dataclass
class HandoverStats:
    """What the outbox had to drop."""

    dropped_chunks: int = 0
    dropped_messages: int = 0
    """Messages other than chunks dropped (only past twice the budget, or after the recorder died)."""


def _size(message: Message) -> int:
    kind = type(message)
    if kind is Chunk:
        return len(message.data) + 64  # type: ignore[union-attr]
    if kind is FlowEnded:
        return len(message.request_body or b"") + len(message.response_body or b"") + 1024  # type: ignore[union-attr]
    return 512


class Outbox:
    """A bounded, drop-counting queue between the event loop (producer) and one consumer thread."""

    def __init__(self, budget: int = 256 * 1024 * 1024) -> None:
        self.budget = budget
        self.stats = HandoverStats()
        self.closed = False
        self._items: deque[Message] = deque()
        self._put_bytes = 0  # written by the producer only
        self._taken_bytes = 0  # written by the consumer only
        self._dropping: dict[str, int] = {}  # flow key -> chunks dropped so far
        self.wake = threading.Event()

    @property
    def waiting(self) -> bool:
        """Messages are waiting to be taken."""
        return bool(self._items)

    @property
    def waiting_bytes(self) -> int:
        return self._put_bytes - self._taken_bytes

    def put(self, message: Message) -> None:
        """Queue `message` (or drop and count it); never blocks, never raises."""
        if self.closed:
            self.stats.dropped_messages += 1
            return
        kind = type(message)
        if kind is Chunk:
            key = message.key  # type: ignore[union-attr]
            if key in self._dropping or self.waiting_bytes > self.budget:
                self._dropping[key] = self._dropping.get(key, 0) + 1
                self.stats.dropped_chunks += 1
                return
        elif kind is FlowEnded:
            dropped = self._dropping.pop(message.request.key, 0)  # type: ignore[union-attr]
            if dropped:
                message = msgspec.structs.replace(message, dropped_chunks=dropped)  # type: ignore[arg-type]
        size = _size(message)
        if self.waiting_bytes > 2 * self.budget and kind not in _URGENT:
            self.stats.dropped_messages += 1
            return
        self._put_bytes += size
        items = self._items
        items.append(message)
        if len(items) == 1 or kind in _URGENT:  # one wake-up per batch, not per chunk
            self.wake.set()

    def stop_message(self, status: str) -> Stop:
        """The `Stop` that ends the session, with what was dropped on the way."""
        return Stop(status, self.stats.dropped_chunks, self.stats.dropped_messages)

    def take(self, max_bytes: int = 4 * 1024 * 1024) -> list[Message]:
        """What is waiting (up to about `max_bytes`), oldest first; consumer side."""
        out: list[Message] = []
        taken = 0
        items = self._items
        while items and taken < max_bytes:
            message = items.popleft()
            taken += _size(message)
            out.append(message)
        self._taken_bytes += taken
        return out


class _Barriers:
    """Flushing through an outbox: a `Barrier` goes in, its acknowledgement comes back."""

    outbox: Outbox
    exit_reason: str | None

    def __init__(self) -> None:
        self._acks: dict[int, threading.Event] = {}
        self._next = 0
        self.on_spend: Callable[[str], None] | None = None
        """Gets the JSON of each `spend` report (this session's spend; only with budgets)."""

    def _spend(self, text: str) -> None:
        if self.on_spend is not None:
            try:
                self.on_spend(text)
            except Exception as exc:  # a bad report must not stop the status reader
                logger.warning("capsem: a spend report could not be read: %r", exc)

    def ack(self, token: int) -> None:
        event = self._acks.pop(token, None)
        if event is not None:
            event.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything put so far is committed (False on a timeout or a dead recorder)."""
        self._next += 1
        done = self._acks[self._next] = threading.Event()
        self.outbox.put(Barrier(self._next))
        return done.wait(timeout) and self.exit_reason is None


class RecorderThread(_Barriers):
    """The recorder on a thread of this process (in-process tests): same loop, same writer."""

    def __init__(self, outbox: Outbox, spec: RecorderSpec, interval: float = 0.02) -> None:
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
            time.sleep(self.interval)
        return self.outbox.take()

    def _main(self) -> None:
        from addons.recorder_process import finish, open_recorder, run, warm_up

        try:
            loop = open_recorder(self.spec)
        except BaseException as exc:
            self.exit_reason = f"cannot open {self.spec.db_path}: {exc!r}"
            self.ready.set()
            return
        self.ready.set()
        try:
            warm_up(loop)
            stop = run(loop, self._batches, self.ack, lambda line: self._spend(line.removeprefix("spend ")))
            finish(loop, stop, Path(self.spec.main_db_path))
        except BaseException as exc:  # the session ends without its recorder
            self.exit_reason = f"recorder failed: {exc!r}"
            logger.warning("capsem: %s", self.exit_reason)

    def stop(self, status: str = "stopped", timeout: float = 30.0) -> str | None:
        """Stop the recorder; None when it finished cleanly, else why not."""
        self.outbox.put(self.outbox.stop_message(status))
        self._thread.join(timeout)
        self.outbox.closed = True
        if self._thread.is_alive():
            return f"the recorder did not finish within {timeout:.0f} s"
        return self.exit_reason


class RecorderProcess(_Barriers):
    """The recorder in a child process, fed through a pipe by a sender thread.

    Protocol: frames of a 4-byte big-endian length and a payload on the child's stdin: first the
    JSON spec (`RecorderSpec`: the session and settings it records), then msgpack batches.
    The child answers on its stdout with lines: `ready`, `ack <token>`, `spend <json>`, `stopped`.
    """

    def __init__(self, outbox: Outbox, spec: bytes, interval: float = 0.02) -> None:
        super().__init__()
        self.outbox = outbox
        self.spec = spec
        self.interval = interval
        self.ready = threading.Event()
        self.on_ready: Callable[[], None] | None = None
        self.exit_reason: str | None = None
        self._stopped = threading.Event()
        self._child: subprocess.Popen[bytes] | None = None
        self._sender = threading.Thread(target=self._send, name="capsem-handover", daemon=True)
        self._status = threading.Thread(target=self._read_status, name="capsem-recorder-status", daemon=True)

    def start(self) -> None:
        """Start the child and the threads; returns at once (messages wait until the child reads them)."""
        self._child = subprocess.Popen(
            [sys.executable, "-m", "addons.recorder_process"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=False,
        )  # fmt: skip
        assert self._child.stdin is not None
        _grow_pipe(self._child.stdin.fileno())
        self._child.stdin.write(len(self.spec).to_bytes(4, "big") + self.spec)
        self._child.stdin.flush()
        self._sender.start()
        self._status.start()

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    def _send(self) -> None:
        assert self._child is not None and self._child.stdin is not None
        pipe = self._child.stdin
        broken = False
        while True:
            if not self.outbox.waiting:
                self.outbox.wake.wait()
                self.outbox.wake.clear()
                if not self._stopped.is_set():
                    time.sleep(self.interval)  # let a busy stream's chunks pile up into one batch
            batch = self.outbox.take()
            if not batch:
                if self._stopped.is_set():
                    break
                continue
            if not broken:
                try:
                    frame = encode(batch)
                    pipe.write(len(frame).to_bytes(4, "big") + frame)
                    pipe.flush()
                except (OSError, ValueError) as exc:
                    broken = True
                    self._died(f"the recorder process stopped reading ({exc!r})")
            if broken:
                self.outbox.stats.dropped_messages += len(batch)
                for message in batch:
                    if type(message) is Barrier:
                        self.ack(message.token)
            if any(type(m) is Stop for m in batch):
                break
        try:
            pipe.close()
        except OSError:
            pass

    def _read_status(self) -> None:
        assert self._child is not None and self._child.stdout is not None
        for raw in self._child.stdout:
            line = raw.decode("utf-8", "replace").strip()
            if line == "ready":
                self.ready.set()
                if self.on_ready is not None:
                    self.on_ready()
            elif line.startswith("ack "):
                self.ack(int(line[4:]))
            elif line.startswith("spend "):
                self._spend(line[6:])
        code = self._child.wait()
        self.ready.set()
        if code != 0 and self.exit_reason is None:
            self._died(_exit_text(code))
        for event in list(self._acks.values()):  # nobody will answer them now
            event.set()

    def _died(self, reason: str) -> None:
        if self.exit_reason is None:
            self.exit_reason = reason
            self.outbox.closed = True
            logger.warning("capsem: %s; capture stopped, traffic is not affected", reason)

    def stop(self, status: str = "stopped", timeout: float = 30.0) -> str | None:
        """Stop the child after it has written everything, rolled the session up and marked it
        `status`. None when that worked, else why not (the caller then marks the session)."""
        self.outbox.put(self.outbox.stop_message(status))
        self._stopped.set()
        self.outbox.wake.set()
        self._sender.join(timeout)
        assert self._child is not None
        deadline = time.monotonic() + timeout
        try:
            self._child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()
            self._died(f"the recorder process did not finish within {timeout:.0f} s and was killed")
        self._status.join(5)
        self.outbox.closed = True
        return self.exit_reason


def _exit_text(code: int) -> str:
    if code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the recorder process died ({name})"
    return f"the recorder process exited with status {code}"


def _grow_pipe(fd: int, size: int = 1024 * 1024) -> None:
    """A bigger pipe buffer (Linux): the sender blocks less often while the child catches up."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except (OSError, ImportError):
        pass
