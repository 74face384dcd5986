"""What holding tool calls costs (issue 36): the delay a tool call's arrival gets after its last
argument byte, and the first byte, through mitmdump alone, capsem with no tool rule, and capsem
with one tool rule (`tool_args: {command: {shell: "rm -rf"}}`, which the harmless call does not
match: it is held, decided allowed and released unchanged, the common case).

An upstream on loopback streams an Anthropic answer: some text, then a `Bash` tool call whose
arguments come in 20 deltas 2 ms apart, its `content_block_stop` (the call is complete), then
the end of the message. The upstream notes when it wrote the call's last event; the client,
in the same process (one monotonic clock), when those bytes arrived: the difference is the
delay. `runs` answers per scenario, interleaved; medians and 95th percentiles.
"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from benchmarks.proxies import TOOL_RULE, Scenario, start_proxy

SCENARIOS = (
    Scenario("stream", "mitmdump, streaming", ("--set", "stream_large_bodies=1")),
    Scenario("capsem", "capsem, no tool rule", addon=True),
    Scenario("rule", "capsem, one tool rule", addon=True, config=TOOL_RULE),
)
MARK = b'"content_block_stop","index":1'
"""The tool block's stop: the call is complete when these bytes arrive."""


def _event(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _answer() -> list[tuple[bytes, float]]:
    """(event, pause before it in seconds) of the streamed answer."""
    arguments = json.dumps({"command": "ls -la " + "x" * 200})
    pieces = [
        arguments[i : i + len(arguments) // 20 + 1]
        for i in range(0, len(arguments), len(arguments) // 20 + 1)
    ]
    usage = {"input_tokens": 10, "output_tokens": 50}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
               "stop_reason": None, "usage": usage}  # fmt: skip
    events = [(_event("message_start", {"type": "message_start", "message": message}), 0.0),
              (_event("content_block_start", {"type": "content_block_start", "index": 0,
                                              "content_block": {"type": "text", "text": ""}}), 0.0)]  # fmt: skip
    events += [(_event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": "Let me look. "}}), 0.002)
               for _ in range(5)]  # fmt: skip
    events += [(_event("content_block_stop", {"type": "content_block_stop", "index": 0}), 0.0),
               (_event("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
                   "type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}}), 0.002)]  # fmt: skip
    events += [(_event("content_block_delta", {"type": "content_block_delta", "index": 1,
                                               "delta": {"type": "input_json_delta", "partial_json": p}}), 0.002)
               for p in pieces]  # fmt: skip
    events += [(_event("content_block_stop", {"type": "content_block_stop", "index": 1}), 0.002),
               (_event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                                         "usage": usage}), 0.02),
               (_event("message_stop", {"type": "message_stop"}), 0.0)]  # fmt: skip
    return events


SENT_AT: dict[str, float] = {}
"""Run key -> when the upstream wrote the tool call's last event."""


class _Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        key = self.headers.get("x-run", "")
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event, pause in _answer():
            if pause:
                time.sleep(pause)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            if MARK in event:
                SENT_AT[key] = time.perf_counter()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


def _one(proxy_port: int, upstream_port: int, key: str) -> tuple[float, float]:
    """(first byte ms after the request, ms from the call's last event written to its arrival)."""
    conn = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=30)
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    started = time.perf_counter()
    conn.request("POST", f"http://127.0.0.1:{upstream_port}/v1/messages", body,
                 {"content-type": "application/json", "x-run": key, "anthropic-version": "2023-06-01"})  # fmt: skip
    response = conn.getresponse()
    first = arrived = None
    seen = b""
    while True:
        data = response.read1(65536)
        if not data:
            break
        now = time.perf_counter()
        first = first if first is not None else now
        seen += data
        if arrived is None and MARK in seen:
            arrived = now
    conn.close()
    assert first is not None and arrived is not None, seen[-300:]
    return (first - started) * 1000, (arrived - SENT_AT[key]) * 1000


def run_tool_hold(runs: int, workdir: Path, *, log: Callable[[str], None] = print) -> dict:
    """First byte and tool-call arrival delay per scenario (ms, medians and p95 of `runs` answers)."""
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    proxies = {}
    try:
        for scenario in SCENARIOS:
            proxies[scenario.key] = start_proxy(scenario, workdir / scenario.key)
        first: dict[str, list[float]] = {s.key: [] for s in SCENARIOS}
        delay: dict[str, list[float]] = {s.key: [] for s in SCENARIOS}
        for i in range(runs + 3):
            for scenario in SCENARIOS:
                f, d = _one(proxies[scenario.key].port, upstream.server_port, f"{scenario.key}-{i}")
                if i >= 3:  # the first answers warm up connections, imports and caches
                    first[scenario.key].append(f)
                    delay[scenario.key].append(d)
    finally:
        for proxy in proxies.values():
            proxy.stop()
        upstream.shutdown()

    def summary(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        return {
            "median": statistics.median(ordered),
            "p95": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))],
        }

    result = {"runs": runs, "labels": {s.key: s.label for s in SCENARIOS},
              "first_byte_ms": {k: summary(v) for k, v in first.items()},
              "arrival_delay_ms": {k: summary(v) for k, v in delay.items()}}  # fmt: skip
    for key, label in result["labels"].items():
        log(f"  {label}: first byte {result['first_byte_ms'][key]['median']:.2f} ms, "
            f"tool call {result['arrival_delay_ms'][key]['median']:.3f} ms after its last byte")  # fmt: skip
    return result


def tool_hold_section(result: dict) -> list[str]:
    """The markdown of this suite."""
    labels, first, delay = result["labels"], result["first_byte_ms"], result["arrival_delay_ms"]
    added = delay["rule"]["median"] - delay["capsem"]["median"]
    return [
        "## Holding tool calls (issue 36)",
        "",
        f"{result['runs']} streamed Anthropic answers per scenario, interleaved: text, then a `Bash` call whose "
        "arguments come in 20 deltas 2 ms apart. Delay: from the upstream writing the call's last event to the "
        "client receiving it (one process, one clock).",
        "",
        "| scenario | first byte, median ms | p95 | tool call's delay, median ms | p95 |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {labels[k]} | {first[k]['median']:.2f} | {first[k]['p95']:.2f} | {delay[k]['median']:.3f} | "
            f"{delay[k]['p95']:.3f} |"
            for k in labels
        ),
        "",
        f"One tool rule adds {added:.3f} ms (median) to the call's arrival after its last argument byte "
        f"(goal ≤ 1 ms); with no tool rule capsem holds nothing.",
    ]
