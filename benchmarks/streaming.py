"""The streaming suite: long SSE responses through no proxy and seven mitmdump set-ups (plain
mitmdump three ways, capsem, and capsem with a tool rule, a team to push to, or no ledger).

Every (profile, concurrency) cell runs each scenario once per repetition (a profile may name the
scenarios it runs), and the scenario order rotates between repetitions (interleaved), so slow
drifts of a shared machine spread over all scenarios instead of landing on one. All mitmdumps
run for the whole suite, each with its own CAPSEM_HOME; only the one in use carries traffic. One
run = `concurrency` streams started together; the proxy's CPU and peak memory are measured over
the run plus the quiet period that follows it (for the team scenario, once its calls are in
PostgreSQL: `benchmarks/stream_features.py`).
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from benchmarks.client import StreamResult, fetch
from benchmarks.proxies import SCENARIOS, ProcessMeter, Scenario, start_proxy, wait_idle
from benchmarks.stream_features import TeamServer, pushers, team_server
from benchmarks.upstream import StreamSpec
from capsem.mitm import Mitmdump
from capsem.settings import load


@dataclass(frozen=True)
class Profile:
    name: str
    spec: StreamSpec
    scenarios: tuple[str, ...] = ()
    """The keys of the scenarios it runs through (empty: all)."""

    def describe(self) -> str:
        pace = f"{self.spec.delay_ms:g} ms apart" if self.spec.delay_ms else "back to back"
        tools = f", then {self.spec.tools} tool call{'s' * (self.spec.tools > 1)}" if self.spec.tools else ""
        return f"{self.spec.events} events of ~{self.spec.size} B text, {pace}{tools}"

    def runs(self, scenario: Scenario) -> bool:
        return not self.scenarios or scenario.key in self.scenarios


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
            concurrency: int, rep: int, settle: Callable[[int], str | None] | None = None) -> Run:  # fmt: skip
    """One run; the proxy's CPU and memory include the quiet period after the last byte (and,
    with `settle`, what it waits for: the team's push of the run's calls; it returns an error)."""
    meter = ProcessMeter(proxy.process.pid) if proxy else None
    if meter:
        meter.start()
    began = time.perf_counter()
    results = asyncio.run(_streams(upstream, profile.spec, proxy.port if proxy else None, concurrency))
    wall = time.perf_counter() - began
    run = summarize(scenario.key, profile.name, concurrency, rep, wall, results)
    if settle and (error := settle(concurrency)):
        run.errors.append(error)
    if proxy and meter:
        wait_idle(proxy.process.pid)
        usage = meter.stop()
        run.cpu_s, run.peak_rss_mib = usage.cpu_s, usage.peak_rss / 2**20
    return run


# Long: the suite's one loop, with the team scenario's server around it.
def run_suite(profiles: list[Profile], concurrencies: list[int], reps: int, workdir: Path, *,
              large_mib: int = 0, log: Callable[[str], None] = print) -> dict:  # fmt: skip
    """Run every scenario × profile × concurrency `reps` times, interleaved; return raw results.

    Then, when `large_mib` is set, one stream of that size through each scenario (once).
    """
    team, team_skipped = team_server(log, workdir, any(s.team for s in SCENARIOS))
    scenarios = [_with_team(s, team) for s in SCENARIOS if not s.team or team]
    upstream: Upstream | None = None
    proxies: dict[str, Mitmdump] = {}
    sent: dict[str, int] = {s.key: 0 for s in scenarios}
    runs: list[Run] = []
    large_runs: list[Run] = []

    def run(scenario: Scenario, profile: Profile, concurrency: int, rep: int) -> Run:
        settle = team.wait_pushed if team and scenario.team else None
        assert upstream is not None
        done = measure(scenario, proxies.get(scenario.key), upstream.port, profile, concurrency, rep, settle)
        sent[scenario.key] += concurrency
        log(_line(done))
        return done

    try:
        upstream = Upstream()
        for scenario in scenarios:
            if scenario.proxied:
                proxies[scenario.key] = start_proxy(scenario, workdir / scenario.key)
        warm = StreamSpec(events=20, size=100, tools=1)
        for scenario in scenarios:  # first requests pay for imports and connection set-up
            asyncio.run(_streams(upstream.port, warm, getattr(proxies.get(scenario.key), "port", None), 2))
            sent[scenario.key] += 2
            if team and scenario.team and (error := team.wait_pushed(2)):
                log(f"  {error}")
        for rep in range(reps):
            for profile in profiles:
                for concurrency in concurrencies:
                    shift = rep % len(scenarios)
                    for scenario in scenarios[shift:] + scenarios[:shift]:
                        if profile.runs(scenario):
                            runs.append(run(scenario, profile, concurrency, rep))
        large = Profile("large", StreamSpec.of_size(large_mib * 2**20)) if large_mib else None
        for scenario in scenarios if large else ():
            large_runs.append(run(scenario, large, 1, 0))  # type: ignore[arg-type]
    finally:
        pushing = [
            p for s in scenarios if s.team and s.key in proxies for p in pushers(proxies[s.key].process.pid)
        ]
        stop_times = _stop_all(proxies)
        if upstream is not None:
            upstream.stop()
        if team:
            team.remove(pushing)
    return {
        "profiles": [
            {"name": p.name, "describe": p.describe(), "scenarios": list(p.scenarios), **asdict(p.spec)}
            for p in profiles
        ],
        "concurrencies": concurrencies,
        "reps": reps,
        "runs": [asdict(r) for r in runs],
        "large_mib": large_mib,
        "max_parse_mib": load().capture.max_parse_bytes / 2**20,
        "large": [asdict(r) for r in large_runs],
        "stop_s": stop_times,
        "capsem_calls": {
            s.key: {**_capsem_calls(workdir / s.key), "sent": sent[s.key]} for s in scenarios if s.addon
        },
        "skipped": {"team": team_skipped} if team_skipped else {},
    }


def _with_team(scenario: Scenario, team: TeamServer | None) -> Scenario:
    """The team scenario pushes to the suite's PostgreSQL (its URL known once the cluster runs)."""
    if not scenario.team or team is None:
        return scenario
    return replace(scenario, env=(*scenario.env, ("CAPSEM_TEAM_URL", team.url)))


def _stop_all(proxies: dict[str, Mitmdump]) -> dict[str, float]:
    """Stop every proxy; how long each took (hardump writes its HAR, capsem rolls up, at exit)."""
    times = {}
    for key, proxy in proxies.items():
        started = time.perf_counter()
        proxy.stop(timeout=300)
        times[key] = time.perf_counter() - started
    return times


def _capsem_calls(workdir: Path) -> dict[str, int]:
    """What the capsem addon recorded: model calls, complete ones, parse errors, ledger batches."""
    dbs = list((workdir / "capsem-home" / "sessions").glob("*/session.db"))
    if len(dbs) != 1:
        return {"sessions": len(dbs)}
    conn = sqlite3.connect(f"file:{dbs[0]}?mode=ro", uri=True)
    try:
        calls, complete, errors = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(complete), 0), COALESCE(SUM(parse_errors), 0) FROM model_calls"
        ).fetchone()
        batches = conn.execute("SELECT COUNT(*) FROM ledger_heads").fetchone()[0]
    finally:
        conn.close()
    return {"model_calls": calls, "complete": complete, "parse_errors": errors, "ledger_heads": batches}


def _line(run: Run) -> str:
    lag = f"lag p50 {run.lag_p50_ms:7.2f} ms" if run.lag_p50_ms is not None else "lag -"
    cpu = f"cpu {run.cpu_s:6.2f} s" if run.cpu_s is not None else ""
    err = f"  ERRORS: {run.errors}" if run.errors else ""
    return (f"  rep {run.rep} {run.profile:8} x{run.concurrency:<3} {run.scenario:9} "
            f"ttfb {run.ttfb_ms:7.1f} ms  {lag}  total {run.wall_s:6.2f} s  {cpu}{err}")  # fmt: skip
