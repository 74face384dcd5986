"""`capsem policy test` with tool rules, on sessions recorded through real mitmdump and the emulator:
the real anthropic SDK (a Claude-Code-like `Bash` tool, under `capsem_command=claude ...`) and the
real openai SDK (a Codex-like `shell` tool taking an argv, under `capsem_command=codex ...`), the
model asked to run `rm -rf`. The tool calls are decided by `Policy.decide_tool`, scoped by agent,
and every rule that matched nothing is named (the issue's `mcp_tool: Bash` among them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from assembler.demo import anthropic_loop, openai_loop
from capsem.emulator import Emulator
from tests.cli.conftest import run
from tests.conftest import emulated_client, environ, rows

BASH = {"name": "Bash", "description": "Run a shell command",
        "schema": {"type": "object", "properties": {"command": {"type": "string", "enum": ["rm -rf /tmp/x"]}},
                   "required": ["command"]}}  # fmt: skip
SHELL = {"name": "shell", "description": "Run a command (argv)",
         "schema": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"},
                    "enum": [["bash", "-lc", "rm -r -f /tmp/x"]]}}, "required": ["command"]}}  # fmt: skip
POLICY = """
policy:
  rules:
    - {name: bash-via-mcp, action: deny, mcp_tool: Bash}
    - name: no-rm-rf
      action: deny
      tool: "*"
      tool_args: {"*": {shell: "rm -rf"}}
      agent: claude
    - {name: codex-shell, action: warn, tool: shell, agent: codex}
    - {name: no-writes, action: ask, tool: Write}
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A CAPSEM_HOME with two sessions: claude (Bash) and codex (shell), each a two-turn tool loop."""
    home = tmp_path_factory.mktemp("tools-home")
    work = tmp_path_factory.mktemp("tools-work")
    with environ(CAPSEM_HOME=str(home)), Emulator() as emu:
        for name, command, loop, tool in (("claude", "claude -p clean", anthropic_loop, BASH),
                                          ("codex", "codex exec clean", openai_loop, SHELL)):  # fmt: skip
            run_as = ["--set", f"capsem_command={command}", "--set", "capsem_mode=run"]
            with emulated_client(emu, work, log_name=f"{name}.log", args=run_as) as client:
                loop(client, lambda _msg: None, tool=tool)
    return home


@pytest.fixture
def home(recorded, capsem_home) -> Path:
    shutil.copytree(recorded, capsem_home)
    return capsem_home


def sessions(home: Path) -> dict[str, Path]:
    """agent -> session.db, by the command main.db holds."""
    found = rows(home / "main.db", "SELECT id, command FROM sessions")
    return {r["command"].split()[0]: home / "sessions" / r["id"] / "session.db" for r in found}


def policy_file(tmp_path: Path, text: str = POLICY) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(text)
    return path


def test_recorded_tool_calls_are_decided_per_agent_and_unmatched_rules_named(home, tmp_path):
    dbs = sessions(home)
    claude = rows(dbs["claude"], "SELECT id, tool_name, arguments FROM tool_calls")
    codex = rows(dbs["codex"], "SELECT id, tool_name, arguments FROM tool_calls")
    assert [(c["tool_name"], json.loads(c["arguments"])) for c in claude] == [
        ("Bash", {"command": "rm -rf /tmp/x"})
    ]
    assert [(c["tool_name"], json.loads(c["arguments"])) for c in codex] == [
        ("shell", {"command": ["bash", "-lc", "rm -r -f /tmp/x"]})
    ]
    data = json.loads(run("policy", "test", str(policy_file(tmp_path)), "--json"))
    assert data["totals"]["tool_calls"] == 2
    found = {
        (f["rule"], f["decision"], f["tool"], f["tool_call_id"], f["agent"]) for f in data["tool_findings"]
    }
    assert found == {("no-rm-rf", "denied", "Bash", claude[0]["id"], "claude"),
                     ("codex-shell", "warned", "shell", codex[0]["id"], "codex")}  # fmt: skip
    (rm,) = [f for f in data["tool_findings"] if f["rule"] == "no-rm-rf"]
    assert rm["arguments"] == {"command": "rm -rf /tmp/x"} and rm["live_decision"] == "allowed"
    assert rm["process"]  # the process that opened the connection, as recorded
    assert {(r["rule"], r["tool_calls"]) for r in data["rules"]} == {("no-rm-rf", 1), ("codex-shell", 1)}
    unmatched = {u["rule"]: u for u in data["unmatched_rules"]}
    assert set(unmatched) == {"bash-via-mcp", "no-writes"}
    assert unmatched["no-writes"] == {"rule": "no-writes", "action": "ask", "kind": "tool", "hint": None}
    assert unmatched["bash-via-mcp"]["kind"] == "mcp"
    assert unmatched["bash-via-mcp"]["hint"] == (
        "Bash is a tool the agent runs itself (1 call in answers), not an MCP tool: use `tool: Bash`"
    )


def test_the_codex_argv_is_caught_by_a_shell_rule_without_agent_scope(home, tmp_path):
    text = "policy: {rules: [{name: no-rm-rf, action: deny, tool: '*', tool_args: {'*': {shell: 'rm -rf'}}}]}"
    data = json.loads(run("policy", "test", str(policy_file(tmp_path, text)), "--json"))
    assert sorted(f["tool"] for f in data["tool_findings"]) == ["Bash", "shell"]
    assert data["unmatched_rules"] == []
    run("policy", "test", str(policy_file(tmp_path, text)), "--fail-on", "deny", code=3)
    run("policy", "test", str(policy_file(tmp_path, text)), "--fail-on", "ask")


def test_the_text_report_names_findings_and_rules_that_matched_nothing(home, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = run("policy", "test", str(policy_file(tmp_path)))
    assert all(len(line) <= 80 for line in text.splitlines()), text
    flat = " ".join(text.split())
    assert "tried on 2 sessions: 0 MCP requests, 0 MCP tool calls, 2 tool calls in answers" in flat
    assert "no-rm-rf would have denied 1 tool call in 1 session, e.g.:" in text
    assert '  Bash {"command":"rm -rf /tmp/x"}' in text
    assert "codex-shell would have warned about 1 tool call in 1 session, e.g.:" in text
    assert "bash-via-mcp (MCP rule, deny) matched nothing" in text
    assert (
        "Bash is a tool the agent runs itself (1 call in answers), not an MCP tool: use `tool: Bash`" in flat
    )
    assert "no-writes (tool rule, ask) matched nothing" in text
    assert "    agent claude, process " in text


def test_a_request_rule_that_matches_nothing_is_named_too(home, tmp_path):
    text = "policy: {rules: [{name: never, action: deny, host: nowhere.test}, {name: all, action: allow, host: '*'}]}"
    data = json.loads(run("policy", "test", str(policy_file(tmp_path, text)), "--json"))
    assert data["unmatched_rules"] == [{"rule": "never", "action": "deny", "kind": "request", "hint": None}]
    assert "never (request rule, deny) matched nothing" in run(
        "policy", "test", str(policy_file(tmp_path, text))
    )
