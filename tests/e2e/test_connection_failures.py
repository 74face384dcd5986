"""A connection that never reaches the provider leaves a trace (issue 18, point 1).

`capsem run` around an agent using the real anthropic and openai SDKs, with a real mitmdump in
regular mode (no upstream): one client points at a host that does not resolve, one at a closed
port, one at an HTTPS server whose certificate mitmproxy does not trust. The agent sees
`APIConnectionError`s; capsem records each attempt once, counts it, shows it in the run summary and
`inspect-session --strict` fails on it.
"""

from __future__ import annotations

import json
import socket
import sys

from tests.cli.conftest import run
from tests.conftest import rows

AGENT = """
import sys, anthropic, openai
msgs = [{"role": "user", "content": "hi"}]
try:
    anthropic.Anthropic(api_key="sk-ant-api03-NOROUTE0000000000000000", base_url="https://api.anthropic.invalid",
                        max_retries=0).messages.create(model="claude-haiku-4-5", max_tokens=10, messages=msgs)
except anthropic.APIConnectionError as exc:
    print("anthropic:", type(exc).__name__)
for url in sys.argv[1:]:
    try:
        openai.OpenAI(api_key="sk-proj-NOROUTE000000000000000000", base_url=url, max_retries=0).chat.completions.create(
            model="gpt-4.1", messages=msgs)
    except openai.APIError as exc:
        print("openai:", type(exc).__name__)
sys.exit(1)
"""


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_failed_connections_are_recorded_counted_and_reported(emu, capsem_home, tmp_path, monkeypatch):
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    port = closed_port()
    untrusted = f"{emu.https_url}/v1"  # the emulator's own CA, which mitmproxy does not trust here
    monkeypatch.setenv("COLUMNS", "80")
    out = run("run", "--", sys.executable, str(script), f"https://127.0.0.1:{port}/v1", untrusted, code=1)
    (session,) = json.loads(run("list-sessions", "--json"))
    db = capsem_home / "sessions" / session["id"] / "session.db"
    net = rows(db, "SELECT method, domain, port, decision, error FROM net_events ORDER BY id")
    assert [(r["method"], r["domain"], r["decision"]) for r in net] == [
        ("CONNECT", "api.anthropic.invalid", "error"),
        ("CONNECT", "127.0.0.1", "error"),
        ("POST", "127.0.0.1", "error"),
    ]
    assert net[0]["error"].startswith("DNS lookup failed for api.anthropic.invalid: ")
    assert net[1]["error"].startswith(f"connection refused by 127.0.0.1:{port}: ")
    assert "Certificate verify failed" in net[2]["error"]
    assert session["error_requests"] == 3 and session["exit_code"] == 1
    # the run summary counts and shows them
    assert "3 HTTP flows" in out and "3 errors" in out and "exit 1" in out
    words = " ".join(out.split())
    assert (
        "CONNECT api.anthropic.invalid:443 DNS lookup failed for api.anthropic.invalid: [Errno -2]" in words
    )
    assert f"CONNECT 127.0.0.1:{port} connection refused by 127.0.0.1:{port}" in words
    assert all(len(line) <= 80 for line in out.splitlines() if not line.startswith("database  ")), out
    # inspect-session reports them as errors
    report = run("inspect-session", "--strict", code=1)
    assert (
        "error   failed requests: 3 requests failed: CONNECT api.anthropic.invalid:443: DNS lookup failed"
        in (" ".join(report.split()).replace("error failed", "error   failed"))
    )
