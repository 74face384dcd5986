"""Issue 35, points 4 and 5, end to end: the real Claude Code, Codex and Gemini CLIs under `capsem
run --emulator`, non-interactive, each finish a small task with a tool call (the emulator asks for
their own shell tool: a greeting printed and written to a file), with 0 errors counted.

The CLIs come from npm into .tools/agents (`make test-agents`, which `make test` runs); a missing
npm or CLI skips with the reason. Each runs in a temporary workspace with a temporary HOME (none
of the user's settings or credentials), fake API keys (`capsem run --emulator` gives them), and
stdin closed. Every request they make goes through capsem's proxy to the emulator (mitmdump in
upstream mode): the test checks that each recorded answer came from the emulator. Wall-clock time
is not asserted (it is printed; the issue's bound is 20 s each); what made runs slow, a model call
retried because its answer was not what the agent asked for, is: each run makes at most a few calls.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from capsem.emulator.agent import FILE, GREETING
from capsem.emulator.housekeeping import NOT_EMULATED_SERVER
from tests.conftest import rows

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".tools" / "agents" / "node_modules" / ".bin"
PROMPT = "Write a short greeting to a file in this folder."
# (the CLI, its non-interactive command with tools allowed without asking, the shell tool it declares)
AGENTS = {
    "claude": (["claude", "-p", PROMPT, "--allowedTools", "Bash", "Write"], "Bash"),
    "codex": (["codex", "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", PROMPT], "exec"),
    "gemini": (["gemini", "-p", PROMPT, "--yolo", "--skip-trust"], "run_shell_command"),
}  # fmt: skip


def _agent_or_skip(name: str) -> Path:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the real agent CLIs come from npm (`make test-agents`)")
    path = BIN / name
    if not path.exists():
        pytest.skip(
            f"{path} is missing: run `make test-agents` (installs the CLIs from npm into .tools/agents)"
        )
    return path


def _capsem(env: dict[str, str], *args: str) -> str:
    """Run the `capsem` command (stdin closed, as in CI); assert it exits 0; its output."""
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "capsem"), *args], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    print(
        f"capsem {args[0]} {Path(args[-len(args) + args.index('--') + 1]).name}: {time.monotonic() - started:.1f} s"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.parametrize("agent", AGENTS)
def test_a_real_agent_finishes_a_small_task_on_the_emulator_with_no_errors(agent, tmp_path, capsem_home):
    program = _agent_or_skip(agent)
    args, shell_tool = AGENTS[agent]
    workspace, home = tmp_path / "workspace", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "COLUMNS": "100", "CAPSEM_HOME": str(capsem_home)}
    for variable in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "CODEX_HOME"):
        env.pop(variable, None)  # the CLIs' real endpoints, which capsem routes to the emulator
    out = _capsem(env, "run", "--emulator", "--workspace", str(workspace), "--", str(program), *args[1:])
    assert (workspace / FILE).read_text() == GREETING + "\n", out  # the task: a file written by a command
    assert "· 0 errors" in " ".join(out.split()), out

    (db,) = capsem_home.glob("sessions/*/session.db")
    calls = rows(db, "SELECT status_code, text_content FROM model_calls ORDER BY id")
    assert calls and all(c["status_code"] == 200 for c in calls)
    assert len(calls) <= 5, calls  # no retries: every answer was one the agent could use
    assert GREETING in calls[-1]["text_content"]  # the final text, after the tool's result
    tools = rows(db, "SELECT tc.tool_name, tr.is_error, tr.content_preview FROM tool_calls tc "
                     "JOIN tool_responses tr ON tr.call_id = tc.call_id")  # fmt: skip
    assert [(t["tool_name"], t["is_error"]) for t in tools] == [(shell_tool, 0)], tools
    assert GREETING in tools[0]["content_preview"]
    assert rows(db, "SELECT path FROM fs_events WHERE path LIKE ?", (f"%{FILE}",))
    # nothing reached the internet: every answer came from the emulator (the not-emulated hosts
    # included, which are listed apart from errors)
    servers = {json.loads(r["response_headers"] or "{}").get("server")
               for r in rows(db, "SELECT response_headers FROM net_events WHERE status_code IS NOT NULL")}  # fmt: skip
    assert servers <= {"capsem-emulator", NOT_EMULATED_SERVER}, servers

    if agent == "claude":  # as seen: a replay with 0 misses still said "8 errors" (its housekeeping)
        again = tmp_path / "again"
        again.mkdir()
        out = _capsem(env, "replay", db.parent.name, "--workspace", str(again), "--", str(program), *args[1:])
        assert "0 missed" in out and "· 0 errors" in " ".join(out.split()), out
        assert (again / FILE).read_text() == GREETING + "\n"
