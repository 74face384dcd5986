"""Tool rules: `tool`/`tool_args` (with `agent`/`process`) decide on the model's tool calls, by
`Policy.decide_tool`; they never match a request, and request rules never match a tool call."""

from __future__ import annotations

import pytest
import yaml

from addons.canonical import CanonicalRequest
from addons.proxy.policy import ALLOW, McpTarget, Policy, ToolTarget, Verdict, agent_name, tool_arguments
from capsem.settings import parse

CONFIG = """
policy:
  rules:
    - name: no-rm-rf
      action: deny
      tool: "*"
      tool_args:
        "*": {shell: "rm -rf"}
    - name: ask-push
      action: ask
      tool: bash
      tool_args: {command: {regex: 'git\\s+push'}}
    - name: codex-writes
      action: warn
      tool: apply_patch
      agent: codex
    - name: node-fetch
      action: warn
      tool: "web_*"
      process: "node*"
    - name: etc
      action: deny
      tool_args: {file_path: "/etc/*"}
    - name: secrets
      action: deny
      tool: "*"
      tool_args: {"*": {any: "*id_rsa*"}}
    - name: no-paste
      action: deny
      host: "*.pastebin.com"
"""


@pytest.fixture
def policy() -> Policy:
    return Policy.from_settings(parse(yaml.safe_load(CONFIG)))


def bash(command: str, **scope) -> ToolTarget:
    return ToolTarget("Bash", {"command": command}, **scope)


@pytest.mark.parametrize(
    "command",
    ["rm -rf /x", "rm -r -f /x", "rm -fr /x", "/bin/rm -rf /x", "bash -c 'rm -rf x'", "rm -Rf x",
     "rm --recursive --force x", "cd /tmp && rm -rf build", "sh -c \"rm -rf x\"", "sudo rm -rf /"],
)  # fmt: skip
def test_the_shell_matcher_sees_rm_rf_however_it_is_written(policy, command):
    assert policy.decide_tool(bash(command)) == Verdict("denied", "no-rm-rf")


@pytest.mark.parametrize("command", ["rm -r x", "rm -f x", "ls -rf", "echo 'rm -rf'", "grep -rf pattern ."])
def test_the_shell_matcher_lets_other_commands_through(policy, command):
    assert policy.decide_tool(bash(command)) is ALLOW


def test_the_same_rule_stops_each_agents_shell_tool(policy):
    """Claude Code's Bash, Gemini CLI's run_shell_command, Codex's shell (an argv), exec_command and
    its code-mode `exec` (a JavaScript program, free-form: its string literals are read)."""
    calls = [
        ToolTarget("Bash", {"command": "rm -rf /tmp/x", "description": "clean"}, agent="claude"),
        ToolTarget("run_shell_command", {"command": "rm -rf /tmp/x"}, agent="gemini"),
        ToolTarget("shell", {"command": ["bash", "-lc", "rm -rf /tmp/x"], "workdir": "/w"}, agent="codex"),
        ToolTarget("shell", {"command": ["rm", "-rf", "/tmp/x"]}, agent="codex"),
        ToolTarget("exec_command", {"cmd": "rm -rf /tmp/x"}, agent="codex"),
        ToolTarget(
            "exec", tool_arguments('await tools.exec_command({cmd: "rm -rf /tmp/x"});'), agent="codex"
        ),
    ]
    assert [policy.decide_tool(c).decision for c in calls] == ["denied"] * 6
    harmless = tool_arguments("await tools.exec_command({cmd: \"echo 'rm -rf' is dangerous\"});")
    assert policy.decide_tool(ToolTarget("exec", harmless)) is ALLOW


def test_tool_name_is_a_glob_in_any_case_and_args_a_regex(policy):
    assert policy.decide_tool(bash("git  push origin main")) == Verdict("asked", "ask-push")
    assert policy.decide_tool(ToolTarget("run_shell_command", {"command": "git push"})) is ALLOW
    assert policy.decide_tool(ToolTarget("Write", {"file_path": "/etc/passwd"})) == Verdict("denied", "etc")
    assert policy.decide_tool(ToolTarget("Write", {"file_path": "/home/etc"})) is ALLOW
    assert policy.decide_tool(ToolTarget("Read", {"path": {"nested": ["~/.ssh/id_rsa"]}})) == Verdict(
        "denied", "secrets"
    )


def test_agent_and_process_scope_a_rule(policy):
    patch = ToolTarget("apply_patch", {"input": "*** Begin Patch"}, agent="codex")
    assert policy.decide_tool(patch) == Verdict("warned", "codex-writes")
    assert policy.decide_tool(patch._replace(agent="Codex")) == Verdict("warned", "codex-writes")
    assert policy.decide_tool(patch._replace(agent="claude")) is ALLOW
    assert (
        policy.decide_tool(patch._replace(agent=None)) is ALLOW
    )  # no agent known: a scoped rule never matches
    fetch = ToolTarget("web_fetch", {"url": "https://x"}, agent="gemini", process="node")
    assert policy.decide_tool(fetch) == Verdict("warned", "node-fetch")
    assert policy.decide_tool(fetch._replace(process="python3")) is ALLOW
    assert policy.decide_tool(fetch._replace(process=None)) is ALLOW


def test_first_matching_rule_decides(policy):
    both = bash("rm -rf ~/.ssh/id_rsa")  # no-rm-rf (1st) and secrets (6th) both match
    assert policy.decide_tool(both) == Verdict("denied", "no-rm-rf")
    first_allow = Policy.from_settings(parse(yaml.safe_load("""
policy:
  rules:
    - {action: allow, tool: Bash, tool_args: {command: "rm -rf /tmp/scratch"}}
    - {name: no-rm, action: deny, tool: Bash, tool_args: {command: {shell: rm}}}
""")))  # fmt: skip
    assert first_allow.decide_tool(bash("rm -rf /tmp/scratch")) == Verdict("allowed", "rule-1")
    assert first_allow.decide_tool(bash("rm -rf /tmp/other")) == Verdict("denied", "no-rm")


def test_tool_rules_never_match_requests_and_request_rules_never_match_tool_calls(policy):
    assert policy.has_tool_rules
    every = Policy.from_settings(parse(yaml.safe_load("""
policy:
  rules:
    - {name: every-tool, action: deny, tool: "*"}
    - {name: every-path, action: warn, path: "*"}
    - {name: every-mcp, action: warn, mcp_tool: "*"}
""")))  # fmt: skip
    request = CanonicalRequest.of("POST", 443, "/v1/messages", ("api.anthropic.com",))
    assert every.decide(request) == Verdict("warned", "every-path")  # not every-tool, the first rule
    assert every.decide(request, McpTarget(("files",), "Bash", {})) == Verdict("warned", "every-path")
    assert every.decide_request(request, [McpTarget(("files",), "Bash", {})]).rule == "every-path"
    assert every.decide_tool(ToolTarget("Bash", {})) == Verdict("denied", "every-tool")
    requests_only = Policy.from_settings(parse(yaml.safe_load(CONFIG.split("    - name: no-rm-rf")[0] + """
    - {name: every-path, action: deny, path: "*"}
    - {name: every-mcp, action: deny, mcp_tool: "*"}
""")))  # fmt: skip
    assert not requests_only.has_tool_rules and requests_only.has_request_rules
    assert policy.has_request_rules and not Policy.from_settings(parse(yaml.safe_load(
        "policy: {rules: [{action: deny, tool: Bash}]}"))).has_request_rules  # fmt: skip
    assert requests_only.decide_tool(ToolTarget("Bash", {"command": "rm -rf /"})) is ALLOW


def test_unreadable_arguments_match_no_argument_pattern(policy):
    assert policy.decide_tool(ToolTarget("Bash", None)) is ALLOW
    assert policy.decide_tool(ToolTarget("apply_patch", None, agent="codex")) == Verdict(
        "warned", "codex-writes"
    )


def test_tool_arguments_reads_json_objects_and_free_form_input():
    assert tool_arguments('{"command": "ls"}') == {"command": "ls"}
    assert tool_arguments("*** Begin Patch\n") == {"input": "*** Begin Patch\n"}
    program = (
        'const r = await tools.exec_command({cmd: "echo \\"hi\\" && rm -rf /tmp/x"});\ntext(`done ${r}`);'
    )
    assert tool_arguments(program) == {
        "input": program,
        "literals": ['echo "hi" && rm -rf /tmp/x', "done ${r}"],
    }
    assert tool_arguments("[1, 2]") == {"input": [1, 2]}
    assert tool_arguments("") == {}
    assert tool_arguments(None) is None


@pytest.mark.parametrize(
    ("command", "agent"),
    [("claude -p hi", "claude"), ("/usr/local/bin/codex exec --full-auto x", "codex"), ("gemini", "gemini"),
     ("npx @google/gemini-cli -p x", "gemini"), ("env FOO=1 node /opt/claude/cli.js", "claude"),
     ("aider --model x", "aider"), ("", None), (None, None), (["codex", "--yolo"], "codex")],
)  # fmt: skip
def test_agent_name_is_the_program_capsem_run_started(command, agent):
    assert agent_name(command) == agent
