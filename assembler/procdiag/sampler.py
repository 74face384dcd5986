"""The sampling thread of `capsem run`, and the end-of-session anomaly pass.

`ProcessSampler` watches the agent's process tree: every `diagnostics.sample_interval_ms` it
lists the agent and its descendants (a descendant that outlives its parent stays watched until
it ends), reads one sample of each (`sample.ProcessReader`) and writes them to `proc_samples` in
one short transaction on its own WAL connection, next to the addon's writer. A batch that cannot
be written (database busy) is kept and retried with the next one. Nothing here may stop the
agent: every failure is logged and sampling goes on.

At session end `record_anomalies` runs the pure detector over the stored samples, one process
at a time, and adds to `proc_anomalies` the anomalies it does not hold yet (rows are never
changed or deleted); it can be rerun on any session.db.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from addons.recorder.writer import SessionWriter
from assembler.cli_support import counted
from assembler.procdiag.detect import Anomaly, detect_process
from assembler.procdiag.sample import ProcessReader
from capsem.ids import utc_now
from capsem.redact import Scrubber, is_credential_name
from capsem.settings import DiagnosticsSettings, Settings, SettingsError, load

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_MS = 1000
MAX_PENDING_ROWS = 100_000
FINAL_WRITE_TIMEOUT = 5.0  # seconds the last write waits for the addon's transaction
_NOT_SECRET_SUFFIXES = ("_FILE", "_PATH", "_DIR", "_BUNDLE", "_SOCK", "_ADDRESS", "_ID")
ANOMALY_COLUMNS = ("kind", "severity", "pid", "name", "first_ts", "last_ts", "samples", "value", "threshold",
                   "detail", "detected_at")  # fmt: skip


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


def scrubber_for(env: Mapping[str, str]) -> Scrubber:
    """A scrubber that knows the credential values in the agent's environment (they may show up in argv)."""
    scrubber = Scrubber()
    for name, value in env.items():
        if (is_credential_name(name) and not name.upper().endswith(_NOT_SECRET_SUFFIXES)
                and not value.startswith(("/", "~")) and not any(c.isspace() for c in value)):  # fmt: skip
            scrubber.learn(value)
    return scrubber


class ProcessSampler:
    """Samples `root_pid` and its descendants into `db_path` on a background thread."""

    def __init__(self, root_pid: int, db_path: Path, *, interval_ms: int = DEFAULT_INTERVAL_MS,
                 scrubber: Scrubber | None = None) -> None:  # fmt: skip
        self.root_pid = root_pid
        self.db_path = db_path
        self.interval = interval_ms / 1000
        self.reader = ProcessReader(scrubber)
        self.samples = 0
        """Rows written so far."""
        self.processes: set[tuple[int, str | None]] = set()
        """Every (pid, start time) sampled at least once."""
        self._tracked: dict[int, psutil.Process] = {}
        self._pending: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="capsem-procdiag", daemon=True)
        self._writer: SessionWriter | None = None
        self._warned: set[str] = set()
        self._write_lock = threading.Lock()

    def start(self) -> None:
        """Start sampling (call while the root process is still unreaped, right after starting it)."""
        try:
            self._tracked[self.root_pid] = psutil.Process(self.root_pid)
        except psutil.Error as exc:
            self._warn("root", f"capsem: cannot watch process {self.root_pid}: {exc!r}")
            return
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Take one last sample, write what is pending and stop (may be called again to retry the write)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.flush(timeout=FINAL_WRITE_TIMEOUT)
        if self._writer is not None and not self._writer.pending:
            self._writer.close(checkpoint=False)
            self._writer = None

    @property
    def pending(self) -> int:
        """Samples taken but not yet written (the database was busy)."""
        return len(self._pending) + (self._writer.pending if self._writer is not None else 0)

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
                    self._pending.append(row)
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

    def _open_writer(self, timeout: float) -> SessionWriter:
        if self._writer is None:
            writer = SessionWriter(
                self.db_path, self.reader.scrubber, timeout=timeout, max_queued_rows=MAX_PENDING_ROWS
            )
            writer.set_meta(procdiag_agent_pid=str(self.root_pid),
                            procdiag_interval_ms=str(round(self.interval * 1000)))  # fmt: skip
            self._writer = writer
        self._writer.conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        return self._writer

    def flush(self, timeout: float | None = None) -> None:
        """Write the pending samples through the session's writer; keep them for later if that fails.

        While sampling, a write waits at most half an interval for the recorder's transaction, so
        the sampling pace holds; rows that could not be written go with the next batch.
        """
        with self._write_lock:
            self._flush(timeout if timeout is not None else min(1.0, max(0.05, self.interval / 2)))

    def _flush(self, timeout: float) -> None:
        if not self._pending and (self._writer is None or not self._writer.pending):
            return
        try:
            writer = self._open_writer(timeout)
        except (sqlite3.Error, RuntimeError, OSError) as exc:
            logger.debug("capsem: process samples not written yet (%r); retrying with the next batch", exc)
            del self._pending[:-MAX_PENDING_ROWS]
            return
        writer.add_dicts("proc_samples", self._pending)
        self._pending.clear()
        before = writer.written
        if not writer.commit():
            logger.debug("capsem: process samples not written yet (%s); retrying with the next batch",
                         writer.health.last_error)  # fmt: skip
        self.samples += writer.written - before


def _anomaly_row(anomaly: Anomaly, detected_at: str) -> tuple[Any, ...]:
    return (anomaly.kind, anomaly.severity, anomaly.pid, anomaly.name, anomaly.first_ts, anomaly.last_ts,
            anomaly.samples, anomaly.value, anomaly.threshold, json.dumps(anomaly.detail, sort_keys=True),
            detected_at)  # fmt: skip


def record_anomalies(db_path: Path, *, agent_pid: int | None = None) -> list[Anomaly]:
    """Detect anomalies in the stored samples and add those not stored yet (same kind, process
    and start): insert-only, so a rerun keeps the rows and the `detected_at` of the first pass.

    Args:
        db_path: a session.db (migrated on open).
        agent_pid: the process capsem started; default: the one recorded in session_meta.
    """
    writer = SessionWriter(db_path)
    try:
        conn = writer.conn
        if agent_pid is None:
            row = conn.execute("SELECT value FROM session_meta WHERE key = 'procdiag_agent_pid'").fetchone()
            agent_pid = int(row[0]) if row and str(row[0]).isdigit() else None
        rows = conn.execute("SELECT * FROM proc_samples ORDER BY pid, started_at, ts, seq")
        found: list[Anomaly] = []
        for (pid, _), series in itertools.groupby(rows, key=lambda r: (r["pid"], r["started_at"])):
            found += detect_process([dict(r) for r in series], is_agent=pid == agent_pid)
        found.sort(key=lambda a: (a.first_ts, a.pid, a.kind))
        stored = {tuple(r) for r in conn.execute("SELECT kind, pid, first_ts FROM proc_anomalies")}
        now = utc_now()
        writer.add_dicts("proc_anomalies", [dict(zip(ANOMALY_COLUMNS, _anomaly_row(a, now), strict=True))
                                            for a in found if (a.kind, a.pid, a.first_ts) not in stored])  # fmt: skip
        if not writer.commit():
            raise sqlite3.OperationalError(f"cannot write proc_anomalies: {writer.health.last_error}")
        return found
    finally:
        writer.conn.close()


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


def finish(sampler: ProcessSampler, *, warn: bool = True) -> Diagnostics:
    """Stop `sampler`, write its last samples and record their anomalies.

    Failures are reported in `Diagnostics.error` (and logged if `warn`), never raised; calling
    it again retries.
    """
    sampler.stop()
    result = Diagnostics(samples=sampler.samples, processes=len(sampler.processes))
    if sampler.pending:
        result.error = f"{sampler.pending} samples could not be written to {sampler.db_path}"
    else:
        try:
            result.anomalies = record_anomalies(sampler.db_path, agent_pid=sampler.root_pid)
        except Exception as exc:  # the session must still end cleanly
            result.error = f"anomaly detection failed: {exc!r}"
    if result.error and warn:
        logger.warning("capsem: process diagnostics: %s", result.error)
    return result
