"""The sampling thread of `capsem run`, and the end-of-session anomaly pass.

`ProcessSampler` watches the agent's process tree: every `diagnostics.sample_interval_ms` it
lists the agent and its descendants (a descendant that outlives its parent stays watched until
it ends), reads one sample of each (`sample.ProcessReader`) and sends them to the session's
recorder (`assembler/feed.py`), the one writer of session.db, which scrubs them (having learned
the credential values of the agent's environment from the sampler) and writes `proc_samples`.
Samples the recorder has not taken yet (it is not listening yet, or restarts) are kept and sent
again. Nothing here may stop the agent: every failure is logged and sampling goes on.

At session end the detector runs over the stored samples (read-only), one process at a time,
and the anomalies not stored yet are sent to the recorder too (`send_anomalies`), before
mitmdump stops, so the rollup sees them. `assembler/offline_write.py: record_anomalies` does
the same on any session.db that no recorder is writing (a rerun, or `capsem run`'s last resort
after mitmdump stopped), writing `proc_anomalies` itself; rows are never changed or deleted.
"""

from __future__ import annotations

import itertools
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from addons.feed import Meta, ProcAnomalies, ProcSample, ProcSamples
from assembler.cli_support import counted
from assembler.feed import Feed
from assembler.procdiag.anomalies import CLIENT, detect_stored
from assembler.procdiag.detect import Anomaly
from assembler.procdiag.sample import ProcessReader
from capsem.redact import Scrubber, is_credential_name
from capsem.settings import DiagnosticsSettings, Settings, SettingsError, load

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_MS = 1000
MAX_PENDING_ROWS = 100_000
FINAL_WRITE_TIMEOUT = 5.0  # seconds the last samples and the anomalies wait for the recorder's commit
_NOT_SECRET_SUFFIXES = ("_FILE", "_PATH", "_DIR", "_BUNDLE", "_SOCK", "_ADDRESS", "_ID")


def diagnostics_settings(settings: Settings | None = None) -> DiagnosticsSettings:
    """The `diagnostics:` settings (`enabled`, `sample_interval_ms`); with no `settings`, all the
    settings are loaded and checked, so any bad setting fails `capsem run` before it starts.

    Raises:
        RuntimeError: a settings file that cannot be read or holds a bad value (one line).
    """
    if settings is None:
        try:
            settings = load()
        except SettingsError as exc:
            raise RuntimeError(str(exc)) from exc
    return settings.diagnostics


def secrets_of(env: Mapping[str, str]) -> tuple[str, ...]:
    """The credential values in the agent's environment (they may show up in argv)."""
    return tuple(value for name, value in env.items()
                 if is_credential_name(name) and not name.upper().endswith(_NOT_SECRET_SUFFIXES)
                 and not value.startswith(("/", "~")) and not any(c.isspace() for c in value))  # fmt: skip


def scrubber_for(env: Mapping[str, str]) -> Scrubber:
    """A scrubber that knows the credential values in the agent's environment."""
    scrubber = Scrubber()
    for value in secrets_of(env):
        scrubber.learn(value)
    return scrubber


class ProcessSampler:
    """Samples `root_pid` and its descendants on a background thread, for the recorder of `db_path`."""

    def __init__(self, root_pid: int, db_path: Path, *, interval_ms: int = DEFAULT_INTERVAL_MS,
                 learn: tuple[str, ...] = ()) -> None:  # fmt: skip
        """`learn`: values the recorder's scrubber must know first (`secrets_of` the agent's env)."""
        self.root_pid = root_pid
        self.db_path = db_path
        self.interval = interval_ms / 1000
        self.reader = ProcessReader()
        self.feed = Feed(db_path.parent, CLIENT, learn=learn, max_rows=MAX_PENDING_ROWS)
        self.processes: set[tuple[int, str | None]] = set()
        """Every (pid, start time) sampled at least once."""
        self._tracked: dict[int, psutil.Process] = {}
        self._pending: list[ProcSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="capsem-procdiag", daemon=True)
        self._warned: set[str] = set()
        self._send_lock = threading.Lock()

    def start(self) -> None:
        """Start sampling (call while the root process is still unreaped, right after starting it)."""
        try:
            self._tracked[self.root_pid] = psutil.Process(self.root_pid)
        except psutil.Error as exc:
            self._warn("root", f"capsem: cannot watch process {self.root_pid}: {exc!r}")
            return
        self.feed.send(Meta({"procdiag_agent_pid": str(self.root_pid),
                             "procdiag_interval_ms": str(round(self.interval * 1000))}))  # fmt: skip
        self._thread.start()

    def stop(self, timeout: float = 10.0, flush_timeout: float = FINAL_WRITE_TIMEOUT) -> None:
        """Take one last sample, send what is pending and stop; waits up to `flush_timeout`
        for the recorder to commit (may be called again)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.flush()
        self.feed.flush(flush_timeout)

    @property
    def samples(self) -> int:
        """Samples in session.db (committed by the recorder, or written by `write_directly`)."""
        return self.feed.committed[ProcSamples]

    @property
    def pending(self) -> int:
        """Samples taken but not yet in session.db."""
        return len(self._pending) + self.feed.pending

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:  # once per kind of failure: a log line per tick helps no one
            self._warned.add(key)
            logger.warning(message)

    def _run(self) -> None:
        for seq in itertools.count():
            self._tick(seq)
            self.flush()
            if self._stop.is_set() or self._stop.wait(self.interval):
                self._tick(seq + 1)  # what the agent left behind as it ended
                break

    def _tick(self, seq: int) -> None:
        try:
            for proc in self._processes():
                row = self.reader.read(proc, seq)
                if row is not None and not self._is_our_unreaped_agent(row):
                    self._pending.append(ProcSample(**row))
                    self.processes.add((row["pid"], row["started_at"]))
        except Exception as exc:  # never let diagnostics take the run down
            self._warn(f"tick:{type(exc).__name__}", f"capsem: process sampling failed: {exc!r}")

    def _is_our_unreaped_agent(self, row: Mapping[str, Any]) -> bool:
        """The agent between its exit and our wait() is a zombie of ours, not of the agent's making."""
        return row["pid"] == self.root_pid and row["state"] == "zombie" and row["ppid"] == os.getpid()

    def _processes(self) -> list[psutil.Process]:
        """The processes to sample now: known ones still running plus new descendants of the root."""
        root = self._tracked.get(self.root_pid)
        if root is not None:
            try:
                for child in root.children(recursive=True):
                    self._tracked.setdefault(child.pid, child)
            except psutil.Error:
                pass  # the root has ended; its orphans are already tracked
        for pid, proc in list(self._tracked.items()):
            try:
                alive = proc.is_running()  # False too when the pid was recycled
            except psutil.Error:
                alive = False
            if not alive:
                del self._tracked[pid]
                self.reader.forget(pid)
        return list(self._tracked.values())

    def flush(self) -> None:
        """Send the samples taken since the last call (the feed keeps them until committed)."""
        with self._send_lock:
            if self._pending:
                batch, self._pending = tuple(self._pending), []
                self.feed.send(ProcSamples(batch))
            else:
                self.feed.poke()

    def send_anomalies(self, timeout: float = FINAL_WRITE_TIMEOUT) -> list[Anomaly]:
        """Detect anomalies in the samples the recorder stored (read-only), send it those not
        stored yet and wait until they are committed.

        Raises:
            sqlite3.Error: session.db cannot be read. TimeoutError: the recorder did not commit them.
        """
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=5)
        try:
            conn.row_factory = sqlite3.Row
            found, new = detect_stored(conn, self.root_pid)
        finally:
            conn.close()
        if new:
            self.feed.send(ProcAnomalies(tuple(new)))
        if not self.feed.flush(timeout):
            raise TimeoutError(f"the recorder did not commit {self.feed.pending} rows within {timeout:g} s")
        return found


@dataclass
class Diagnostics:
    """What `capsem run` learned about the agent's processes."""

    samples: int = 0
    processes: int = 0
    anomalies: list[Anomaly] = field(default_factory=list)
    error: str | None = None

    def summary(self) -> str:
        """One line for the run summary, e.g. `process diagnostics: 42 samples of 3 processes, 1 anomaly (fd_high)`."""
        if self.error:
            return f"process diagnostics: failed ({self.error})"
        kinds = sorted({a.kind for a in self.anomalies})
        found = counted(len(self.anomalies), "anomaly", "anomalies")
        processes = counted(self.processes, "process", "processes")
        return (f"process diagnostics: {counted(self.samples, 'sample')} of {processes}, {found}"
                + (f" ({', '.join(kinds)})" if kinds else ""))  # fmt: skip


def finish(sampler: ProcessSampler, *, warn: bool = True, recorder_gone: bool = False,
           deadline: float | None = None) -> Diagnostics:  # fmt: skip
    """Stop `sampler`, have its last samples committed and record their anomalies: sent to the
    recorder while it runs; with `recorder_gone` (mitmdump has stopped: the retry of a first call
    that failed) what it did not take is written directly, and so are the anomalies. `deadline`
    (time.monotonic()) bounds the waits for the recorder's commits, FINAL_WRITE_TIMEOUT each without.

    Failures are reported in `Diagnostics.error` (and logged if `warn`), never raised; calling
    it again retries.
    """
    from assembler.offline_write import record_anomalies, write_directly

    def left() -> float:
        return FINAL_WRITE_TIMEOUT if deadline is None else max(0.0, deadline - time.monotonic())

    sampler.stop(flush_timeout=0.0 if recorder_gone else left())  # no recorder is left to wait for
    result = Diagnostics(processes=len(sampler.processes))
    try:
        if recorder_gone and sampler.feed.waiting:
            write_directly(sampler.db_path, [sampler.feed])
    except Exception as exc:
        logger.debug("capsem: writing the last process samples failed: %r", exc)
    result.samples = sampler.samples
    if sampler.pending:
        result.error = f"{sampler.pending} samples could not be written to {sampler.db_path}"
    else:
        try:
            if recorder_gone:
                result.anomalies = record_anomalies(sampler.db_path, agent_pid=sampler.root_pid)
            else:
                result.anomalies = sampler.send_anomalies(left())
        except Exception as exc:  # the session must still end cleanly
            result.error = f"anomaly detection failed: {exc!r}"
    sampler.feed.close()  # a retry connects again
    if result.error and warn:
        logger.warning("capsem: process diagnostics: %s", result.error)
    return result
