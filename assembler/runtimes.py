"""Which runtime an agent runs on, which of `capsem run`'s variables it reads, and a probe that
proves the runtime trusts mitmproxy's CA (for `capsem doctor -- AGENT…`).

The most common trouble with a recording proxy is an agent that does not trust its CA or does not
use the proxy, and each runtime reads its own variables: Node adds `NODE_EXTRA_CA_CERTS` to its
built-in CAs, Python's `ssl` and httpx read `SSL_CERT_FILE` (requests `REQUESTS_CA_BUNDLE`), Codex
(Rust) reads `CODEX_CA_CERTIFICATE` then `SSL_CERT_FILE`, Go `SSL_CERT_FILE`, curl
`CURL_CA_BUNDLE`. `runtime_of` tells the runtime from the command (a known agent, the name of a
runtime, the script's `#!` line, or markers in a native binary); `probe` makes one HTTPS request
through the proxy with that runtime, with exactly the environment `capsem run` gives the agent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["node", "python", "rust", "go", "curl", "unknown"]

PROBE_URL = "https://api.openai.com/v1/chat/completions"
"""Where a probe sends its one request (through the proxy; `capsem doctor` sends it to its emulator)."""
PROBE_BODY = json.dumps({"model": "gpt-4.1", "messages": [{"role": "user", "content": "capsem doctor"}]})
PROBE_AGENT = "capsem-doctor"
"""The user-agent of every probe request (`capsem-doctor <runtime>`), to find it in the recording."""
PROBE_TIMEOUT = 30.0
"""Seconds a probe may take (a Go probe compiles first: three times that)."""

LABELS: dict[Kind, str] = {"node": "Node.js", "python": "Python", "rust": "Rust", "go": "Go", "curl": "curl",
                           "unknown": "unknown"}  # fmt: skip

READS: dict[Kind, tuple[tuple[str, str], ...]] = {
    "node": (
        ("HTTPS_PROXY", "used by the agent's own proxy support (Claude Code, Gemini CLI); Node's fetch and "
                        "https use it only with NODE_USE_ENV_PROXY=1, from Node 24"),
        ("NODE_USE_ENV_PROXY", "Node 24 and later: use HTTPS_PROXY"),
        ("NODE_EXTRA_CA_CERTS", "added to Node's built-in CAs; read from the environment at start, so "
                                "Claude Code ignores it in settings.json"),
    ),
    "python": (
        ("HTTPS_PROXY", "urllib, requests, httpx"),
        ("SSL_CERT_FILE", "the ssl module's default context, httpx"),
        ("REQUESTS_CA_BUNDLE", "requests"),
    ),
    "rust": (
        ("HTTPS_PROXY", "reqwest"),
        ("CODEX_CA_CERTIFICATE", "Codex CLI"),
        ("SSL_CERT_FILE", "Codex when CODEX_CA_CERTIFICATE is unset; OpenSSL, rustls-native-certs"),
    ),
    "go": (("HTTPS_PROXY", "net/http"), ("SSL_CERT_FILE", "crypto/x509 on Linux")),
    "curl": (("https_proxy", "curl, which reads HTTPS_PROXY too"), ("CURL_CA_BUNDLE", "curl")),
    "unknown": (),
}  # fmt: skip
"""Per runtime, the variables of `capsem run` it reads, and who reads each."""

KNOWN_AGENTS: dict[str, tuple[Kind, str]] = {
    "claude": ("node", "Claude Code runs on Node.js (or a Bun build that reads the same variables)"),
    "gemini": ("node", "Gemini CLI runs on Node.js"),
    "codex": ("rust", "Codex CLI is a Rust binary (its npm launcher only starts it)"),
    "aider": ("python", "aider is a Python program"),
}
_RUNTIME_NAMES: dict[str, Kind] = {"node": "node", "nodejs": "node", "curl": "curl", "go": "go"}
_GO_MARKER = b"\xff Go buildinf:"
_RUST_MARKER = b"/rustc/"
_SCAN_LIMIT = 256 * 1024 * 1024


@dataclass(frozen=True)
class Runtime:
    kind: Kind
    why: str
    """How it was told: `#!/usr/bin/env node in /usr/bin/claude`, `a Go binary`..."""
    executable: str | None = None
    """What runs the probe: the interpreter (node, python), curl, or the Go toolchain; None: none found."""


class AgentNotFound(LookupError):
    """The agent command is not on PATH."""


def runtime_of(command: list[str]) -> Runtime:
    """The runtime of `command` (the agent's command line, as given to `capsem run`).

    Raises:
        AgentNotFound: the command is not on PATH (nor a path to a file).
    """
    path = shutil.which(command[0])
    if path is None:
        raise AgentNotFound(f"{command[0]!r} is not on PATH")
    name = Path(command[0]).name
    if name in KNOWN_AGENTS:
        kind, why = KNOWN_AGENTS[name]
        return Runtime(kind, why, _probe_executable(kind, path))
    if name.startswith(("python", "pypy")):
        return Runtime("python", path, path)
    if name in _RUNTIME_NAMES:
        kind = _RUNTIME_NAMES[name]
        return Runtime(kind, path, path if kind != "go" else shutil.which("go"))
    real = os.path.realpath(path)
    with open(real, "rb") as f:
        head = f.read(256)
    if head.startswith(b"#!"):
        return _script(real, head)
    if head.startswith(b"\x7fELF") or head[:4] in (b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe"):
        found = _markers(real)
        if found is not None:
            return Runtime(found, f"{real} is a {LABELS[found]} binary", _probe_executable(found, None))
        return Runtime("unknown", f"{real} is a native binary of no runtime capsem can tell")
    return Runtime("unknown", f"{real} is neither a script with #! nor a binary capsem can tell")


def _script(path: str, head: bytes) -> Runtime:
    """A script: its runtime from the `#!` line (`#!/usr/bin/env node`, `#!/usr/bin/python3 -u`)."""
    line = head[2:].split(b"\n", 1)[0].decode(errors="replace").strip()
    words = line.split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    interpreter = words[0] if words else ""
    name = Path(interpreter).name
    shown = f"#!{line} in {path}"
    if name.startswith(("python", "pypy")):
        return Runtime("python", shown, shutil.which(interpreter))
    if name in ("node", "nodejs"):
        return Runtime("node", shown, shutil.which(interpreter))
    return Runtime("unknown", f"{shown}: a {name or 'shell'} script; the program it starts decides")


def _markers(path: str) -> Kind | None:
    """Go or Rust, from markers their linkers leave in a binary (Go's build info; rustc's paths)."""
    rust = False
    tail = b""
    with open(path, "rb") as f:
        for _ in range(_SCAN_LIMIT // (1 << 20)):
            block = f.read(1 << 20)
            if not block:
                break
            window = tail + block
            if _GO_MARKER in window:
                return "go"
            rust = rust or _RUST_MARKER in window
            tail = block[-16:]
    return "rust" if rust else None


def _probe_executable(kind: Kind, agent_path: str | None) -> str | None:
    """What runs a probe of `kind`: node, python (the agent's own when it is a script), curl, go."""
    if kind == "node":
        return shutil.which("node") or shutil.which("nodejs")
    if kind == "python":
        if agent_path is not None:
            with open(os.path.realpath(agent_path), "rb") as f:
                head = f.read(256)
            if head.startswith(b"#!"):
                return _script(agent_path, head).executable or shutil.which("python3")
        return shutil.which("python3")
    if kind in ("curl", "go"):
        return shutil.which(kind)
    return None


# --- probes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeResult:
    trusted: bool | None
    """True: the HTTPS request through the proxy succeeded; False: it failed; None: no probe ran."""
    detail: str
    """What the runtime said (`node v20.20.2: HTTP 200`, its TLS error, or why nothing ran)."""


_NODE = r"""
const http = require('http'), tls = require('tls');
const target = new URL(process.argv[1]), proxy = new URL(process.env.HTTPS_PROXY), body = process.argv[2];
const done = (msg, code) => { console.log(`node ${process.version}: ${msg}`); process.exit(code); };
// A CONNECT tunnel by hand: Node < 24 ignores HTTPS_PROXY, and trust is what is checked here.
http.request({host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: `${target.hostname}:443`})
  .on('connect', (res, socket) => {
    if (res.statusCode !== 200) done(`the proxy refused the tunnel: ${res.statusCode}`, 1);
    const s = tls.connect({socket, servername: target.hostname}, () => s.write(
      `POST ${target.pathname} HTTP/1.1\r\nHost: ${target.hostname}\r\nUser-Agent: ${process.argv[3]}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n` +
      body));
    let head = '';
    s.on('data', (d) => { head += d; });
    s.on('end', () => done(`HTTP ${head.split(' ')[1]}`, head.startsWith('HTTP/1.1 200') ? 0 : 1));
    s.on('error', (e) => done(`${e.code || ''} ${e.message}`.trim(), 1));
  })
  .on('error', (e) => done(`cannot reach the proxy: ${e.message}`, 1))
  .end();
"""

_PYTHON = r"""
import json, platform, sys, urllib.request
url, body, agent = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
headers = {"content-type": "application/json", "user-agent": agent}
said, ok = [], True
def attempt(name, send):
    global ok
    try:
        said.append(f"{name} HTTP {send()}")
    except Exception as exc:
        ok = False
        said.append(f"{name} {type(exc).__name__}: {exc}")
def by_urllib():
    with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=20) as r:
        return r.status
attempt("urllib", by_urllib)
try:
    import httpx
except ImportError:
    pass
else:
    attempt("httpx", lambda: httpx.post(url, content=body, headers=headers, timeout=20).raise_for_status().status_code)
try:
    import requests
except ImportError:
    pass
else:
    attempt("requests", lambda: requests.post(url, data=body, headers=headers, timeout=20).status_code)
print(f"python {platform.python_version()}: " + ", ".join(said))
sys.exit(0 if ok else 1)
"""

_GO = """package main

import (
\t"fmt"
\t"net/http"
\t"os"
\t"runtime"
\t"strings"
)

func main() {
\treq, _ := http.NewRequest("POST", os.Args[1], strings.NewReader(os.Args[2]))
\treq.Header.Set("Content-Type", "application/json")
\treq.Header.Set("User-Agent", os.Args[3])
\tresp, err := http.DefaultClient.Do(req)
\tif err != nil {
\t\tfmt.Printf("%s: %v\\n", runtime.Version(), err)
\t\tos.Exit(1)
\t}
\tfmt.Printf("%s: HTTP %d\\n", runtime.Version(), resp.StatusCode)
\tif resp.StatusCode != 200 {
\t\tos.Exit(1)
\t}
}
"""


def probe(runtime: Runtime, env: Mapping[str, str]) -> ProbeResult:
    """One HTTPS request to `PROBE_URL` through the proxy in `env` (`capsem run`'s variables), made
    by `runtime` (Node, Python with urllib and httpx/requests when installed, curl, Go)."""
    if runtime.kind in ("rust", "unknown"):
        why = ("no Rust HTTP client ships with the toolchain, so there is nothing to probe with"
               if runtime.kind == "rust" else "no runtime to probe with")  # fmt: skip
        return ProbeResult(None, why)
    if runtime.executable is None:
        return ProbeResult(None, f"{LABELS[runtime.kind]} not found on PATH")
    agent = f"{PROBE_AGENT} {runtime.kind}"
    args = [PROBE_URL, PROBE_BODY, agent]
    with tempfile.TemporaryDirectory(prefix="capsem-probe-") as tmp:
        timeout = PROBE_TIMEOUT
        if runtime.kind == "node":
            command = [runtime.executable, "-e", _NODE, *args]
        elif runtime.kind == "python":
            command = [runtime.executable, "-c", _PYTHON, *args]
        elif runtime.kind == "curl":
            command = [runtime.executable, "-sS", "-o", os.devnull, "-w", "curl: HTTP %{http_code}", "--max-time", "20",
                       "-A", agent, "-H", "content-type: application/json", "--data", PROBE_BODY, PROBE_URL]  # fmt: skip
        else:
            source = Path(tmp) / "probe.go"
            source.write_text(_GO)
            command, timeout = [runtime.executable, "run", str(source), *args], PROBE_TIMEOUT * 3
        try:
            done = subprocess.run(command, env=dict(env), capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, cwd=tmp)  # fmt: skip
        except subprocess.TimeoutExpired:
            return ProbeResult(False, f"{runtime.executable} did not answer within {timeout:.0f} s")
        except OSError as exc:
            return ProbeResult(False, f"cannot start {runtime.executable}: {exc.strerror or exc}")
    errors = done.stderr.strip().splitlines() or [""]
    error = errors[0] if runtime.kind == "curl" else errors[-1]  # curl's first line; a traceback's last
    said = " ".join(f"{done.stdout.strip()} {error}".split()) or f"exit {done.returncode}"
    ok = done.returncode == 0 and (runtime.kind != "curl" or said.endswith("HTTP 200"))
    return ProbeResult(ok, said)
