"""The new-connection suite: time to first byte when every request opens a new TLS connection.

Agents open new TLS connections through the proxy all the time, and whatever the addon does
when a client connects (capsem looks up the client's process) lands on the handshake. Here each
request opens a new TCP connection to the proxy, sends CONNECT, does a full TLS handshake with
mitmproxy's certificate, sends one small streamed Anthropic request and reads the response to
its end. The upstream is capsem's emulator over TLS in its own process (`python -m
capsem.emulator`), which every mitmdump trusts via `ssl_verify_upstream_trusted_ca`.

Scenarios, one connection at a time, interleaved (the order rotates every round):
(1) no proxy, (2) streaming mitmdump, (5) mitmdump + capsem, and (5) with the client-process
lookup switched off by `no_process_lookup.py` (a benchmark-only stub), which shows what the
lookup costs apart from the rest of the addon.

A micro-benchmark times `ProcessResolver.resolve` (addons/proxy/process.py) on real connections of a
child process (see `run_resolve`), beside `psutil.net_connections`, the whole-table walk the
resolver used to make per connection.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from addons.proxy.process import ProcessResolver, all_pids, holds_socket
from benchmarks.client import request_bytes
from benchmarks.proxies import Scenario, start_proxy
from benchmarks.streaming import percentile
from benchmarks.upstream import StreamSpec
from capsem.mitm import Mitmdump

_TRUST = ("--set", "ssl_verify_upstream_trusted_ca={workdir}/upstream-ca.pem")
_STUB = Path(__file__).resolve().parent / "no_process_lookup.py"
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("direct", "(1) no proxy", proxied=False),
    Scenario("stream", "(2) mitmdump, streaming", ("--set", "stream_large_bodies=1", *_TRUST)),
    Scenario("capsem", "(5) mitmdump + capsem", _TRUST, addon=True),
    Scenario(
        "capsem_nolookup", "(5) capsem, process lookup off (stub)", (*_TRUST, "-s", str(_STUB)), addon=True
    ),
)
BASELINE = "stream"
GOAL_TTFB_MS = 2.0
"""capsem (5) against streaming mitmdump (2): median TTFB of a new TLS connection, in ms."""
_REQUEST = StreamSpec(1, 10)  # the emulator ignores it; request_bytes wants one


@dataclass
class Connection:
    """What one new connection saw, in ms from opening the TCP connection."""

    tls_ms: float = 0.0
    """Until the TLS handshake with the proxy (or upstream) is done."""
    ttfb_ms: float = 0.0
    """Until the first byte of the HTTP response."""
    total_ms: float = 0.0
    """Until the end of the (chunked) response body."""
    error: str | None = None


class TlsUpstream:
    """`python -m capsem.emulator` in its own process; its TLS port and CA."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "capsem.emulator"], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        try:
            ready = json.loads(line)
        except ValueError:
            self.process.kill()
            raise RuntimeError(f"emulator did not start (said {line!r})") from None
        self.port = int(ready["https_url"].rsplit(":", 1)[1])
        self.ca_path = Path(ready["ca_path"])

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def _read_head(sock: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        piece = sock.recv(4096)
        if not piece:
            raise ConnectionError(f"closed during the CONNECT answer: {head!r}")
        head += piece
    return head


def open_and_fetch(upstream_port: int, proxy_port: int | None, context: ssl.SSLContext) -> Connection:
    """One request on a new TLS connection (tunnelled through the proxy when given), timed."""
    result = Connection()
    started = time.perf_counter()
    sock: socket.socket | None = None
    try:
        sock = socket.create_connection(("127.0.0.1", proxy_port or upstream_port), timeout=30)
        if proxy_port:
            target = f"127.0.0.1:{upstream_port}"
            sock.sendall(f"CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n\r\n".encode())
            head = _read_head(sock)
            if not head.startswith(b"HTTP/1.1 200"):
                raise ConnectionError(f"CONNECT refused: {head[:60]!r}")
        sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
        result.tls_ms = (time.perf_counter() - started) * 1000
        sock.sendall(request_bytes(upstream_port, _REQUEST, absolute=False))
        tail = sock.recv(1)
        if not tail:
            raise ConnectionError("closed before any response byte")
        result.ttfb_ms = (time.perf_counter() - started) * 1000
        while not tail.endswith(b"0\r\n\r\n"):  # the last chunk of a chunked body
            piece = sock.recv(65536)
            if not piece:
                raise ConnectionError("closed before the end of the response")
            tail = tail[-8:] + piece
        result.total_ms = (time.perf_counter() - started) * 1000
    except (OSError, ConnectionError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if sock is not None:
            sock.close()
    return result


def run_newconn(connections: int, workdir: Path, *, log: Callable[[str], None] = print) -> dict:
    """`connections` new TLS connections per scenario, interleaved; the raw per-connection times."""
    workdir.mkdir(parents=True, exist_ok=True)
    upstream = TlsUpstream()
    shutil.copy(upstream.ca_path, workdir / "upstream-ca.pem")
    proxies: dict[str, Mitmdump] = {}
    runs: dict[str, list[Connection]] = {s.key: [] for s in SCENARIOS}
    try:
        for scenario in SCENARIOS:
            if scenario.proxied:
                proxies[scenario.key] = start_proxy(scenario, workdir)
        mitm_ca = next(iter(proxies.values())).ca_cert
        contexts = {
            s.key: ssl.create_default_context(cafile=str(mitm_ca if s.proxied else upstream.ca_path))
            for s in SCENARIOS
        }

        def one(scenario: Scenario) -> Connection:
            proxy = proxies.get(scenario.key)
            conn = open_and_fetch(upstream.port, proxy.port if proxy else None, contexts[scenario.key])
            time.sleep(0.01)  # let the proxy finish the flow's work before the next connection
            return conn

        for scenario in SCENARIOS:  # the first connections pay for imports and certificates
            for _ in range(3):
                one(scenario)
        for i in range(connections):
            shift = i % len(SCENARIOS)
            for scenario in SCENARIOS[shift:] + SCENARIOS[:shift]:
                runs[scenario.key].append(one(scenario))
        for scenario in SCENARIOS:
            log(_line(scenario, runs[scenario.key]))
    finally:
        for proxy in proxies.values():
            proxy.stop(timeout=60)
        upstream.stop()
    return {
        "connections": connections,
        "processes": len(psutil.pids()),
        "runs": {key: [vars(c) for c in conns] for key, conns in runs.items()},
    }


def summary(conns: list[dict]) -> dict:
    """Median and p90 of TTFB, median TLS and total time, over the connections without error."""
    ok = [c for c in conns if not c["error"]]
    if not ok:
        return {"n": 0, "errors": sorted({c["error"] for c in conns})}
    ttfb = [c["ttfb_ms"] for c in ok]
    return {
        "n": len(ok),
        "ttfb_p50": statistics.median(ttfb),
        "ttfb_p90": percentile(ttfb, 0.9),
        "tls_p50": statistics.median(c["tls_ms"] for c in ok),
        "total_p50": statistics.median(c["total_ms"] for c in ok),
        "errors": sorted({c["error"] for c in conns if c["error"]}),
    }


def _line(scenario: Scenario, conns: list[Connection]) -> str:
    s = summary([vars(c) for c in conns])
    if not s["n"]:
        return f"  {scenario.key:16} ERRORS: {s['errors']}"
    err = f"  ERRORS: {s['errors']}" if s["errors"] else ""
    return (f"  {scenario.key:16} ttfb p50 {s['ttfb_p50']:6.1f} ms  p90 {s['ttfb_p90']:6.1f} ms  "
            f"tls p50 {s['tls_p50']:6.1f} ms  total p50 {s['total_p50']:6.1f} ms{err}")  # fmt: skip


# -- ProcessResolver.resolve, in-process ----------------------------------------------------

_CHILD = """
import socket, sys
port, held = int(sys.argv[1]), []
for _ in sys.stdin:  # one new connection per line, its local port printed; all held until EOF
    held.append(socket.create_connection(("127.0.0.1", port)))
    print(held[-1].getsockname()[1], flush=True)
"""


def run_resolve(repeat: int = 20) -> dict:
    """Median µs of `resolve()` on a child process's new connections, and of what it replaces.

    Each repetition opens four connections in the child: one for a new resolver (cold), one
    for the same resolver by port, one with the server's address too, one for a resolver
    without netlink (/proc/net/tcp*). Then: every fd directory of /proc read once (the cost
    when the owner is found last), and `psutil.net_connections` (the old lookup's walk).
    """
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    server = listener.getsockname()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(server[1])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdin is not None and child.stdout is not None
    accepted: list[socket.socket] = []
    times: dict[str, list[float]] = {}
    dirs: dict[str, list[int]] = {}

    def new_connection() -> tuple[str, int]:
        child.stdin.write("\n")  # type: ignore[union-attr]
        child.stdin.flush()  # type: ignore[union-attr]
        port = int(child.stdout.readline())  # type: ignore[union-attr]
        accepted.append(listener.accept()[0])
        return ("127.0.0.1", port)

    def timed(what: str, resolver: ProcessResolver, *, with_server: bool = False) -> None:
        peer = new_connection()
        before = resolver.fd_dirs_scanned
        started = time.perf_counter()
        name, pid = resolver.resolve(peer, server if with_server else None)
        times.setdefault(what, []).append(time.perf_counter() - started)
        dirs.setdefault(what, []).append(resolver.fd_dirs_scanned - before)
        if pid != child.pid:
            raise RuntimeError(f"resolve({peer}) gave {(name, pid)}, not the child {child.pid}")

    no_netlink = ProcessResolver(netlink=False)
    try:
        no_netlink.resolve(new_connection())
        for _ in range(repeat):
            resolver = ProcessResolver()
            timed("cold", resolver)
            timed("warm", resolver)
            timed("warm_server", resolver, with_server=True)
            resolver.close()
            timed("warm_proc_net", no_netlink)
            pids = all_pids()
            started = time.perf_counter()
            for pid in pids:
                holds_socket(pid, "socket:[0]")
            times.setdefault("full_scan", []).append(time.perf_counter() - started)
            dirs.setdefault("full_scan", []).append(len(pids))
            started = time.perf_counter()
            psutil.net_connections(kind="tcp")
            times.setdefault("net_connections", []).append(time.perf_counter() - started)
    finally:
        no_netlink.close()
        child.stdin.close()
        child.wait(10)
        child.stdout.close()
        for sock in accepted:
            sock.close()
        listener.close()
    return {
        "repeat": repeat,
        "processes": len(psutil.pids()),
        "us": {what: statistics.median(ts) * 1e6 for what, ts in times.items()},
        "fd_dirs": {what: statistics.median(ds) for what, ds in dirs.items()},
    }
