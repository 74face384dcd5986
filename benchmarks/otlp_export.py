"""Live OTLP export beside the agent: the same calls through three capsem mitmdumps, one without
export, one exporting to a backend that is up, one to a backend that is down for the middle third
of the run (connections refused), interleaved call by call. Then `capsem export otlp` backfills
what the down backend missed, and the backend's span count is checked (each span once).

The backend is an OTLP/HTTP endpoint in this process that decodes each request (the protobuf
the SDK's exporter sends) and keeps the span ids.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from benchmarks.client import fetch
from benchmarks.proxies import Scenario, start_proxy
from benchmarks.streaming import Upstream
from benchmarks.upstream import StreamSpec

SETUPS = ("off", "up", "down")
"""No export; export to a backend that is up; to one that is down for the middle third."""


class Backend:
    """An OTLP/HTTP traces endpoint on a fixed loopback port that can be taken down and back up."""

    def __init__(self) -> None:
        self.span_ids: list[bytes] = []
        self.requests = 0
        self.server: ThreadingHTTPServer | None = None
        self.port = 0
        self.up()

    def up(self) -> None:
        backend = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = ExportTraceServiceRequest.FromString(
                    self.rfile.read(int(self.headers["content-length"]))
                )
                backend.requests += 1
                backend.span_ids += [s.span_id for rs in request.resource_spans for ss in rs.scope_spans
                                     for s in ss.spans]  # fmt: skip
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def _config(home: Path, endpoint: str | None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    if endpoint:
        (home / "config.yaml").write_text(yaml.safe_dump({"export": {"otlp": {"endpoint": endpoint}}}))


def run_otlp(calls: int, spec: StreamSpec, workdir: Path, log: Callable[[str], None] = print) -> dict:
    """`calls` streamed calls through each set-up, interleaved; per-call times, then the backfill."""
    upstream = Upstream()
    backends = {"up": Backend(), "down": Backend()}
    proxies = {}
    times: dict[str, list[float]] = {s: [] for s in SETUPS}
    ttfb: dict[str, list[float]] = {s: [] for s in SETUPS}
    errors: list[str] = []
    try:
        for setup in SETUPS:
            folder = workdir / setup
            backend = backends.get(setup)
            _config(folder / "capsem-home", f"http://127.0.0.1:{backend.port}" if backend else None)
            proxies[setup] = start_proxy(Scenario(setup, setup, addon=True), folder)
        for setup in SETUPS:  # the first requests pay for imports and connection set-up
            asyncio.run(fetch(upstream.port, StreamSpec(5, 100), proxies[setup].port))
        for i in range(calls):
            if i == calls // 3:
                backends["down"].down()
                log(f"  call {i}: the backend of 'down' goes down")
            if i == 2 * calls // 3:
                backends["down"].up()
                log(f"  call {i}: and comes back")
            order = SETUPS[i % 3 :] + SETUPS[: i % 3]
            for setup in order:
                result = asyncio.run(fetch(upstream.port, spec, proxies[setup].port))
                if result.error:
                    errors.append(f"{setup}: {result.error}")
                times[setup].append(result.total * 1000)
                ttfb[setup].append(result.ttfb * 1000)
        backends["down"].down()  # down again when recording stops: the rest waits for the backfill
        stop = {}
        for setup, proxy in proxies.items():
            started = time.perf_counter()
            proxy.stop(timeout=120)
            stop[setup] = time.perf_counter() - started
        live = {s: len(b.span_ids) for s, b in backends.items()}
        backends["down"].up()
        started = time.perf_counter()
        env = {**os.environ, "CAPSEM_HOME": str(workdir / "down" / "capsem-home")}
        done = subprocess.run([sys.executable, "-m", "assembler", "export", "otlp"], env=env, capture_output=True,
                              text=True, check=False)  # fmt: skip
        backfill_s = time.perf_counter() - started
        if done.returncode != 0:
            errors.append(f"backfill: {done.stdout[-500:]} {done.stderr[-500:]}")
        down = backends["down"]
    finally:
        for backend in backends.values():
            backend.down()
        for proxy in proxies.values():
            if not proxy.stopped:
                proxy.stop()
        upstream.stop()
    log(f"  live spans: up {live['up']}, down {live['down']}; after backfill {len(down.span_ids)}")
    return {
        "calls": calls,
        "spec": spec.header(),
        "median_ms": {s: statistics.median(v) for s, v in times.items()},
        "p99_ms": {s: sorted(v)[min(len(v) - 1, round(0.99 * (len(v) - 1)))] for s, v in times.items()},
        "ttfb_ms": {s: statistics.median(v) for s, v in ttfb.items()},
        "stop_s": stop,
        "spans_up": len(backends["up"].span_ids),
        "spans_up_unique": len(set(backends["up"].span_ids)),
        "spans_down_live": live["down"],
        "spans_down_total": len(down.span_ids),
        "spans_down_unique": len(set(down.span_ids)),
        "backfill_s": backfill_s,
        "backfill_output": done.stdout.strip().splitlines()[-1:] if done.stdout else [],
        "errors": errors,
    }


def otlp_section(res: dict) -> list[str]:
    base = res["median_ms"]["off"]
    labels = {"off": "capsem, no export", "up": "capsem, export to a backend that is up",
              "down": "capsem, export to a backend down for the middle third"}  # fmt: skip
    rows = [
        "| set-up | call median | × no export | call p99 | TTFB median | shutdown |",
        "|---|---|---|---|---|---|",
    ]
    for setup in SETUPS:
        median = res["median_ms"][setup]
        rows.append(f"| {labels[setup]} | {median:.2f} ms | {median / base:.2f}× | {res['p99_ms'][setup]:.2f} ms | "
                    f"{res['ttfb_ms'][setup]:.2f} ms | {res['stop_s'][setup]:.1f} s |")  # fmt: skip
    return [
        "## Live OTLP export beside the agent",
        "",
        f"{res['calls']} streamed calls ({res['spec']}) through each capsem mitmdump, interleaved call by call. "
        f"Spans: {res['spans_up']} reached the backend that stayed up ({res['spans_up_unique']} distinct); the one "
        f"that was down got {res['spans_down_live']} live and {res['spans_down_total']} after `capsem export otlp` "
        f"({res['spans_down_unique']} distinct, backfill {res['backfill_s']:.1f} s). Errors: {res['errors'] or 'none'}.",
        "",
        *rows,
        "",
    ]
