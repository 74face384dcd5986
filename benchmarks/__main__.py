"""`python -m benchmarks [--quick] [--only SUITE]`: run, print the tables, save them.

SUITE: streaming, newconn, startup, micro, bodies, websocket, otlp, backtest, replay, policy or toolhold.
SUITE: streaming, newconn, startup, micro, bodies, websocket, otlp, backtest, replay, policy or team.

A full run writes `benchmarks/results/latest.md` and `latest.json`; `--quick` (a smoke run of
about a minute, too small to judge anything) writes `quick.md` and `quick.json` instead.
Everything runs on loopback with a temporary CAPSEM_HOME.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
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

FULL = {
    "profiles": [Profile("paced", StreamSpec(500, 200, 5)), Profile("unpaced", StreamSpec(2000, 1000))],
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
    "profiles": [Profile("paced", StreamSpec(100, 200, 5)), Profile("unpaced", StreamSpec(300, 1000))],
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (results/quick.md)")
    parser.add_argument(
        "--only",
        choices=[
            "streaming",
            "newconn",
            "startup",
            "micro",
            "bodies",
            "websocket",
            "otlp",
            "backtest",
            "replay",
            "policy",
            "toolhold",
            "team",
            "ledger",
        ],
        help="run one suite only",
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="capsem-bench-") as tmp:
        os.environ["CAPSEM_HOME"] = str(Path(tmp) / "home")
        if args.only in (None, "streaming"):
            print("streaming suite", flush=True)
            results["streaming"] = run_suite(
                plan["profiles"], plan["concurrencies"], plan["reps"], Path(tmp) / "streaming",
                large_mib=plan["large_mib"], log=lambda line: print(line, flush=True),
            )  # fmt: skip
        if args.only in (None, "newconn"):
            print("new-connection suite", flush=True)
            plan_nc = plan["newconn"]
            results["newconn"] = run_newconn(
                plan_nc["connections"], Path(tmp) / "newconn", log=lambda line: print(line, flush=True)
            )
            results["newconn"]["resolve"] = run_resolve(plan_nc["resolve_repeat"])
        if args.only in (None, "startup"):
            print("start-up suite", flush=True)
            results["startup"] = run_startup(
                plan["startup_runs"], Path(tmp) / "startup", log=lambda line: print(line, flush=True)
            )
        if args.only in (None, "micro"):
            print("micro-benchmarks", flush=True)
            results["micro"] = run_micro(**plan["micro"], log=lambda line: print(line, flush=True))
        if args.only in (None, "bodies"):
            print("body storage", flush=True)
            results["bodies"] = [
                run_bodies(**shape, log=lambda line: print(line, flush=True)) for shape in plan["bodies"]
            ]
        if args.only in (None, "websocket"):
            print("memory on one long WebSocket", flush=True)
            results["websocket"] = run_ws_memory(**plan["websocket"], workdir=Path(tmp) / "websocket",
                                                 log=lambda line: print(line, flush=True))  # fmt: skip
        if args.only in (None, "otlp"):
            print("live OTLP export", flush=True)
            results["otlp"] = run_otlp(**plan["otlp"], workdir=Path(tmp) / "otlp",
                                       log=lambda line: print(line, flush=True))  # fmt: skip
        if args.only in (None, "backtest"):
            print("capsem policy test", flush=True)
            results["backtest"] = run_backtest(**plan["backtest"], log=lambda line: print(line, flush=True))
        if args.only in (None, "replay"):
            print("replay", flush=True)
            results["replay"] = run_replay(**plan["replay"], log=lambda line: print(line, flush=True))
        if args.only in (None, "policy"):
            print("per-request CPU when no rule matches", flush=True)
            results["policy"] = run_policy_cpu(**plan["policy"], workdir=Path(tmp) / "policy",
                                               log=lambda line: print(line, flush=True))  # fmt: skip
        if args.only in (None, "toolhold"):
            print("holding tool calls", flush=True)
            results["toolhold"] = run_tool_hold(**plan["toolhold"], workdir=Path(tmp) / "toolhold",
                                                log=lambda line: print(line, flush=True))  # fmt: skip
        if args.only in (None, "team"):
            print("team on PostgreSQL", flush=True)
            results["team"] = run_team(**plan["team"], workdir=Path(tmp) / "team",
                                       log=lambda line: print(line, flush=True))  # fmt: skip
        if args.only in (None, "ledger"):
            print("the ledger's cost", flush=True)
            results["ledger"] = run_ledger(**plan["ledger"], log=lambda line: print(line, flush=True))
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
    name = ("quick" if args.quick else "latest") + (f"-{args.only}" if args.only else "")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text(markdown + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"written: {RESULTS / name}.md, .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
