"""`python -m benchmarks.threads`: where capsem's CPU goes beside streaming mitmdump, per thread.

Two real mitmdumps, started as `make bench` starts them (`benchmarks/proxies.py`): (2) streaming
mitmdump and (5) capsem. Each repetition sends the same streams through each, the order
alternating, and reads, before and after (and after the proxy is idle again, `wait_idle`), the CPU
clocks of mitmdump (all its threads, ended ones too), of its main thread (the event loop,
`/proc/<pid>/task/<pid>/schedstat`) and of the processes it started (capsem's recorder). Prints
the medians: mitmdump's event loop, its other threads (capsem's sender thread and process lookup),
the recorder, the total and the wall time, each against (2). Linux only (it reads `/proc`).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.proxies import SCENARIOS, cpu_seconds, start_proxy, wait_idle
from benchmarks.streaming import Upstream, _streams
from benchmarks.upstream import StreamSpec
from capsem.mitm import Mitmdump

CHOSEN = ("stream", "capsem")
_COLUMNS = ("loop", "other", "recorder", "total", "wall")


@dataclass
class Sample:
    """CPU seconds of one run (or a clock's reading before or after one)."""

    loop: float
    other: float
    recorder: float
    wall: float = 0.0

    @property
    def total(self) -> float:
        return self.loop + self.other + self.recorder

    def __sub__(self, before: Sample) -> Sample:
        return Sample(self.loop - before.loop, self.other - before.other, self.recorder - before.recorder)


def _main_thread(pid: int) -> float:
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def clocks(proxy: Mitmdump) -> Sample:
    """The CPU clocks of a mitmdump: its event loop, its other threads, the processes it started."""
    process = psutil.Process(proxy.process.pid)
    loop = _main_thread(process.pid)
    children = sum(cpu_seconds(child) for child in process.children(recursive=True))
    return Sample(loop, cpu_seconds(process) - loop, children)


def run(proxy: Mitmdump, upstream: int, spec: StreamSpec, concurrency: int) -> Sample:
    before = clocks(proxy)
    began = time.perf_counter()
    results = asyncio.run(_streams(upstream, spec, proxy.port, concurrency))
    wall = time.perf_counter() - began
    wait_idle(proxy.process.pid)
    errors = [r.error for r in results if r.error]
    if errors:
        raise RuntimeError(f"{len(errors)} streams failed: {errors[0]}")
    used = clocks(proxy) - before
    used.wall = wall
    return used


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args(argv)
    spec = StreamSpec(args.events, args.size, args.delay_ms)
    scenarios = [s for s in SCENARIOS if s.key in CHOSEN]
    upstream = Upstream()
    proxies: dict[str, Mitmdump] = {}
    samples: dict[str, list[Sample]] = {s.key: [] for s in scenarios}
    try:
        with tempfile.TemporaryDirectory(prefix="capsem-threads-") as tmp:
            for scenario in scenarios:
                proxies[scenario.key] = start_proxy(scenario, Path(tmp) / scenario.key)
                run(proxies[scenario.key], upstream.port, spec, args.concurrency)  # warm
            for rep in range(args.reps):
                for scenario in scenarios if rep % 2 == 0 else reversed(scenarios):
                    samples[scenario.key].append(
                        run(proxies[scenario.key], upstream.port, spec, args.concurrency)
                    )
            for proxy in proxies.values():
                proxy.stop()
    finally:
        upstream.stop()
    print(f"{spec.header()}; {args.concurrency} at once; medians of {args.reps} runs, ms of CPU")
    print(f"{'':28} {'event loop':>11} {'other threads':>14} {'recorder':>9} {'total':>8} {'wall':>8}")
    base = None
    for scenario in scenarios:
        runs = samples[scenario.key]
        med = {k: statistics.median(getattr(s, k) for s in runs) * 1000 for k in _COLUMNS}
        base = base or med
        print(f"{scenario.label:28} {med['loop']:11.1f} {med['other']:14.1f} {med['recorder']:9.1f} "
              f"{med['total']:8.1f} {med['wall']:8.1f}   total {med['total'] / base['total']:.2f}×, "
              f"wall {med['wall'] / base['wall']:.2f}×")  # fmt: skip
    first, second = (samples[s.key] for s in scenarios)
    for column in ("total", "wall"):
        ratios = sorted(getattr(b, column) / getattr(a, column) for a, b in zip(first, second, strict=True))
        print(f"{column} per repetition (capsem's run over the streaming run beside it): median "
              f"{statistics.median(ratios):.2f}×, quartiles {_quartiles(ratios)}, range "
              f"{ratios[0]:.2f}–{ratios[-1]:.2f}×")  # fmt: skip


def _quartiles(values: list[float]) -> str:
    """The first and third quartiles of `values` (sorted), as `a–b×` (`–` when fewer than four)."""
    if len(values) < 4:
        return "–"
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1:.2f}–{q3:.2f}×"


if __name__ == "__main__":
    main()
