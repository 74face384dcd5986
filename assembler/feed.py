"""`capsem run`'s side of the recorder's inbox: rows sent in order, kept until acknowledged.

A `Feed` numbers each batch of rows it is given and keeps it until the recorder says it is
committed (`addons/feed.py` has the protocol). It never waits for the recorder to come up: a
batch given before the recorder listens (its `recorder.addr` is not written yet), while it
restarts, or when a send fails, stays in memory and goes with the next call (after a reconnect
every unacknowledged batch is sent again; the recorder writes each once). Past `max_rows`
unacknowledged rows the oldest batches are dropped and counted in `lost`.

What no recorder will ever take (it died for good, or never listened) `capsem run` writes
itself after mitmdump has stopped (`assembler/offline_write.py: write_directly`).
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections import Counter, deque
from pathlib import Path

import msgspec

from addons.feed import (
    Ack,
    Batch,
    FsChanges,
    Hello,
    ProcAnomalies,
    ProcSamples,
    Rows,
    address_file,
    decode_ack,
    decode_to_recorder,
    frame,
    split_frames,
)

logger = logging.getLogger(__name__)

SEND_TIMEOUT = 2.0
"""Seconds a send may take before the connection is given up (the recorder reads at once)."""


def _counts(rows: tuple[Rows, ...]) -> Counter[type]:
    """Rows per kind of message (a `Meta` counts none)."""
    counts: Counter[type] = Counter()
    for item in rows:
        kind = type(item)
        if kind is FsChanges:
            counts[kind] += len(item.changes)  # type: ignore[union-attr]
        elif kind is ProcSamples:
            counts[kind] += len(item.samples)  # type: ignore[union-attr]
        elif kind is ProcAnomalies:
            counts[kind] += len(item.anomalies)  # type: ignore[union-attr]
    return counts


class Feed:
    """One client of the recorder's inbox (thread-safe: its owner's thread and `capsem run`'s
    main thread both call it)."""

    def __init__(self, session_dir: Path, client: str, *, learn: tuple[str, ...] = (),
                 max_rows: int = 100_000) -> None:  # fmt: skip
        self.session_dir = session_dir
        self.client = client
        self.learn = learn
        self.max_rows = max_rows
        self.committed: Counter[type] = Counter()
        """Rows in session.db, by kind of message (`FsChanges`...): acknowledged by the recorder,
        or written by `write_directly`."""
        self.lost = 0
        """Rows dropped unacknowledged: more than `max_rows` waited."""
        self.connects = 0
        self._seq = 0
        self._unacked: deque[tuple[int, bytes, Counter[type]]] = deque()  # (seq, frame, rows by kind)
        self._waiting_rows = 0
        self._sock: socket.socket | None = None
        self._sent_upto = 0
        self._buffer = bytearray()
        self._lock = threading.RLock()

    @property
    def pending(self) -> int:
        """Rows given but not yet acknowledged."""
        return self._waiting_rows

    @property
    def waiting(self) -> int:
        """Batches given but not yet acknowledged (a `Meta` alone is a batch of no rows)."""
        return len(self._unacked)

    def send(self, *rows: Rows) -> None:
        """Queue one batch and try to deliver what waits; returns without waiting for the recorder."""
        with self._lock:
            self._seq += 1
            counts = _counts(rows)
            self._unacked.append((self._seq, frame(Batch(self._seq, rows)), counts))
            self._waiting_rows += counts.total()
            while self._waiting_rows > self.max_rows and len(self._unacked) > 1:
                _, _, dropped = self._unacked.popleft()
                self._waiting_rows -= dropped.total()
                self.lost += dropped.total()
            self._pump(0)

    def poke(self) -> None:
        """Deliver what waits and read acknowledgements, without waiting (call it now and then)."""
        with self._lock:
            self._pump(0)

    def flush(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds until every batch given so far is committed."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._unacked:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if not self._pump(min(left, 0.1)):
                    time.sleep(min(left, 0.05))  # no recorder listens yet, or it restarts
            return True

    def close(self) -> None:
        with self._lock:
            self._disconnect()

    def unacknowledged(self) -> list[Rows]:
        """The rows of every batch not yet acknowledged, in order."""
        with self._lock:
            return [rows for _, data, _ in self._unacked for rows in decode_to_recorder(data[4:]).rows]  # type: ignore[union-attr]

    def written(self) -> None:
        """What waits was written some other way (`write_directly`): no longer waiting."""
        with self._lock:
            for _, _, counts in self._unacked:
                self.committed.update(counts)
            self._unacked.clear()
            self._waiting_rows = 0

    # -- the connection ----------------------------------------------------------------------------

    def _pump(self, wait: float) -> bool:
        """Connect if need be, send what waits, read acknowledgements (up to `wait` s for one);
        False when no connection could be made or kept."""
        if self._sock is None and not self._connect():
            return False
        assert self._sock is not None
        try:
            fresh = [data for seq, data, _ in self._unacked if seq > self._sent_upto]
            if fresh:
                self._sock.sendall(b"".join(fresh))
                self._sent_upto = self._seq
            ready, _, _ = select.select([self._sock], [], [], wait)
            if ready:
                data = self._sock.recv(65536)
                if not data:
                    raise ConnectionResetError("the recorder closed the connection")
                self._buffer += data
                for payload in split_frames(self._buffer):
                    self._acked(decode_ack(payload))
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            logger.debug(
                "capsem: %s: the recorder's inbox went away (%r); sending again later", self.client, exc
            )
            self._disconnect()
            return False
        return True

    def _acked(self, ack: Ack) -> None:
        while self._unacked and self._unacked[0][0] <= ack.seq:
            _, _, counts = self._unacked.popleft()
            self._waiting_rows -= counts.total()
            self.committed.update(counts)

    def _connect(self) -> bool:
        """Connect to the recorder that `recorder.addr` names and say Hello."""
        try:
            path = address_file(self.session_dir).read_text().strip()
        except OSError:
            return False  # it does not listen yet
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(SEND_TIMEOUT)
        try:
            sock.connect(path)
            sock.sendall(frame(Hello(self.client, self.learn)))
        except OSError:
            sock.close()
            return False
        self._sock, self._buffer = sock, bytearray()
        self._sent_upto = 0  # every batch waiting goes again: the recorder writes each once
        self.connects += 1
        return True

    def _disconnect(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
