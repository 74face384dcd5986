"""What a session's other processes send the recorder: typed rows over a local socket.

The recorder is the one writer of session.db. `capsem run`'s workspace watcher
(`assembler/fswatch.py`) and process sampler (`assembler/procdiag/sampler.py`) do not open it for
writing: they send their rows to the recorder's inbox (`addons/recorder/inbox.py`), a Unix socket
whose path the recorder writes to `recorder.addr` in the session's folder, through a `Feed`
(`assembler/feed.py`), and the recorder writes them with its own scrubber, in its own commits.

On a connection, frames of a 4-byte big-endian length and a msgpack payload go both ways. The
client's first frame is a `Hello` (its name, and the secret values the recorder's scrubber must
know before its rows are written); then `Batch`es, numbered from 1 by the client. The recorder
answers `Ack(seq)` once every batch up to `seq` is committed, and keeps the last committed number
of each client in `session_meta` (`<client>_feed_seq`, written in the same transaction as the
rows), so a batch sent again after a recorder restart is written once. Nothing here imports
either side of the proxy/recorder boundary.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Union

import msgspec

ADDRESS_FILE = "recorder.addr"
"""In the session's folder: the path of the recorder's socket (written once it listens)."""
CLIENT_NAME = re.compile(r"[a-z][a-z0-9]{0,30}")
"""A client's name: also the prefix of the `session_meta` keys it may set (`procdiag_agent_pid`)."""


class Hello(msgspec.Struct, frozen=True, array_like=True, tag=1):
    """First frame of a connection: who sends, and what the scrubber must learn first."""

    client: str
    learn: tuple[str, ...] = ()

    def __repr__(self) -> str:  # `learn` holds secrets
        return f"Hello(client={self.client!r}, learn=<{len(self.learn)} values>)"


class FsChanges(msgspec.Struct, frozen=True, array_like=True, tag=2):
    """One batch of workspace changes: (`created`|`modified`|`deleted`, path relative to the
    workspace, size or None) each, seen at `at` (RFC 3339)."""

    at: str
    changes: tuple[tuple[str, str, int | None], ...]


class ProcSample(msgspec.Struct, frozen=True, array_like=True):
    """One sample of one process (`proc_samples`; `assembler/procdiag/sample.py` reads it).
    `cmdline` has its secret flags masked but is not yet scrubbed or cut: the recorder does both."""

    ts: str
    seq: int
    pid: int
    ppid: int | None = None
    started_at: str | None = None
    name: str | None = None
    cmdline: str | None = None
    state: str | None = None
    rss_kb: int | None = None
    vms_kb: int | None = None
    threads: int | None = None
    fds: int | None = None
    fd_limit: int | None = None
    ctx_switches_voluntary: int | None = None
    ctx_switches_involuntary: int | None = None
    cpu_user: float | None = None
    cpu_system: float | None = None
    cpu_percent: float | None = None
    oom_score: int | None = None
    wchan: str | None = None
    sig_pnd: str | None = None
    sig_blk: str | None = None
    sig_cgt: str | None = None
    io_read_bytes: int | None = None
    io_write_bytes: int | None = None


class ProcSamples(msgspec.Struct, frozen=True, array_like=True, tag=3):
    samples: tuple[ProcSample, ...]


class ProcAnomaly(msgspec.Struct, frozen=True, array_like=True):
    """One `proc_anomalies` row (`assembler/procdiag/detect.py` finds them)."""

    kind: str
    severity: str
    pid: int
    name: str | None
    first_ts: str
    last_ts: str
    samples: int
    value: float | None
    threshold: float | None
    detail: str
    """JSON."""
    detected_at: str


class ProcAnomalies(msgspec.Struct, frozen=True, array_like=True, tag=4):
    anomalies: tuple[ProcAnomaly, ...]


class Meta(msgspec.Struct, frozen=True, array_like=True, tag=5):
    """`session_meta` values; each key must start with the client's name and `_`."""

    values: dict[str, str]


Rows = Union[FsChanges, ProcSamples, ProcAnomalies, Meta]  # noqa: UP007


class Batch(msgspec.Struct, frozen=True, array_like=True, tag=6):
    """Rows of one client, numbered: the recorder acknowledges `seq` once they are committed."""

    seq: int
    rows: tuple[Rows, ...]


class Ack(msgspec.Struct, frozen=True, array_like=True, tag=7):
    """Every batch of this connection's client up to `seq` is committed."""

    seq: int


ToRecorder = Union[Hello, Batch]  # noqa: UP007

_ENCODER = msgspec.msgpack.Encoder()
_TO_RECORDER = msgspec.msgpack.Decoder(ToRecorder)
_ACK = msgspec.msgpack.Decoder(Ack)


def frame(message: Hello | Batch | Ack) -> bytes:
    """A message as one length-prefixed frame."""
    payload = _ENCODER.encode(message)
    return len(payload).to_bytes(4, "big") + payload


def decode_to_recorder(payload: bytes) -> Hello | Batch:
    """A client's frame payload (raises `msgspec.DecodeError` or `ValidationError` when malformed)."""
    return _TO_RECORDER.decode(payload)


def decode_ack(payload: bytes) -> Ack:
    return _ACK.decode(payload)


def split_frames(buffer: bytearray) -> list[bytes]:
    """The complete frames at the start of `buffer`, removed from it."""
    out = []
    while len(buffer) >= 4:
        size = int.from_bytes(buffer[:4], "big")
        if len(buffer) < 4 + size:
            break
        out.append(bytes(buffer[4 : 4 + size]))
        del buffer[: 4 + size]
    return out


def address_file(session_dir: Path) -> Path:
    return session_dir / ADDRESS_FILE


def seq_key(client: str) -> str:
    """The `session_meta` key of a client's last committed batch."""
    return f"{client}_feed_seq"
