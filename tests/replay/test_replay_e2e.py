"""`capsem replay` end to end: a scripted agent (tests/replay/agent.py: the real anthropic, openai and
google-genai SDKs, a Claude Code-shaped request, a Codex-shaped WebSocket) recorded once with
`capsem run --emulator` through real mitmdump, then replayed with the same command through real
mitmdump and the replay server, with that emulator gone."""

from __future__ import annotations

import filecmp
import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from assembler.cli import cli
from tests.cli.conftest import run
from tests.conftest import environ, rows
from tests.e2e.test_mcp import serve

SECTIONS = ("anthropic", "claude_code", "chat", "responses", "websocket", "gemini")

AGENT = str(Path(__file__).with_name("agent.py"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict:
    """One recording of every section (13 model calls), kept as a CAPSEM_HOME to copy."""
    base = tmp_path_factory.mktemp("recorded")
    home, workspace = base / "home", base / "ws"
    workspace.mkdir()
    with environ(CAPSEM_HOME=str(home), COLUMNS="160"):
        run(
            "run",
            "--quiet",
            "--emulator",
            "--workspace",
            str(workspace),
            "--",
            sys.executable,
            AGENT,
            *SECTIONS,
        )
        (session,) = json.loads(run("list-sessions", "--json"))
    return {"home": home, "id": session["id"], "workspace": workspace}


@pytest.fixture
def home(recorded, capsem_home) -> Path:
    shutil.copytree(recorded["home"], capsem_home)
    return capsem_home


def raw(session: str, call: int, direction: str = "response") -> bytes:
    shown = CliRunner().invoke(cli, ["show-call", str(call), session, f"--{direction}", "--raw"])
    assert shown.exit_code == 0, shown.output
    return shown.stdout_bytes


def replayed(capsem_home: Path, original: str) -> dict:
    sessions = {s["id"]: s for s in json.loads(run("list-sessions", "--json"))}
    (replay,) = [s for s in sessions.values() if s["id"] != original]
    return replay


def test_replay_answers_every_call_as_recorded(recorded, home, tmp_path):
    """Same command, another workspace, another date: the agent finishes the same way (the same
    files written), every answer byte-identical to the recorded one, zero misses; the replay is a
    session of its own linked to the original."""
    original = recorded["id"]
    workspace = tmp_path / "again"
    workspace.mkdir()
    with environ(RUN_DATE="2027-01-02"):  # the date in the Claude Code-shaped system prompt changes
        out = run("replay", original, "--strict", "--speed", "1", "--workspace", str(workspace), "--", sys.executable,
                  AGENT, *SECTIONS)  # fmt: skip
    assert "13 matched, 0 missed" in out and "no divergence" in out, out
    written = sorted(p.name for p in recorded["workspace"].iterdir())
    assert written == sorted(p.name for p in workspace.iterdir()) and len(written) == 6
    assert filecmp.cmpfiles(recorded["workspace"], workspace, written, shallow=False)[0] == written
    replay = replayed(home, original)
    assert replay["replay_of"] == original and replay["exit_code"] == 0
    db = home / "sessions" / replay["id"] / "session.db"
    calls = rows(db, "SELECT id, protocol FROM model_calls ORDER BY id")
    assert [c["protocol"] for c in calls] == ["anthropic"] * 4 + ["openai_chat"] * 3 + ["openai_responses"] * 4 + [
        "gemini"] * 2  # fmt: skip
    for call in calls:
        assert raw(replay["id"], call["id"]) == raw(original, call["id"]), call
    # calls 6 and 7: the same request twice in a row, answered otherwise; each got its own, in order
    assert raw(original, 6, "request") == raw(original, 7, "request") and raw(original, 6) != raw(original, 7)
    assert f"replay of {original}: 13 matched, 0 missed, 0 live" in run("inspect-session", replay["id"])
    with environ(COLUMNS="400"):  # the name/tags column is cut to fit a narrower terminal
        assert f"replay of {original}" in run("list-sessions")
    # issue 26: a session and its replay differ in ids and timings only (another workspace and
    # date included: the diff reads texts as the replay matches them)
    compared = json.loads(run("diff", original, replay["id"], "--json"))
    assert compared["same"], [c for c in compared["calls"] if c["changed"]]
    assert len(compared["calls"]) == 13
    assert any("dates, ids or paths" in d["what"] for c in compared["calls"] for d in c["ignored"])
    with environ(COLUMNS="80"):
        assert "no change but ids and timings (13 calls lined up)" in run("diff", replay["id"])
    meta = {
        r["key"]: r["value"] for r in rows(db, "SELECT key, value FROM session_meta WHERE key LIKE 'replay%'")
    }
    assert meta == {"replay_of": original, "replay_matched": "13", "replay_missed": "0", "replay_live": "0",
                    "replay_first_miss": ""}  # fmt: skip
    # the recording kept how each streamed answer arrived (a WebSocket turn: one chunk per message)
    chunks = {r["model_call_id"]: json.loads(r["chunks"]) for r in rows(
        home / "sessions" / original / "session.db", "SELECT * FROM response_chunks")}  # fmt: skip
    assert {1, 5, 9, 10, 11, 12} <= set(chunks)
    ws = raw(original, 10)
    assert chunks[10][-1][0] == len(ws) and len(chunks[10]) == ws.count(b"\n") + 1


def test_a_changed_prompt_is_a_clear_miss(recorded, home, tmp_path, capfd):
    """The agent gets an error in the provider's shape naming the first differing item; nothing
    else answers it; --strict exits 1."""
    original = recorded["id"]
    workspace = tmp_path / "changed"
    workspace.mkdir()
    with environ(PROMPT="write the notes twice"):
        out = run("replay", original, "--strict", "--workspace", str(workspace), "--", sys.executable, AGENT,
                  "anthropic", code=1)  # fmt: skip
    said = 'messages[0].content: recorded "write the notes", now "write the notes twice"'
    assert "0 matched, 1 missed" in " ".join(out.split()), out
    where = "model call 1 to POST api.anthropic.com/v1/messages (compared with recorded call 1)"
    assert f"first divergence: {where}: {said}" in " ".join(out.split())
    agent_saw = capfd.readouterr().err
    assert "Error code: 400" in agent_saw and f"capsem replay miss: {said}" in agent_saw
    replay = replayed(home, original)
    db = home / "sessions" / replay["id"] / "session.db"
    (call,) = rows(db, "SELECT id, status_code, error_type FROM model_calls")
    assert call["status_code"] == 400 and call["error_type"] == "invalid_request_error"
    assert b"capsem replay miss" in raw(replay["id"], call["id"])
    assert not list(workspace.iterdir())  # the agent stopped at the miss: no file written


def test_from_n_live_goes_live_at_n(recorded, home, emu, tmp_path, monkeypatch):
    """Calls 1..5 from the recording, the rest (HTTP, the WebSocket, Gemini) to the "real provider"
    (the emulator, through --live-via), asking for --model."""
    original = recorded["id"]
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(key, "sk-live-test")
    out = run("replay", original, "--from", "6", "--live", "--model", "gpt-5-mini", "--live-via", emu.proxy_url,
              "--live-ca", emu.ca_path, "--workspace", str(tmp_path), "--", sys.executable, AGENT, *SECTIONS)  # fmt: skip
    assert "5 matched, 0 missed, 8 live" in out, out
    models = [
        json.loads(e["request_body"]).get("model") for e in emu.exchanges() if e["expected"].get("protocol")
    ]
    assert len(models) == 8 and models[:6] == ["gpt-5-mini"] * 6  # chat x3, responses x2 (HTTP), WebSocket x2
    gemini = [e["path"] for e in emu.exchanges() if "gemini" in e["path"] or "generateContent" in e["path"]]
    assert gemini and all("/models/gpt-5-mini:" in p for p in gemini)
    replay = replayed(home, original)
    for n in range(1, 6):
        assert raw(replay["id"], n) == raw(original, n)
    # the replay session keeps the request as the agent sent it; the answer says who answered
    db = home / "sessions" / replay["id"] / "session.db"
    answered = rows(db, "SELECT model, response_model FROM model_calls WHERE id >= 6 ORDER BY id")
    assert answered[0] == {"model": "gpt-4.1", "response_model": "gpt-5-mini"}, answered
    assert all(r["response_model"].startswith("gpt-5-mini") for r in answered), answered


def test_mcp_calls_are_answered_from_the_recording(capsem_home, tmp_path):
    """An MCP tool call over Streamable HTTP (the real mcp SDK and a FastMCP server, reached
    without an upstream), replayed with the server gone: every MCP call answered as recorded."""
    first, again = tmp_path / "first", tmp_path / "again"
    first.mkdir()
    again.mkdir()
    with serve(json_response=False) as (url, _server), environ(MCP_URL=url):
        run("run", "--quiet", "--workspace", str(first), "--", sys.executable, AGENT, "mcp")
    (original,) = [s["id"] for s in json.loads(run("list-sessions", "--json"))]
    db = capsem_home / "sessions" / original / "session.db"
    methods = [r["method"] for r in rows(db, "SELECT method FROM mcp_calls ORDER BY id")]
    assert "initialize" in methods and "tools/call" in methods
    with environ(MCP_URL=url):  # nothing listens there any more
        out = run(
            "replay", original, "--strict", "--workspace", str(again), "--", sys.executable, AGENT, "mcp"
        )
    assert f"{len(methods)} matched, 0 missed" in out, out
    assert (again / "mcp.txt").read_text() == (first / "mcp.txt").read_text() == "note groceries: buy milk"


def test_bad_input_is_said_before_anything_starts(capsem_home, recorded, home):
    assert "no session.db or session.db.gz for session 'nosuch'" in run(
        "replay", "nosuch", "--", "true", code=1
    )
    assert "--from N and --live go together" in run("replay", recorded["id"], "--live", "--", "true", code=2)
    assert "apply to the live part" in run("replay", recorded["id"], "--model", "m", "--", "true", code=2)
    out = run("replay", recorded["id"], "--", "definitely-not-a-command-xyz", code=127)
    assert out == "capsem replay: definitely-not-a-command-xyz: command not found\n"
    assert len(json.loads(run("list-sessions", "--json"))) == 1  # no session was started
