"""`capsem run` around a scripted agent (the real anthropic SDK, configured only by environment)."""

from __future__ import annotations

import json
import sys

from tests.cli.conftest import run
from tests.conftest import rows

AGENT = """
import os, sys, anthropic, pathlib
# The agent knows nothing of capsem: the SDK finds the proxy and CA in its environment.
client = anthropic.Anthropic(api_key="sk-ant-api03-RUNSECRET0000000000000000", max_retries=0)
msg = client.messages.create(model="claude-haiku-4-5", max_tokens=50,
                             messages=[{"role": "user", "content": "hello"}])
pathlib.Path("answer.txt").write_text(msg.content[0].text)
pathlib.Path(".git").mkdir()
pathlib.Path(".git/HEAD").write_text("ref: refs/heads/main")  # .git internals are not recorded
print("proxy", os.environ["HTTPS_PROXY"], "ca", os.environ["NODE_EXTRA_CA_CERTS"])
sys.exit(3)
"""


def test_run_records_the_agent_and_passes_its_exit_code(emu, capsem_home, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    upstream = f"--mode upstream:{emu.proxy_url} --set ssl_verify_upstream_trusted_ca={emu.ca_path}"
    out = run("run", "--workspace", str(workspace), "--mitmdump-args", upstream, "--", sys.executable,
              str(script), code=3)  # fmt: skip
    (ex,) = [e for e in emu.exchanges() if e["expected"].get("protocol")]
    assert (workspace / "answer.txt").read_text() == ex["expected"]["text"]
    (session,) = json.loads(run("list-sessions", "--json"))
    assert session["mode"] == "run" and session["status"] == "stopped" and str(script) in session["command"]
    (call,) = rows(capsem_home / "sessions" / session["id"] / "session.db", "SELECT * FROM model_calls")
    assert call["host"] == "api.anthropic.com" and call["text_content"] == ex["expected"]["text"]
    assert call["process_name"] and call["pid"]
    assert session["id"] in out and "1 model calls" in out
    events = rows(
        capsem_home / "sessions" / session["id"] / "session.db", "SELECT action, path, size FROM fs_events"
    )
    assert {"action": "created", "path": "answer.txt", "size": len(ex["expected"]["text"].encode())} in events
    assert session["total_file_events"] == len(events)


def test_run_reports_a_missing_command(capsem_home):
    assert "cannot start" in run("run", "--", "definitely-not-a-command-xyz", code=1)


def test_run_help():
    assert "Example" in run("run", "--help")
