"""The streaming suite: long SSE responses through no proxy and four mitmdump set-ups.

Every (profile, concurrency) cell runs each scenario once per repetition, and the scenario
order rotates between repetitions (interleaved), so slow drifts of a shared machine spread over
all scenarios instead of landing on one. All mitmdumps run for the whole suite; only the one in
use carries traffic. One run = `concurrency` streams started together; the proxy's CPU and peak
memory are measured over the run plus the quiet period that follows it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.client import StreamResult, fetch
from benchmarks.proxies import SCENARIOS, ProcessMeter, Scenario, start_proxy, wait_idle
from benchmarks.upstream import StreamSpec
from capsem.mitm import Mitmdump
from capsem.settings import load


@dataclass(frozen=True)
class Profile:
    name: str
    spec: StreamSpec

    def describe(self) -> str:
        pace = f"{self.spec.delay_ms:g} ms apart" if self.spec.delay_ms else "back to back"
        return f"{self.spec.events} events of ~{self.spec.size} B text, {pace}"


@dataclass
class Run:
    """One measured run: `concurrency` streams of one profile through one scenario."""

    scenario: str
    profile: str
    concurrency: int
    rep: int
    wall_s: float
    ttfb_ms: float
    first_event_ms: float | None
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    mib: float
    cpu_s: float | None = None
    peak_rss_mib: float | None = None
    errors: list[str] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; values need not be sorted."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summarize(scenario: str, profile: str, concurrency: int, rep: int, wall: float,
              results: list[StreamResult]) -> Run:  # fmt: skip
    lags = [lag * 1000 for r in results for lag in r.lags]
    firsts = [r.first_event * 1000 for r in results if r.first_event is not None]
    return Run(
        scenario=scenario,
        profile=profile,
        concurrency=concurrency,
        rep=rep,
        wall_s=wall,
        ttfb_ms=statistics.median(r.ttfb * 1000 for r in results),
        first_event_ms=statistics.median(firsts) if firsts else None,
        lag_p50_ms=percentile(lags, 0.5) if lags else None,
        lag_p99_ms=percentile(lags, 0.99) if lags else None,
        mib=sum(r.body_bytes for r in results) / 2**20,
        errors=sorted({r.error for r in results if r.error}),
    )


class Upstream:
    """`python -m benchmarks.upstream` in its own process (so its pacing has a core of its own)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.upstream"], stdout=subprocess.PIPE, text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.process.kill()
            raise RuntimeError(f"benchmark upstream did not start (said {line!r})")
        self.port = int(line)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


async def _streams(upstream: int, spec: StreamSpec, proxy: int | None, n: int) -> list[StreamResult]:
    return await asyncio.gather(*(fetch(upstream, spec, proxy) for _ in range(n)))


def measure(scenario: Scenario, proxy: Mitmdump | None, upstream: int, profile: Profile,
            concurrency: int, rep: int) -> Run:  # fmt: skip
    """One run; the proxy's CPU and memory include the quiet period after the last byte."""
    meter = ProcessMeter(proxy.process.pid) if proxy else None
    if meter:
        meter.start()
    started = time.perf_counter()
    results = asyncio.run(_streams(upstream, profile.spec, proxy.port if proxy else None, concurrency))
    wall = time.perf_counter() - started
    run = summarize(scenario.key, profile.name, concurrency, rep, wall, results)
    if proxy and meter:
        wait_idle(proxy.process.pid)
        usage = meter.stop()
        run.cpu_s, run.peak_rss_mib = usage.cpu_s, usage.peak_rss / 2**20
    return run


def run_suite(profiles: list[Profile], concurrencies: list[int], reps: int, workdir: Path, *,
              large_mib: int = 0, log: Callable[[str], None] = print) -> dict:  # fmt: skip
    """Run every scenario × profile × concurrency `reps` times, interleaved; return raw results.

    Then, when `large_mib` is set, one stream of that size through each scenario (once).
    """
    upstream = Upstream()
    proxies: dict[str, Mitmdump] = {}
    runs: list[Run] = []
    large_runs: list[Run] = []
    try:
        for scenario in SCENARIOS:
            if scenario.proxied:
                proxies[scenario.key] = start_proxy(scenario, workdir)
        warm = StreamSpec(events=20, size=100)
        for scenario in SCENARIOS:  # first requests pay for imports and connection set-up
            asyncio.run(_streams(upstream.port, warm, getattr(proxies.get(scenario.key), "port", None), 2))
        for rep in range(reps):
            for profile in profiles:
                for concurrency in concurrencies:
                    shift = rep % len(SCENARIOS)
                    for scenario in SCENARIOS[shift:] + SCENARIOS[:shift]:
                        run = measure(scenario, proxies.get(scenario.key), upstream.port, profile,
                                      concurrency, rep)  # fmt: skip
                        runs.append(run)
                        log(_line(run))
        large = Profile("large", StreamSpec.of_size(large_mib * 2**20)) if large_mib else None
        for scenario in SCENARIOS if large else ():
            run = measure(scenario, proxies.get(scenario.key), upstream.port, large, 1, 0)
            large_runs.append(run)
            log(_line(run))
    finally:
        stop_times = _stop_all(proxies)
        upstream.stop()
    return {
        "profiles": [{"name": p.name, "describe": p.describe(), **asdict(p.spec)} for p in profiles],
        "concurrencies": concurrencies,
        "reps": reps,
        "runs": [asdict(r) for r in runs],
        "large_mib": large_mib,
        "max_parse_mib": load().capture.max_parse_bytes / 2**20,
        "large": [asdict(r) for r in large_runs],
        "stop_s": stop_times,
        "capsem_calls": _capsem_calls(workdir),
        "expected_capsem_calls": 2 + reps * len(profiles) * sum(concurrencies) + (1 if large_runs else 0),
    }


def _stop_all(proxies: dict[str, Mitmdump]) -> dict[str, float]:
    """Stop every proxy; how long each took (hardump writes its HAR, capsem rolls up, at exit)."""
    times = {}
    for key, proxy in proxies.items():
        started = time.perf_counter()
        proxy.stop(timeout=300)
        times[key] = time.perf_counter() - started
    return times


def _capsem_calls(workdir: Path) -> dict[str, int]:
    """What the capsem addon recorded: model calls, complete ones, and parse errors."""
    dbs = list((workdir / "capsem-home" / "sessions").glob("*/session.db"))
    if len(dbs) != 1:
        return {"sessions": len(dbs)}
    conn = sqlite3.connect(f"file:{dbs[0]}?mode=ro", uri=True)
    try:
        calls, complete, errors = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(complete), 0), COALESCE(SUM(parse_errors), 0) FROM model_calls"
        ).fetchone()
    finally:
        conn.close()
    return {"model_calls": calls, "complete": complete, "parse_errors": errors}


def _line(run: Run) -> str:
    lag = f"lag p50 {run.lag_p50_ms:7.2f} ms" if run.lag_p50_ms is not None else "lag -"
    cpu = f"cpu {run.cpu_s:6.2f} s" if run.cpu_s is not None else ""
    err = f"  ERRORS: {run.errors}" if run.errors else ""
    return (f"  rep {run.rep} {run.profile:8} x{run.concurrency:<3} {run.scenario:8} "
            f"ttfb {run.ttfb_ms:7.1f} ms  {lag}  total {run.wall_s:6.2f} s  {cpu}{err}")  # fmt: skip
