"""`python -m benchmarks.native_ab`: capsem's CPU with the compiled fast path and without it, beside
streaming mitmdump, in one run.

Three real mitmdumps, started as `make bench` starts them (`benchmarks/proxies.py`): (2) streaming
mitmdump, (5) capsem, and (5) capsem with `CAPSEM_NATIVE=0` (its recorder on the pure-Python path,
the reference). Each repetition runs every profile once through each, the order rotating; CPU is
the seconds of each mitmdump and the processes it started (its recorder), as in the streaming
benchmark. Prints per profile the median CPU of each and its ratio to (2). A shared machine moves
the seconds; the three columns of one line were measured minutes apart at most.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from benchmarks import streaming
from benchmarks.proxies import SCENARIOS, start_proxy
from benchmarks.streaming import Profile
from benchmarks.upstream import StreamSpec

_PURE = replace(
    next(s for s in SCENARIOS if s.key == "capsem"), key="capsem_py", label="(5) capsem, pure Python"
)
CHOSEN = (*(s for s in SCENARIOS if s.key in ("stream", "capsem")), _PURE)


@contextmanager
def _env(name: str, value: str | None):
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _start(scenario, workdir: Path):
    """`start_proxy`, with the fast path off for the pure-Python scenario (its own directory)."""
    with _env("CAPSEM_NATIVE", "0" if scenario.key == "capsem_py" else None):
        return start_proxy(scenario, workdir / scenario.key)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 20])
    args = parser.parse_args(argv)
    profiles = [Profile("paced", StreamSpec(500, 200, 5)), Profile("unpaced", StreamSpec(2000, 1000))]
    streaming.SCENARIOS, streaming.start_proxy = CHOSEN, _start  # type: ignore[assignment]
    with tempfile.TemporaryDirectory(prefix="capsem-native-ab-") as tmp:
        for s in CHOSEN:
            (Path(tmp) / s.key).mkdir()
        result = streaming.run_suite(profiles, args.concurrency, args.reps, Path(tmp), log=lambda _: None)
    runs = result["runs"]
    print(
        "| profile | streams | (2) mitmdump CPU s | (5) capsem, compiled | ×(2) | (5) capsem, pure Python | ×(2) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for profile in profiles:
        for n in args.concurrency:
            cpu = {
                s.key: statistics.median(
                    r["cpu_s"] for r in runs if r["scenario"] == s.key and r["profile"] == profile.name
                    and r["concurrency"] == n
                )
                for s in CHOSEN
            }  # fmt: skip
            base = cpu["stream"]
            print(f"| {profile.name} | {n} | {base:.2f} | {cpu['capsem']:.2f} | {cpu['capsem'] / base:.2f} | "
                  f"{cpu['capsem_py']:.2f} | {cpu['capsem_py'] / base:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
