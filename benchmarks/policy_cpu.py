"""Per-request CPU of the proxy when no rule matches (issue 33's goal: deciding on the canonical
request, MCP by parsing, must not raise it).

Plain keep-alive requests that are neither model calls nor MCP (a JSON POST and a GET to an
ordinary API on loopback) go through three mitmdumps, interleaved, `reps` times each: streaming
mitmdump (the floor), mitmdump + capsem with no policy, and mitmdump + capsem with a policy of
rules none of which matches (host globs and CIDR ranges, paths, methods, MCP tools, `shell` and
`any` argument matchers). CPU is that of each mitmdump and every process it started (capsem's
recorder), per request, median of the runs.
"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from benchmarks.proxies import ProcessMeter, Scenario, start_proxy, wait_idle

RULES = """policy:
  rules:
    - {name: no-paste, action: deny, host: "*.pastebin.com"}
    - {name: no-meta, action: deny, host: 169.254.0.0/16}
    - {name: no-internal, action: deny, host: 10.0.0.0/8}
    - {name: no-admin, action: deny, path: "/admin/*"}
    - {name: no-delete, action: warn, method: DELETE}
    - {name: no-rm, action: deny, mcp_args: {command: {shell: "rm -rf"}}}
    - {name: no-secrets, action: ask, mcp_args: {"*": {any: "*id_rsa*"}}}
    - {name: no-drop, action: deny, mcp_tool: "drop_*"}
"""
SCENARIOS = (
    Scenario("stream", "mitmdump, streaming", ("--set", "stream_large_bodies=1")),
    Scenario("capsem", "capsem, no policy", addon=True),
    Scenario("rules", "capsem, 8 rules, none matches", addon=True),
)
BODY = json.dumps({"items": [{"id": i, "name": f"item {i}", "tags": ["a", "b"]} for i in range(40)]}).encode()


class _Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "11")
        self.end_headers()
        self.wfile.write(b'{"ok":true}')

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


def _requests(proxy_port: int, upstream_port: int, count: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=30)
    url = f"http://127.0.0.1:{upstream_port}/api/items"
    for i in range(count):
        if i % 2:
            conn.request("GET", f"{url}?page={i}")
        else:
            conn.request("POST", url, BODY, {"content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
    conn.close()


def run_policy_cpu(requests: int, reps: int, workdir: Path, *, log: Callable[[str], None] = print) -> dict:
    """µs of CPU per request for each scenario (median of `reps` interleaved runs)."""
    api = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    per_request: dict[str, list[float]] = {s.key: [] for s in SCENARIOS}
    try:
        for rep in range(reps):
            for scenario in SCENARIOS:
                folder = workdir / f"{scenario.key}-{rep}"
                (folder / "capsem-home").mkdir(parents=True)
                if scenario.key == "rules":
                    (folder / "capsem-home" / "config.yaml").write_text(RULES)
                proxy = start_proxy(scenario, folder)
                try:
                    _requests(proxy.port, api.server_port, 50)  # warm: connections, imports, caches
                    wait_idle(proxy.process.pid)
                    meter = ProcessMeter(proxy.process.pid)
                    meter.start()
                    _requests(proxy.port, api.server_port, requests)
                    wait_idle(proxy.process.pid)
                    usage = meter.stop()
                finally:
                    proxy.stop()
                per_request[scenario.key].append(usage.cpu_s / requests * 1e6)
                log(f"  {scenario.label}: {per_request[scenario.key][-1]:.0f} µs CPU per request")
    finally:
        api.shutdown()
    medians = {key: statistics.median(values) for key, values in per_request.items()}
    return {"requests": requests, "reps": reps, "us_per_request": medians, "runs": per_request,
            "labels": {s.key: s.label for s in SCENARIOS},
            "rules_over_no_policy": medians["rules"] / medians["capsem"]}  # fmt: skip


def policy_section(result: dict) -> list[str]:
    """The markdown of this suite: µs per request and the ratio the goal is about."""
    us, labels = result["us_per_request"], result["labels"]
    floor = us["stream"]
    ratio = result["rules_over_no_policy"]
    return [
        "## Per-request CPU when no rule matches (issue 33)",
        "",
        f"{result['requests']} keep-alive requests (a 2 KB JSON POST and a GET, alternating: no model call, "
        f"no MCP) per run, medians of {result['reps']} interleaved runs; CPU of mitmdump and its recorder.",
        "",
        "| scenario | µs CPU per request | × streaming mitmdump |",
        "|---|---:|---:|",
        *(f"| {labels[key]} | {value:,.0f} | {value / floor:.2f} |" for key, value in us.items()),
        "",
        f"With 8 rules none of which matches, capsem uses {ratio:.2f}× the CPU per request it uses with no "
        f"policy ({'no measurable rise' if ratio <= 1.05 else 'a rise'}: the goal is ≤ 1.05).",
    ]
