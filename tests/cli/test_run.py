"""`capsem run` around a scripted agent (the real anthropic SDK, configured only by environment)."""

from __future__ import annotations

import itertools
import json
import sys
import threading

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
    assert session["id"] in out and "1 model call," in out and "exit 3" in out and session["exit_code"] == 3
    events = rows(
        capsem_home / "sessions" / session["id"] / "session.db", "SELECT action, path, size FROM fs_events"
    )
    assert {"action": "created", "path": "answer.txt", "size": len(ex["expected"]["text"].encode())} in events
    assert session["total_file_events"] == len(events)  # committed by the recorder before its rollup
    folder = capsem_home / "sessions" / session["id"]
    meta = {r["key"]: r["value"] for r in rows(folder / "session.db", "SELECT * FROM session_meta")}
    assert int(meta["fswatch_feed_seq"]) >= 1 and int(meta["procdiag_feed_seq"]) >= 1  # sent to the recorder
    assert not (folder / "recorder.addr").exists() and not (folder / "recorder.sock").exists()


def test_run_reports_a_missing_command_at_once_like_a_shell(capsem_home, tmp_path):
    """127 as a shell says it, before mitmdump starts: no session is left behind."""
    out = run("run", "--", "definitely-not-a-command-xyz", code=127)
    assert out == "capsem run: definitely-not-a-command-xyz: command not found\n"
    (tmp_path / "notexec.sh").write_text("echo hi\n")
    out = run("run", "--workspace", str(tmp_path), "--", "./notexec.sh", code=126)
    assert "./notexec.sh: permission denied" in out
    assert "no-such.sh: no such file or directory" in run("run", "--", "./no-such.sh", code=127)
    assert not (capsem_home / "sessions").exists() and not (capsem_home / "main.db").exists()


def test_run_refuses_a_bad_session_id_at_once(capsem_home):
    out = run("run", "--mitmdump-args", "--set capsem_session_id=bad", "--", "true", code=1)
    assert "capsem_session_id 'bad' is not YYYYMMDD-HHMMSS-xxxx" in out
    assert not (capsem_home / "sessions").exists()
    assert "No closing quotation" in run("run", "--mitmdump-args", "--mode 'upstream", "--", "true", code=1)


def test_run_says_why_mitmdump_did_not_start(capsem_home, tmp_path):
    """The workspace is watched while mitmdump starts; when it does not, its changes are dropped
    with the session: no session.db is written for them."""
    stop = threading.Event()

    def busy() -> None:
        for n in itertools.count():
            (tmp_path / f"f{n % 5}.txt").write_text(str(n))
            if stop.wait(0.02):
                return

    writer = threading.Thread(target=busy)
    writer.start()
    try:
        out = run("run", "--workspace", str(tmp_path), "--mitmdump-args", "--no-such-mitmdump-flag", "--", "true",
                  code=1)  # fmt: skip
    finally:
        stop.set()
        writer.join()
    assert "mitmdump did not start: it exited with status 1" in out
    assert "unrecognized arguments: --no-such-mitmdump-flag" in out
    assert [p.name for p in (capsem_home / "sessions").glob("*/*")] == ["mitmdump.log"]


def test_run_options_replace_capsems_own():
    from assembler.run import mitmdump_options

    sid, args = mitmdump_options("20260101-000000-abcd", ["agent", "x y"], "--set capsem_mode=ci --anticache")
    assert sid == "20260101-000000-abcd"
    assert args == ["--set", "capsem_session_id=20260101-000000-abcd", "--set", "capsem_command=agent 'x y'",
                    "--set", "capsem_mode=ci", "--anticache"]  # fmt: skip
    sid, args = mitmdump_options(
        "20260101-000000-abcd", ["a"], "--set=capsem_session_id=20261231-235959-0f0f"
    )
    assert sid == "20261231-235959-0f0f" and args.count("--set=capsem_session_id=20261231-235959-0f0f") == 1
    assert "capsem_session_id=20260101-000000-abcd" not in " ".join(args)


def test_run_help():
    assert "Example" in run("run", "--help")


LOOP_AGENT = """
import pathlib, anthropic
# A scripted coding agent: the model asks for a tool, the agent edits the workspace and answers.
client = anthropic.Anthropic(api_key="sk-ant-api03-LOOPSECRET000000000000000", max_retries=0)
tools = [{"name": "write_file", "description": "write a file", "input_schema": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]
messages = [{"role": "user", "content": "write the notes"}]
first = client.messages.create(model="claude-sonnet-4-5", max_tokens=200, tools=tools, messages=messages)
(use,) = [b for b in first.content if b.type == "tool_use"]
notes = pathlib.Path("notes.md")
notes.write_text("draft")
notes.write_text("draft, then final")
pathlib.Path("scratch.tmp").write_text("x")
pathlib.Path("scratch.tmp").unlink()
messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "wrote notes.md"}]}]
final = client.messages.create(model="claude-sonnet-4-5", max_tokens=200, tools=tools, messages=messages)
print("agent done:", final.stop_reason)
"""


def test_run_around_a_tool_loop_agent_checks_every_command(emu, capsem_home, tmp_path):
    """`capsem run` around an agent that runs a tool loop and edits files: session.db, main.db,
    and the output of list-sessions, inspect-session, query-session and cost-report."""
    script = tmp_path / "agent.py"
    script.write_text(LOOP_AGENT)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    upstream = f"--mode upstream:{emu.proxy_url} --set ssl_verify_upstream_trusted_ca={emu.ca_path}"
    out = run(
        "run", "--workspace", str(workspace), "--mitmdump-args", upstream, "--", sys.executable, str(script)
    )
    assert "2 model calls" in out  # (the agent's own stdout goes to the terminal, not to click)
    first, second = [e for e in emu.exchanges() if e["expected"].get("protocol")]
    (session,) = json.loads(run("list-sessions", "--json"))
    sid, db = session["id"], capsem_home / "sessions" / session["id"] / "session.db"

    calls = rows(db, "SELECT id, trace_id, input_tokens, output_tokens, estimated_cost_usd FROM model_calls")
    assert [(c["input_tokens"], c["output_tokens"]) for c in calls] == [
        (e["expected"]["input_tokens"], e["expected"]["output_tokens"]) for e in (first, second)]  # fmt: skip
    assert calls[0]["trace_id"] == calls[1]["trace_id"] is not None
    (tool,) = rows(db, "SELECT call_id, tool_name, model_call_id FROM tool_calls")
    (result,) = rows(db, "SELECT call_id, content_preview, model_call_id FROM tool_responses")
    assert tool == {"call_id": first["expected"]["tool_calls"][0]["call_id"], "tool_name": "write_file",
                    "model_call_id": calls[0]["id"]}  # fmt: skip
    assert result == {
        "call_id": tool["call_id"],
        "content_preview": "wrote notes.md",
        "model_call_id": calls[1]["id"],
    }
    events = {(e["action"], e["path"]) for e in rows(db, "SELECT action, path FROM fs_events")}
    assert {("created", "notes.md"), ("deleted", "scratch.tmp")} <= events
    assert not any(path.startswith(".git/") for _, path in events)

    # main.db: the session's totals and per-model / per-tool rollups
    cost = sum(c["estimated_cost_usd"] for c in calls)
    assert session["status"] == "stopped" and session["mode"] == "run"
    assert session["total_input_tokens"] == sum(c["input_tokens"] for c in calls)
    assert session["total_tool_calls"] == 1 and session["total_file_events"] == len(
        rows(db, "SELECT id FROM fs_events")
    )
    assert abs(session["total_estimated_cost"] - cost) < 1e-12

    # every command's output
    listed = run("list-sessions")
    assert f"{sid}*" in listed and "stopped" in listed and f"${cost:.4f}" in listed
    inspected = run("inspect-session", sid, "--strict")
    assert "no problems found" in inspected and "claude-sonnet-4-5" in inspected and "write_file" in inspected
    queried = json.loads(run("query-session", "SELECT tool_name, COUNT(*) AS n FROM tool_calls GROUP BY 1", sid,
                             "--format", "json"))  # fmt: skip
    assert queried == [{"tool_name": "write_file", "n": 1}]
    report = json.loads(run("cost-report", "--by", "model", "--json"))
    (model_row,) = report["rows"]
    assert model_row["key"] == "anthropic/claude-sonnet-4-5" and abs(model_row["cost"] - cost) < 1e-9
    assert "LOOPSECRET" not in "".join(
        p.read_text(errors="replace") for p in capsem_home.rglob("*") if p.is_file()
    )
