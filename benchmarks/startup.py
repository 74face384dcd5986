"""The start-up suite: what `capsem run` adds around an agent.

`capsem run -- PROBE` is started as a user starts it (a new process, the console script), with a
probe agent that writes the wall-clock time it started (`date +%s.%N`). Measured per run:
the agent's start delay (from spawning `capsem run` to the probe's first instruction: CLI start,
mitmdump and its recorder ready, workspace watcher started), and the whole run's wall time for an
agent that does nothing (`true`: start, stop, rollup, summary), beside the same probe run bare.
Runs alternate with bare runs; medians are reported.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

GOAL_START_S = 1.0
"""The agent should start within a second of `capsem run`."""


def _capsem() -> list[str]:
    script = Path(sys.executable).parent / "capsem"
    return [str(script)] if script.exists() else [sys.executable, "-m", "assembler"]


def _probe(marker: Path) -> list[str]:
    return ["sh", "-c", f"date +%s.%N > {marker}"]


def _one(argv: list[str], marker: Path, env: dict[str, str]) -> tuple[float, float]:
    """(start delay, wall time) of one run of `argv`, whose agent writes its start time to `marker`."""
    marker.unlink(missing_ok=True)
    started = time.time()
    subprocess.run(argv, env=env, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)  # fmt: skip
    wall = time.time() - started
    return float(marker.read_text()) - started, wall


def run_startup(runs: int, workdir: Path, log: Callable[[str], None] = print) -> dict:
    """`runs` pairs of (`capsem run -q -- probe`, bare probe), alternated; medians."""
    if shutil.which("date") is None or shutil.which("sh") is None:
        raise RuntimeError("the start-up suite needs sh and date")
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CAPSEM_HOME": str(workdir / "home")}
    marker = workdir / "started"
    _one(
        [*_capsem(), "run", "-q", "--", *_probe(marker)], marker, env
    )  # warm-up: mitmproxy's CA is made once
    capsem: list[tuple[float, float]] = []
    bare: list[tuple[float, float]] = []
    for i in range(runs):
        capsem.append(_one([*_capsem(), "run", "-q", "--", *_probe(marker)], marker, env))
        bare.append(_one(_probe(marker), marker, env))
        log(
            f"  run {i + 1}/{runs}: agent started after {capsem[-1][0]:.2f} s, run took {capsem[-1][1]:.2f} s"
        )
    return {
        "runs": runs,
        "start_delay_s": statistics.median(c[0] for c in capsem),
        "start_delay_max_s": max(c[0] for c in capsem),
        "wall_s": statistics.median(c[1] for c in capsem),
        "bare_wall_s": statistics.median(b[1] for b in bare),
        "goal_start_s": GOAL_START_S,
    }


def startup_table(results: dict) -> str:
    ok = "✅" if results["start_delay_s"] <= results["goal_start_s"] else "❌"
    overhead = results["wall_s"] - results["bare_wall_s"]
    return "\n".join([
        "| what | median s | worst s |",
        "|---|---:|---:|",
        f"| agent start delay (goal ≤ {results['goal_start_s']:g}) | {results['start_delay_s']:.2f} {ok} "
        f"| {results['start_delay_max_s']:.2f} |",
        f"| `capsem run -- true`, whole run | {results['wall_s']:.2f} | |",
        f"| the same agent without capsem | {results['bare_wall_s']:.3f} | |",
        f"| overhead of `capsem run` | {overhead:.2f} | |",
    ])  # fmt: skip
