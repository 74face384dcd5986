"""The ways a client reaches the upstream, and the meter on a mitmdump's process.

Each proxy is a real `mitmdump` started by `capsem.mitm.start_mitmdump` in regular mode on
loopback, with its own log, a temporary confdir and a temporary CAPSEM_HOME. The upstream is
plain HTTP, so no TLS is involved anywhere: what differs between scenarios is only mitmproxy's
own work and the addon's. Scenarios (6)–(8) are capsem with one feature more or less (a tool
rule, a team to push to, no ledger): see `benchmarks/stream_features.py`.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from capsem.mitm import Mitmdump, start_mitmdump

_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    """Short name used in tables, numbered as in docs/PERFORMANCE.md."""
    args: tuple[str, ...] = ()
    """Extra mitmdump arguments; `{workdir}` is replaced by the run's directory."""
    addon: bool = False
    proxied: bool = True
    config: str = ""
    """The config.yaml of its CAPSEM_HOME (empty: none, capsem's defaults)."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment of its mitmdump (and so of the processes it starts)."""
    team: bool = False
    """Pushes to a team's PostgreSQL: the suite starts a throw-away one and sets CAPSEM_TEAM_URL."""


TOOL_RULE = 'policy:\n  rules:\n    - {name: no-rm-rf, action: deny, tool: "*", tool_args: {command: {shell: "rm -rf"}}}\n'
"""One `deny` tool rule that the benchmarks' harmless calls (`ls -la ...`) do not match: every
answer is scanned, each tool call held until its arguments are complete, then released unchanged."""
LEDGER_OFF = Path(__file__).resolve().parent / "ledger_off"
"""A `sitecustomize` that turns the session writer's ledger off (bench only; see its docstring)."""

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("direct", "(1) no proxy", proxied=False),
    Scenario("stream", "(2) mitmdump, streaming", ("--set", "stream_large_bodies=1")),
    Scenario("default", "(3) mitmdump, default"),
    Scenario("hardump", "(4) mitmdump + hardump", ("--set", "hardump={workdir}/flows.har")),
    Scenario("capsem", "(5) mitmdump + capsem", addon=True),
    Scenario("rule", "(6) capsem + a tool rule", addon=True, config=TOOL_RULE),
    Scenario("team", "(7) capsem + team push", addon=True, team=True),
    Scenario(
        "noledger", "(8) capsem, no ledger (bench only)", addon=True, env=(("PYTHONPATH", str(LEDGER_OFF)),)
    ),
)
BASELINE = "stream"
"""The fair floor for an addon that streams: ratios are given against it."""
CAPSEM = "capsem"
"""capsem as users run it: the features' rows are also given against it."""


def start_proxy(scenario: Scenario, workdir: Path) -> Mitmdump:
    """Start the mitmdump of a scenario (its CAPSEM_HOME, config and logs under `workdir`)."""
    home = workdir / "capsem-home"
    home.mkdir(parents=True, exist_ok=True)
    if scenario.config:
        (home / "config.yaml").write_text(scenario.config)
    env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARS}
    env["CAPSEM_HOME"] = str(home)
    env["NO_PROXY"] = ""
    env.update(scenario.env)
    args = [a.replace("{workdir}", str(workdir)) for a in scenario.args]
    return start_mitmdump(
        confdir=workdir / "mitm-conf",
        log_path=workdir / f"mitmdump-{scenario.key}.log",
        args=args,
        addon=scenario.addon,
        env=env,
        timeout=120.0,
    )


@dataclass
class Usage:
    """CPU seconds (user + system, all threads) and peak resident memory of one measured run."""

    cpu_s: float
    peak_rss: int


class ProcessMeter:
    """Measures a process and every process it started (capsem's recorder) over a run: CPU time
    used and peak RSS, summed over the tree.

    The peaks come from the kernel's high-water mark (`VmHWM`, reset at the start of each run
    through `/proc/<pid>/clear_refs`) where Linux allows it, and from RSS sampled every 10 ms
    otherwise (a sampling thread would compete with the client for this process's GIL).
    """

    def __init__(self, pid: int, interval: float = 0.01) -> None:
        self.process = psutil.Process(pid)
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tree: list[psutil.Process] = []
        self._peaks: dict[int, int] = {}
        self._cpu0 = 0.0

    def _cpu(self) -> float:
        return sum(cpu_seconds(proc) for proc in self._tree)

    def start(self) -> None:
        self._tree = [self.process, *self.process.children(recursive=True)]
        self._peaks = {p.pid: p.memory_info().rss for p in self._tree}
        self._cpu0 = self._cpu()
        self._stop.clear()
        self._thread = None
        if not all(_reset_hwm(p.pid) for p in self._tree):
            self._thread = threading.Thread(target=self._sample, name="bench-rss", daemon=True)
            self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            for proc in self._tree:
                try:
                    self._peaks[proc.pid] = max(self._peaks[proc.pid], proc.memory_info().rss)
                except psutil.Error:
                    pass

    def stop(self) -> Usage:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        cpu = self._cpu() - self._cpu0
        return Usage(cpu, sum(max(self._peaks[p.pid], _read_hwm(p.pid)) for p in self._tree))


def cpu_seconds(proc: psutil.Process) -> float:
    """CPU time the process used so far, all its threads (ended ones too), user and system.

    On Linux it is the kernel's process CPU clock (`clock_getcpuclockid`), counted in
    nanoseconds: `/proc/<pid>/stat`, which psutil reads, counts in 10 ms ticks, as coarse as
    a tenth of a 0.1 s flood's CPU. Elsewhere (or when the clock can't be read) psutil's times.
    """
    if sys.platform == "linux":
        try:
            return time.clock_gettime(_process_cpu_clock(proc.pid))
        except OSError:
            pass
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def _process_cpu_clock(pid: int) -> int:
    """Linux's clock id for a process's CPU time (glibc's `clock_getcpuclockid`:
    `MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)`)."""
    return ((~pid) << 3) | 2


def _reset_hwm(pid: int) -> bool:
    """Reset the process's peak RSS (Linux); False where that is not possible."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return _read_hwm(pid) > 0


def _read_hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def wait_idle(pid: int, *, settle: float = 0.3, timeout: float = 10.0) -> None:
    """Wait until the process and its children used (almost) no CPU for `settle` seconds (their
    tail work is done).

    A proxy's work on a flow can outlast the client's last byte (capsem's recorder process writes
    rows after the response ends); waiting for quiet makes that work count in the run's CPU time.
    """
    process = psutil.Process(pid)
    tree = [process, *process.children(recursive=True)]

    def cpu() -> float:
        return sum(cpu_seconds(p) for p in tree)

    deadline = time.monotonic() + timeout
    last = cpu()
    while time.monotonic() < deadline:
        time.sleep(settle)
        now = cpu()
        if now - last < settle * 0.05:
            return
        last = now
