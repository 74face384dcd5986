"""The recorder's inbox: rows from the session's other processes, written by the one writer.

`Inbox` listens on a Unix socket (`recorder.sock` in the session's folder, or in a private
temporary folder when that path is too long for a socket) and announces its path in
`recorder.addr` beside session.db (`addons/feed.py`). A thread accepts `capsem run`'s clients
and reads their frames; the recorder's loop (`addons/recorder/main.py: run`) takes what came with
`Inbox.take` and hands it to `Inbox.handle`, which queues the rows on the recorder's
`SessionWriter` (scrubbed at commit by its scrubber, which first learns each client's `Hello`
values) with the client's batch number in `session_meta`; after each commit the loop calls
`Inbox.acknowledge`. A batch numbered at or below what session.db already holds for its client
(sent again after a recorder restart) is acknowledged without being written again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import socket
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from addons.feed import (
    CLIENT_NAME,
    Ack,
    Batch,
    FsChanges,
    Hello,
    Meta,
    ProcAnomalies,
    ProcSamples,
    Rows,
    address_file,
    decode_to_recorder,
    frame,
    seq_key,
    split_frames,
)
from capsem.store.rows import FsEvent, new_event_id

if TYPE_CHECKING:
    from capsem.store.writer import SessionWriter

logger = logging.getLogger(__name__)

SOCKET_NAME = "recorder.sock"
MAX_SOCKET_PATH = 100  # bytes: sun_path holds 104 (macOS) to 108 (Linux), with its NUL
MAX_FRAME = 64 << 20
"""Bytes one frame may announce (a batch is one tick's samples or one debounce window's changes)."""
CMDLINE_MAX_CHARS = 4096
"""`proc_samples.cmdline` is cut to this after it is scrubbed (a cut first could split a secret)."""


class _Client:
    """One connection: its name once it said `Hello`, what it sent that is not yet handled."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.name: str | None = None
        self.buffer = bytearray()
        self.handled = 0
        """The highest batch number handled (written or skipped), acknowledged after a commit."""
        self.acked = 0


class Inbox:
    """The recorder's socket for `capsem run`'s rows (see the module docstring)."""

    def __init__(self, session_dir: Path, last_seq: dict[str, int] | None = None) -> None:
        self.session_dir = session_dir
        self.last_seq = dict(last_seq or {})
        """Each client's last batch number in session.db (or queued for the next commit)."""
        self.path: Path | None = None
        self.rejected = 0
        """Frames that were malformed or broke the protocol (their connection is closed)."""
        self._own_dir: Path | None = None
        self._received: deque[tuple[_Client, Hello | Batch]] = deque()
        self._clients: list[_Client] = []
        self._selector = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()  # `close` wakes the thread: no polling
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, name="capsem-inbox", daemon=True)

    @classmethod
    def open(cls, writer: SessionWriter) -> Inbox:
        """An inbox listening for the session of `writer` (raises OSError when it cannot listen)."""
        rows = writer.conn.execute(
            "SELECT key, value FROM session_meta WHERE key LIKE '%\\_feed\\_seq' ESCAPE '\\'"
        )
        last = {key.removesuffix("_feed_seq"): int(value) for key, value in rows if str(value).isdigit()}
        inbox = cls(writer.path.parent, last)
        inbox.start()
        return inbox

    def start(self) -> None:
        path = self.session_dir / SOCKET_NAME
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            self._own_dir = Path(tempfile.mkdtemp(prefix="capsem-"))
            path = self._own_dir / SOCKET_NAME
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a dead predecessor's
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            os.chmod(path, 0o600)
            listener.listen(8)
        except OSError:
            listener.close()
            raise
        listener.setblocking(False)
        self._listener, self.path = listener, path
        self._selector.register(listener, selectors.EVENT_READ)
        announce = address_file(self.session_dir)
        temporary = announce.with_suffix(".tmp")
        temporary.write_text(str(path))
        temporary.replace(announce)
        self._thread.start()

    # -- the socket thread -----------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                events = self._selector.select()
            except OSError:
                return
            for key, _ in events:
                if key.fileobj is self._wake_r:
                    return
                if key.fileobj is self._listener:
                    self._accept()
                else:
                    self._read(key.data)

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        sock.settimeout(1.0)  # an acknowledgement never waits long on a client that stopped reading
        client = _Client(sock)
        self._clients.append(client)
        self._selector.register(sock, selectors.EVENT_READ, client)

    def _read(self, client: _Client) -> None:
        try:
            data = client.sock.recv(1 << 20)
        except OSError:
            data = b""
        if not data:
            self._drop(client)
            return
        client.buffer += data
        if len(client.buffer) >= 4 and int.from_bytes(client.buffer[:4], "big") > MAX_FRAME:
            self._reject(client, f"a frame over {MAX_FRAME} bytes")
            return
        for payload in split_frames(client.buffer):
            try:
                message = decode_to_recorder(payload)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                self._reject(client, f"a malformed frame: {exc}")
                return
            if (type(message) is Hello) == (client.name is not None):
                self._reject(client, "a Hello must come first, and once")
                return
            if type(message) is Hello:
                if not CLIENT_NAME.fullmatch(message.client):
                    self._reject(client, f"a bad client name {message.client!r}")
                    return
                client.name = message.client
            self._received.append((client, message))

    def _reject(self, client: _Client, why: str) -> None:
        self.rejected += 1
        logger.warning("capsem: the recorder's inbox closed a connection that sent %s", why)
        self._drop(client)

    def _drop(self, client: _Client) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(client.sock)
        client.sock.close()
        with contextlib.suppress(ValueError):
            self._clients.remove(client)

    # -- the recorder's loop -----------------------------------------------------------------------

    def take(self) -> list[tuple[_Client, Hello | Batch]]:
        """What arrived since the last call, in order."""
        out = []
        while self._received:
            out.append(self._received.popleft())
        return out

    def handle(self, writer: SessionWriter, received: list[tuple[_Client, Hello | Batch]]) -> None:
        """Queue the rows of `received` on `writer` (a batch already in session.db is skipped)."""
        for client, message in received:
            if type(message) is Hello:
                for value in message.learn:
                    writer.scrubber.learn(value)
                continue
            assert type(message) is Batch and client.name is not None
            if message.seq > self.last_seq.get(client.name, 0):
                for rows in message.rows:
                    queue_rows(writer, client.name, rows)
                self.last_seq[client.name] = message.seq
                writer.set_meta(**{seq_key(client.name): str(message.seq)})
            client.handled = max(client.handled, message.seq)

    def acknowledge(self) -> None:
        """After a commit: tell each client how far its batches are in session.db."""
        for client in list(self._clients):  # the socket thread may add or drop one meanwhile
            if client.handled > client.acked and client.sock.fileno() != -1:
                try:
                    client.sock.sendall(frame(Ack(client.handled)))
                    client.acked = client.handled
                except OSError:
                    pass  # it went away; it sends them again when it comes back

    def close(self) -> None:
        """Stop listening and remove the socket and its announcement (what came is taken first)."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(2)
        with contextlib.suppress(FileNotFoundError):
            announced = address_file(self.session_dir)
            if self.path is not None and announced.read_text() == str(self.path):
                announced.unlink()
        for client in list(self._clients):
            client.sock.close()
        if self._listener is not None:
            self._listener.close()
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


def queue_rows(writer: SessionWriter, client: str, rows: Rows) -> None:
    """One message's rows queued on `writer` (also how an offline run writes what no recorder took)."""
    kind = type(rows)
    if kind is FsChanges:
        writer.add(FsEvent(new_event_id(), rows.at, *change) for change in rows.changes)  # type: ignore[union-attr]
    elif kind is ProcSamples:
        samples = [msgspec.structs.asdict(s) for s in rows.samples]  # type: ignore[union-attr]
        for sample in samples:
            if sample["cmdline"]:
                sample["cmdline"] = (writer.scrubber.scrub(sample["cmdline"]) or "")[:CMDLINE_MAX_CHARS]
        writer.add_dicts("proc_samples", samples)
    elif kind is ProcAnomalies:
        writer.add_dicts("proc_anomalies", [msgspec.structs.asdict(a) for a in rows.anomalies])  # type: ignore[union-attr]
    elif kind is Meta:
        prefix = client + "_"
        allowed = {k: v for k, v in rows.values.items() if k.startswith(prefix) and k != seq_key(client)}  # type: ignore[union-attr]
        if len(allowed) < len(rows.values):  # type: ignore[union-attr]
            logger.warning("capsem: %s may set only session_meta keys that start with %r", client, prefix)
        writer.set_meta(**allowed)
