"""One sample of one process: psutil for what is portable, `/proc/<pid>/…` for the rest.

Each field is read on its own, so a field the OS hides (psutil.AccessDenied, a missing `/proc`
file, macOS) becomes None instead of losing the sample; only a process that is gone
(psutil.NoSuchProcess) yields no sample at all. Signal masks are 16 hex digits as in
`/proc/<pid>/status`; `sig_pnd` is the thread's SigPnd OR'ed with the process-wide ShdPnd, since
a signal sent with kill() waits in ShdPnd.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil

from addons.feed import ProcSample
from capsem.ids import rfc3339, utc_now
from capsem.secret_names import join_argv, mask_secret_args

T = TypeVar("T")

CMDLINE_SEND_MAX = 65536
"""A command line's characters read; the recorder scrubs them and keeps the first 4096
(`addons/recorder/inbox.py: CMDLINE_MAX_CHARS`): this cut, 16 times further, cannot split a
secret that could reach the kept part."""
SAMPLE_COLUMNS: tuple[str, ...] = ProcSample.__struct_fields__
"""The `proc_samples` columns a sample has (the message the recorder writes them from)."""
_PROC = Path("/proc")


def _field(read: Callable[[], T]) -> T | None:
    """`read()`, or None when the OS will not say (the process itself still exists)."""
    try:
        return read()
    except psutil.ZombieProcess:  # a zombie has no memory, fds or io left to read
        return None
    except psutil.NoSuchProcess:
        raise
    except (psutil.AccessDenied, OSError, NotImplementedError, AttributeError, ValueError):
        return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def parse_status_signals(status: str) -> dict[str, str]:
    """`sig_pnd`, `sig_blk`, `sig_cgt` from the text of /proc/<pid>/status (missing keys left out)."""
    masks: dict[str, int] = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigPnd", "ShdPnd", "SigBlk", "SigCgt"):
            try:
                masks[key] = int(value.strip(), 16)
            except ValueError:
                continue
    out = {}
    if "SigPnd" in masks or "ShdPnd" in masks:
        out["sig_pnd"] = f"{masks.get('SigPnd', 0) | masks.get('ShdPnd', 0):016x}"
    if "SigBlk" in masks:
        out["sig_blk"] = f"{masks['SigBlk']:016x}"
    if "SigCgt" in masks:
        out["sig_cgt"] = f"{masks['SigCgt']:016x}"
    return out


def parse_nofile_limit(limits: str) -> int | None:
    """The soft `Max open files` from the text of /proc/<pid>/limits (None if unlimited or absent)."""
    for line in limits.splitlines():
        if line.startswith("Max open files"):
            soft = line[len("Max open files") :].split()[0]
            return int(soft) if soft.isdigit() else None
    return None


def _linux_fields(pid: int) -> dict[str, Any]:
    """oom_score, wchan and signal masks from /proc (an empty dict where there is no /proc)."""
    base = _PROC / str(pid)
    out: dict[str, Any] = {}
    oom = _read_text(base / "oom_score")
    if oom is not None and oom.strip().lstrip("-").isdigit():
        out["oom_score"] = int(oom)
    wchan = _read_text(base / "wchan")
    if wchan is not None:
        out["wchan"] = wchan.strip()
    status = _read_text(base / "status")
    if status is not None:
        out.update(parse_status_signals(status))
    return out


def _fd_limit(proc: psutil.Process) -> int | None:
    nofile = getattr(psutil, "RLIMIT_NOFILE", None)
    soft = _field(lambda: proc.rlimit(nofile)[0]) if nofile is not None and hasattr(proc, "rlimit") else None
    if soft is None:
        limits = _read_text(_PROC / str(proc.pid) / "limits")
        soft = parse_nofile_limit(limits) if limits else None
    return soft if soft is not None and soft >= 0 else None  # RLIM_INFINITY is -1


class ProcessReader:
    """Reads samples; remembers per process what need not be read twice (masked command line)."""

    def __init__(self) -> None:
        self._cmdlines: dict[tuple[int, float], tuple[list[str] | None, str | None]] = {}
        self._cpu_primed: set[tuple[int, float]] = set()

    def _cmdline(self, proc: psutil.Process, key: tuple[int, float]) -> str | None:
        """The command line with the values of secret flags and `NAME=VALUE` prefixes masked (the
        recorder's scrubber does the rest), cut to CMDLINE_SEND_MAX; masked again only when it
        changed (an exec). A process that has exited and not been reaped yet (a zombie) reads an
        empty one: it keeps the one it had."""
        argv = _field(proc.cmdline)
        cached = self._cmdlines.get(key)
        if cached is not None and not argv:
            return cached[1]
        if cached is None or cached[0] != argv:
            text = join_argv(mask_secret_args(argv))[:CMDLINE_SEND_MAX] if argv else None
            cached = self._cmdlines[key] = (argv, text)
        return cached[1]

    def read(self, proc: psutil.Process, seq: int) -> dict[str, Any] | None:
        """One sample row (keys = SAMPLE_COLUMNS), or None if the process is gone."""
        try:
            return self._read(proc, seq)
        except psutil.NoSuchProcess:
            return None

    def _read(self, proc: psutil.Process, seq: int) -> dict[str, Any]:
        row: dict[str, Any] = dict.fromkeys(SAMPLE_COLUMNS)
        row.update(ts=utc_now(), seq=seq, pid=proc.pid)
        with proc.oneshot():
            created = _field(proc.create_time) or 0.0
            row["name"] = _field(proc.name)
            row["state"] = _field(proc.status)
            row["ppid"] = _field(proc.ppid)
            mem = _field(proc.memory_info)
            threads = _field(proc.num_threads)
            ctx = _field(proc.num_ctx_switches)
            cpu = _field(proc.cpu_times)
            percent = _field(lambda: proc.cpu_percent(None))
        row["started_at"] = rfc3339(created) if created else None
        if mem is not None:
            row["rss_kb"], row["vms_kb"] = mem.rss // 1024, mem.vms // 1024
        row["threads"] = threads
        if ctx is not None:
            row["ctx_switches_voluntary"], row["ctx_switches_involuntary"] = ctx.voluntary, ctx.involuntary
        if cpu is not None:
            row["cpu_user"], row["cpu_system"] = round(cpu.user, 3), round(cpu.system, 3)
        identity = (proc.pid, created)
        if identity in self._cpu_primed:  # psutil's first reading of a process is always 0.0
            row["cpu_percent"] = None if percent is None else round(percent, 1)
        else:
            self._cpu_primed.add(identity)
        row["cmdline"] = self._cmdline(proc, identity)
        if hasattr(proc, "num_fds"):
            row["fds"] = _field(proc.num_fds)
        row["fd_limit"] = _fd_limit(proc)
        if hasattr(proc, "io_counters"):
            io = _field(proc.io_counters)
            if io is not None:
                row["io_read_bytes"], row["io_write_bytes"] = io.read_bytes, io.write_bytes
        row.update(_linux_fields(proc.pid))
        return row

    def forget(self, pid: int) -> None:
        """Drop what is cached for a process that has ended."""
        self._cpu_primed = {k for k in self._cpu_primed if k[0] != pid}
        for key in [k for k in self._cmdlines if k[0] == pid]:
            del self._cmdlines[key]
