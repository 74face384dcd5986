"""From the outbox to the recorder process: `RecorderProcess`, what mitmdump uses.

A child process (`python -m addons.recorder.main`) is fed msgpack batches of the outbox's messages
(`addons/proxy/outbox.py`) through a pipe. Whatever faults in the recorder (SQLite, a full disk, a
SIGBUS on a mapped WAL index) cannot take mitmdump down: if the child dies the proxy keeps
forwarding and a new child is started on the same session.db at once; the flows the dead one had
not committed are counted. Only after `MAX_RESTARTS` are further messages dropped and counted, and
the session marked `crashed` with the reason. (In-process tests use `RecorderThread`,
`addons/recorder/thread.py`, instead: the proxy side never imports it.)
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from addons.messages import Barrier, FlowEnded, Message, Stop, encode
from addons.proxy.outbox import BATCH_INTERVAL, Barriers, Outbox, count

logger = logging.getLogger(__name__)

MAX_RESTARTS = 10
"""How often a session's recorder process is restarted after dying before capsem gives up."""
RESTART_DELAY = 0.2
"""Seconds added to the wait before each further restart (the first is at once)."""


@dataclass
class _Child:
    """One recorder process, and what was handed to it."""

    process: subprocess.Popen[bytes]
    number: int
    """0 for the first, n for the n-th restart."""
    flows_sent: int = 0
    """`FlowEnded` messages written to its pipe."""
    flows_committed: int = 0
    """Of those, how many it reported committed (`committed <n>` lines)."""
    barriers: set[int] = field(default_factory=set)
    stop_sent: bool = False
    ready: bool = False
    """It opened session.db (one that dies before would only be followed by one failing alike)."""


class RecorderProcess(Barriers):
    """The recorder in a child process, fed through a pipe by a sender thread, and supervised.

    Protocol: frames of a 4-byte big-endian length and a payload on the child's stdin: first the
    JSON spec (`RecorderSpec`: the session and settings it records), then msgpack batches.
    The child answers on its stdout with lines: `ready`, `ack <token>`, `committed <flows>`,
    `spend <json>`, `health <json>`, `stopped`.

    A child that dies before the session stops (kill -9, SIGBUS, OOM) is restarted at once on
    the same session.db (`RecorderSpec.restart`): the dead one is reaped first, so the new one's
    ids, counted up from what session.db holds, cannot collide with anything it wrote. The flows
    the dead one had been handed but not committed are counted (`missed_flows`, stored in
    `session_meta` by the new one); the batch being written when it died, and everything still in
    the outbox, go to the new one. After `max_restarts`, or when a child dies before it could open
    session.db, it stays dead: later messages are dropped and counted, and the session is marked
    `crashed` at `stop`, with those counts.
    """

    def __init__(self, outbox: Outbox, spec: bytes, interval: float = BATCH_INTERVAL,
                 max_restarts: int = MAX_RESTARTS) -> None:  # fmt: skip
        super().__init__()
        self.outbox = outbox
        self.spec = spec
        self.interval = interval
        self.max_restarts = max_restarts
        self.ready = threading.Event()
        self.on_ready: Callable[[], None] | None = None
        self.exit_reason: str | None = None
        self.restarts = 0
        self.missed_flows = 0
        """Flows handed to a recorder that died before committing them."""
        self.health: dict[str, int | str] = {}
        """The last `health` report (rows lost, failed commits...): kept here when the disk is full."""
        self._stopped = threading.Event()
        self._finished = threading.Event()  # no recorder runs, and none will
        self._cond = threading.Condition()
        self._writing = threading.Lock()
        self._child: _Child | None = None
        self._failed_barriers: set[int] = set()
        self._sender = threading.Thread(target=self._send, name="capsem-handover", daemon=True)

    def start(self) -> None:
        """Start the child and the threads; returns at once (messages wait until the child reads them)."""
        self._child = self._spawn(0)
        self._sender.start()

    @property
    def pid(self) -> int | None:
        child = self._child
        return child.process.pid if child else None

    def _spawn(self, number: int) -> _Child:
        spec = self.spec
        if number:
            values = msgspec.json.decode(spec)
            values.update(restart=number, missed_flows=self.missed_flows)
            spec = msgspec.json.encode(values)
        process = subprocess.Popen(
            [sys.executable, "-m", "addons.recorder.main"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=False,
        )  # fmt: skip
        assert process.stdin is not None
        _grow_pipe(process.stdin.fileno())
        child = _Child(process, number)
        try:
            process.stdin.write(len(spec).to_bytes(4, "big") + spec)
            process.stdin.flush()
        except OSError:
            pass  # it died at once: its status thread sees it
        name = f"capsem-recorder-status-{number}"
        threading.Thread(target=self._read_status, args=(child,), name=name, daemon=True).start()
        return child

    # -- the sender thread ---------------------------------------------------------------------

    def _send(self) -> None:
        outbox = self.outbox
        while True:
            if not outbox.waiting:
                outbox.wake.wait()
                outbox.wake.clear()
            if not self._stopped.is_set():  # a round sends what came meanwhile: busy streams' chunks together
                outbox.pause(self.interval)
            if self._send_round():
                break
        child = self._child
        if child is not None and child.process.stdin is not None:
            try:
                child.process.stdin.close()
            except OSError:
                pass

    def _send_round(self) -> bool:
        """Send what waits now, in frames of about `BATCH_BYTES`; True once the `Stop` is sent.

        What comes meanwhile waits for the next round, `interval` later (a `Barrier` or `Stop`
        goes at once): a flood's chunks were otherwise sent as fast as they came, a frame at a
        time, the sender thread and the recorder working through the stream beside mitmdump."""
        outbox = self.outbox
        end = outbox.taken_bytes + outbox.waiting_bytes
        while outbox.taken_bytes < end or outbox.urgent:
            batch = outbox.take()
            if not batch:
                break
            if not self._deliver(batch):
                outbox.stats.dropped_messages += count(batch)
                for message in batch:
                    if type(message) is Barrier:
                        self._fail_barrier(message.token)  # type: ignore[union-attr]
            if any(type(m) is Stop for m in batch):
                return True
        return self._stopped.is_set() and not outbox.waiting

    def _deliver(self, batch: list[Message]) -> bool:
        """Write a batch to the live child, to its successor if it dies meanwhile; False when no
        recorder will run any more."""
        frame = encode(batch)
        flows = sum(type(m) is FlowEnded for m in batch)
        barriers = {m.token for m in batch if type(m) is Barrier}  # type: ignore[union-attr]
        stop = any(type(m) is Stop for m in batch)
        while True:
            with self._cond:
                while self._child is None and not self._finished.is_set():
                    self._cond.wait(0.5)
                child = self._child
            if child is None:
                return False
            assert child.process.stdin is not None
            with self._writing:  # `_ended` counts what it lost only once this write is settled
                child.flows_sent += flows  # before the write: it may die right after reading it
                child.barriers |= barriers
                try:
                    child.process.stdin.write(len(frame).to_bytes(4, "big"))
                    child.process.stdin.write(frame)  # (not joined: a batch can be megabytes)
                    child.process.stdin.flush()
                    written = True
                except (OSError, ValueError):  # it died: its successor gets the batch
                    child.flows_sent -= flows
                    child.barriers -= barriers
                    written = False
            if not written:
                with self._cond:
                    while self._child is child and not self._finished.is_set():
                        self._cond.wait(0.5)
                continue
            child.stop_sent |= stop
            return True

    # -- the status threads (one per child) ------------------------------------------------------

    def _read_status(self, child: _Child) -> None:
        assert child.process.stdout is not None
        for raw in child.process.stdout:
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("ack "):
                token = int(line[4:])
                child.barriers.discard(token)
                self.ack(token)
            elif line.startswith("committed "):
                child.flows_committed = int(line[10:])
            elif line.startswith("spend "):
                self._spend(line[6:])
            elif line.startswith("health "):
                self._health(line[7:])
            elif line == "ready":
                self._child_ready(child)
        self._ended(child, child.process.wait())

    def _child_ready(self, child: _Child) -> None:
        child.ready = True
        if child.number == 0:
            self.ready.set()
            if self.on_ready is not None:
                self.on_ready()
        else:
            logger.warning("capsem: the recorder process was restarted (%d of at most %d) and records again",
                           child.number, self.max_restarts)  # fmt: skip

    def _health(self, text: str) -> None:
        try:
            health = msgspec.json.decode(text)
        except msgspec.DecodeError:
            return
        lost = int(health.get("capture_rows_lost") or 0)
        if lost > int(self.health.get("capture_rows_lost") or 0):
            logger.warning("capsem: %d rows could not be written to session.db (%s); the record is incomplete",
                           lost, health.get("capture_last_error") or "unknown error")  # fmt: skip
        self.health = health

    def _ended(self, child: _Child, code: int) -> None:
        """A child exited: the end of the session, or a death (then a restart, unless too many)."""
        stopping = self._stopped.is_set() and child.stop_sent
        if code == 0 and stopping:
            self._finish()
            return
        with self._writing:  # a write to it under way has failed by now (nobody reads the pipe)
            missed = max(0, child.flows_sent - child.flows_committed)
        reason = _exit_text(code)
        for token in list(child.barriers):
            self._fail_barrier(token)
        with self._cond:
            self.missed_flows += missed
            self._child = None
            final = stopping or not child.ready or self.restarts >= self.max_restarts
        if self.on_down is not None:
            self.on_down()
        lost = f"{missed} flows it had not committed are not recorded"
        if final:
            more = "" if stopping or not child.ready else f" (restarted {self.restarts} times already)"
            self._died(f"{reason}{more}; {lost}")
            self._finish()
            return
        logger.warning("capsem: %s; %s; restarting it on the same session.db", reason, lost)
        time.sleep(RESTART_DELAY * min(self.restarts, 5))  # a quick succession of deaths: back off
        try:
            successor = self._spawn(self.restarts + 1)
        except OSError as exc:
            self._died(f"{reason}; restarting it failed: {exc!r}")
            self._finish()
            return
        with self._cond:
            self.restarts += 1
            self._child = successor
            self._cond.notify_all()

    def _finish(self) -> None:
        with self._cond:
            self._finished.set()
            self._cond.notify_all()
        self.ready.set()
        for event in list(self._acks.values()):  # nobody will answer them now
            event.set()

    def _fail_barrier(self, token: int) -> None:
        self._failed_barriers.add(token)
        self.ack(token)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything put so far is committed (False on a timeout, or when the recorder
        it went to died first)."""
        token = self._next + 1
        return super().flush(timeout) and token not in self._failed_barriers

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
        deadline = time.monotonic() + timeout
        self._sender.join(timeout)
        if not self._finished.wait(max(0.1, deadline - time.monotonic())):
            child = self._child
            self._died(f"the recorder process did not finish within {timeout:.0f} s and was killed")
            if child is not None:
                child.process.kill()
            self._finished.wait(5)
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
