"""`python -m benchmarks [--quick] [--only SUITE ...]`: run, print the tables, save them.

SUITE: any of the keys of `SUITES` (streaming, newconn, startup, micro, bodies, websocket, otlp,
backtest, replay, policy, toolhold, team, ledger); all of them when `--only` is not given.

A full run writes `benchmarks/results/latest.md` and `latest.json`; `--quick` (a smoke run of
a few minutes, too small to judge anything) writes `quick.md` and `quick.json` instead; with
`--only`, the names get the suites' keys (`latest-streaming-toolhold-ledger.md`). Everything runs
on loopback with a temporary CAPSEM_HOME.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from benchmarks.backtest import run_backtest
from benchmarks.bodies import run_bodies
from benchmarks.ledger import run_ledger
from benchmarks.micro import run_micro
from benchmarks.newconn import run_newconn, run_resolve
from benchmarks.otlp_export import run_otlp
from benchmarks.policy_cpu import run_policy_cpu
from benchmarks.replay import run_replay
from benchmarks.report import render
from benchmarks.startup import run_startup
from benchmarks.streaming import Profile, run_suite
from benchmarks.team import run_team
from benchmarks.tool_hold import run_tool_hold
from benchmarks.upstream import StreamSpec
from benchmarks.websocket_memory import run_ws_memory

RESULTS = Path(__file__).resolve().parent / "results"

WITH_TOOLS = ("stream", "capsem", "rule")
"""The scenarios of the profile whose answers end with tool calls (the others add nothing to it)."""
FULL = {
    "profiles": [
        Profile("paced", StreamSpec(500, 200, 5)),
        Profile("unpaced", StreamSpec(2000, 1000)),
        Profile("tools", StreamSpec(100, 200, 5, tools=2), WITH_TOOLS),
    ],
    "concurrencies": [1, 20],
    "reps": 5,
    "large_mib": 200,
    "micro": {"corpus_mib": 10, "repeat": 3, "store_rows": 50_000, "calls": 2_000, "memory_mib": 200},
    "newconn": {"connections": 60, "resolve_repeat": 20},
    "startup_runs": 7,
    "bodies": [
        {"shape": "history-last", "turns": 300, "read_turns": 500},
        {"shape": "claude-code", "turns": 150, "read_turns": 500},
    ],
    "websocket": {"turns": 500, "every": 50},
    "otlp": {"calls": 150, "spec": StreamSpec(50, 200, 2)},
    "backtest": {"sessions": 1000, "model_calls": 40, "mcp_calls": 20, "plain": 20, "repeat": 3},
    "replay": {"turns": 300},
    "policy": {"requests": 2000, "reps": 5},
    "toolhold": {"runs": 100},
    "team": {"calls": 5000, "pushed": 1_000_000, "repeat": 3, "decisions": 5000},
    "ledger": {"shapes": [(20, 50), (20, 500)], "reps": 7, "verify_calls": 5000},
}
QUICK = {
    "profiles": [
        Profile("paced", StreamSpec(100, 200, 5)),
        Profile("unpaced", StreamSpec(300, 1000)),
        Profile("tools", StreamSpec(50, 200, 5, tools=2), WITH_TOOLS),
    ],
    "concurrencies": [1, 20],
    "reps": 1,
    "large_mib": 10,
    "micro": {"corpus_mib": 1, "repeat": 1, "store_rows": 5_000, "calls": 200, "memory_mib": 20},
    "newconn": {"connections": 10, "resolve_repeat": 3},
    "startup_runs": 2,
    "bodies": [
        {"shape": "history-last", "turns": 40, "read_turns": 60},
        {"shape": "claude-code", "turns": 40, "read_turns": 60},
    ],
    "websocket": {"turns": 40, "every": 10},
    "otlp": {"calls": 30, "spec": StreamSpec(50, 200, 2)},
    "backtest": {"sessions": 50, "model_calls": 10, "mcp_calls": 6, "plain": 6, "repeat": 1},
    "replay": {"turns": 40},
    "policy": {"requests": 200, "reps": 1},
    "toolhold": {"runs": 10},
    "team": {"calls": 500, "pushed": 20_000, "repeat": 1, "decisions": 500},
    "ledger": {"shapes": [(5, 50)], "reps": 2, "verify_calls": 500},
}


Log = Callable[[str], None]
SUITES: dict[str, tuple[str, Callable[[dict, Path, Log], object]]] = {
    "streaming": ("streaming suite", lambda p, w, log: run_suite(
        p["profiles"], p["concurrencies"], p["reps"], w, large_mib=p["large_mib"], log=log)),
    "newconn": ("new-connection suite", lambda p, w, log: {
        **run_newconn(p["newconn"]["connections"], w, log=log), "resolve": run_resolve(p["newconn"]["resolve_repeat"])}),
    "startup": ("start-up suite", lambda p, w, log: run_startup(p["startup_runs"], w, log=log)),
    "micro": ("micro-benchmarks", lambda p, w, log: run_micro(**p["micro"], log=log)),
    "bodies": ("body storage", lambda p, w, log: [run_bodies(**shape, log=log) for shape in p["bodies"]]),
    "websocket": ("memory on one long WebSocket", lambda p, w, log: run_ws_memory(**p["websocket"], workdir=w, log=log)),
    "otlp": ("live OTLP export", lambda p, w, log: run_otlp(**p["otlp"], workdir=w, log=log)),
    "backtest": ("capsem policy test", lambda p, w, log: run_backtest(**p["backtest"], log=log)),
    "replay": ("replay", lambda p, w, log: run_replay(**p["replay"], log=log)),
    "policy": ("per-request CPU when no rule matches", lambda p, w, log: run_policy_cpu(**p["policy"], workdir=w, log=log)),
    "toolhold": ("holding tool calls", lambda p, w, log: run_tool_hold(**p["toolhold"], workdir=w, log=log)),
    "team": ("team on PostgreSQL", lambda p, w, log: run_team(**p["team"], workdir=w, log=log)),
    "ledger": ("the ledger's cost", lambda p, w, log: run_ledger(**p["ledger"], log=log)),
}  # fmt: skip
"""Each suite: (the line printed when it starts, how it runs: plan, its work folder, log -> results)."""


def _print(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (results/quick.md)")
    parser.add_argument("--only", nargs="+", choices=list(SUITES), metavar="SUITE",
                        help=f"run these suites only ({', '.join(SUITES)})")  # fmt: skip
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="capsem-bench-") as tmp:
        os.environ["CAPSEM_HOME"] = str(Path(tmp) / "home")
        for key, (title, run) in SUITES.items():
            if args.only is None or key in args.only:
                _print(title)
                results[key] = run(plan, Path(tmp) / key, _print)
    results["meta"] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": "quick" if args.quick else "full",
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "python": platform.python_version(),
        "mitmproxy": version("mitmproxy"),
        "seconds": time.perf_counter() - started,
    }
    markdown = render(results)
    print("\n" + markdown)
    name = ("quick" if args.quick else "latest") + "".join(
        f"-{key}" for key in SUITES if key in (args.only or ())
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text(markdown + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"written: {RESULTS / name}.md, .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
