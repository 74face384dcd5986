"""Network policy: ordered rules that allow, warn, deny or ask about requests (pure matching).

Settings (`policy:` in the YAML config)::

    policy:
      rules:
        - name: no-paste-sites          # shown in matched_rule (default: rule-<n>)
          action: deny                  # allow | warn | deny | ask
          host: "*.pastebin.com"        # glob on the canonical name, or an address / CIDR range
        - action: deny
          host: 127.0.0.0/8             # any spelling: 127.1, 2130706433, 0x7f000001, ::ffff:7f00:1
        - action: deny
          mcp_server: files             # MCP tools/call only: server name from its initialize
                                        # result, or its endpoint host[:port]/path (glob)
          mcp_tool: "delete_*"          # and tool name (glob)
        - name: no-rm-rf
          action: deny
          mcp_args:                     # MCP tools/call only: arguments by name (or name glob),
            command: {shell: "rm -rf"}  # each a pattern of capsem/argmatch.py: the command it
            path: {regex: '^/etc/'}     # runs, a regex searched, a glob ("/etc/*") on the value,
            "*": {any: "*169.254.*"}    # or {any: GLOB} on any string at any depth

Tool rules decide on the tool calls the model asks for in its answer (Claude Code's `Bash`,
Codex's `shell`/`exec_command`, Gemini CLI's `run_shell_command`), before the agent sees them::

        - name: no-rm-rf
          action: deny                  # allow | warn | deny | ask
          tool: "Bash"                  # glob (any case) on the tool's name as the model calls it
          tool_args:                    # the patterns of mcp_args, on the call's arguments
            command: {shell: "rm -rf"}
          agent: claude                 # optional: only for this agent (glob, any case)
          process: "node*"              # optional: only for this client process (glob, any case)

A rule with `tool` or `tool_args` is a tool rule: it never matches a request, and a request rule
never matches a tool call (`Policy.decide` skips tool rules, `Policy.decide_tool` takes only
them); `capsem.settings` refuses a rule that mixes the two kinds. A tool call's arguments are its
JSON object; a call whose input is not a JSON object (a Responses custom tool's free-form text, such
as Codex's `apply_patch` or its code-mode `exec`) is matched as `{"input": text, "literals": [its
quoted strings]}` (`tool_arguments`).

What names the agent (`agent:`): the base name of the program `capsem run` started, its first
word that is not a launcher (`env`, `npx`, `node`, ...; `agent_name`): `claude`, `codex`, `gemini`.
The process that opened the connection is not used for it, since two of the three run as `node`;
it is matched by `process:` instead. Under a plain `mitmdump` no agent is known, and a rule
naming `agent:` matches nothing.

A rule matches when every field it names matches (host, port, path, method, mcp_server,
mcp_tool, mcp_args; or tool, tool_args, agent, process); the first matching rule decides.
Request rules decide on the canonical request
(`addons/canonical.py`), never on the text as written: `host` on every name the request carries
(destination, Host header, `:authority`, TLS SNI), `path` on the canonical path. A rule that denies,
asks or warns matches when any name (and any reading of the path) matches; an allow only when every
one does, so neither can be walked round by a second name or a rewritten path. No rule matching means `allowed`: the default
policy allows everything, so capture alone changes nothing. The rules are read and checked with
every other setting by `capsem.settings` (`Settings.policy`); this module only matches.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from fnmatch import fnmatchcase
from typing import Any, NamedTuple

from addons.canonical import CanonicalRequest, HostPattern
from capsem.argmatch import ArgMatch
from capsem.settings import PolicyRule, Settings, SettingsError, parse

DECISIONS = {"allow": "allowed", "warn": "warned", "deny": "denied", "ask": "asked"}


class McpTarget(NamedTuple):
    """An MCP tools/call: the names its server goes by (endpoint, initialize name), the tool and
    its arguments (None when unknown: a call named in headers only). A plain (servers, tool) pair
    is accepted too."""

    servers: tuple[str, ...]
    tool: str
    arguments: Mapping[str, Any] | None = None


class ToolTarget(NamedTuple):
    """A tool call the model asks for in its answer: the tool's name, its arguments (None when
    they cannot be read: `tool_arguments`), the agent it goes to and the client process."""

    name: str
    arguments: Mapping[str, Any] | None
    agent: str | None = None
    process: str | None = None


LAUNCHERS = frozenset({"env", "npx", "bunx", "pnpx", "uvx", "node", "bun", "deno", "python", "python3",
                       "sudo", "nice", "nohup", "time", "exec"})  # fmt: skip
"""Programs that start the agent rather than being it (`npx @google/gemini-cli`, `env X=1 claude`)."""


def agent_name(command: str | Sequence[str] | None) -> str | None:
    """The agent a session runs, from its command line (`capsem run -- claude -p hi` -> `claude`):
    the base name of its first word that is no launcher, option or `NAME=value`, lower-cased,
    a package's version, a script's extension and a `-cli` suffix dropped (`@google/gemini-cli` ->
    `gemini`), a script named `cli`/`index`/`main` named by its folder (`node /opt/claude/cli.js`
    -> `claude`). None when there is none."""
    if command is None:
        return None
    try:
        words = shlex.split(command) if isinstance(command, str) else list(command)
    except ValueError:
        words = command.split() if isinstance(command, str) else []
    for word in words:
        if not word or word.startswith("-") or ("=" in word and not word.startswith("/")):
            continue
        parts = word.rstrip("/").lower().split("/")
        base = parts[-1].split("@", 1)[0]
        for ending in (".js", ".mjs", ".cjs", ".py", ".exe", "-cli"):
            base = base.removesuffix(ending)
        if base in ("cli", "index", "main") and len(parts) > 1:  # node /opt/claude/cli.js
            base = parts[-2].split("@", 1)[0].removesuffix("-cli")
        if base and base not in LAUNCHERS:
            return base
    return None


_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"|\'((?:[^\'\\\n]|\\.)*)\'|`((?:[^`\\]|\\.)*)`')
"""A quoted string of a program's text: "...", '...' or `...`, with backslash escapes."""
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def _unescape(match: re.Match[str]) -> str:
    return {"n": "\n", "t": "\t", "r": "\r"}.get(match.group(1), match.group(1))


def tool_arguments(text: str | None) -> Mapping[str, Any] | None:
    """A tool call's arguments as its rules read them: its JSON object; any other input (a custom
    tool's free-form text, a JSON value that is no object) as `{"input": value}`; None when absent.

    Free-form text also gives `literals`, its quoted strings: Codex's code-mode `exec` tool takes a
    JavaScript program whose commands are string literals (`tools.exec_command({cmd: "rm -rf x"})`),
    which `{shell: ...}` on `"*"` then reads as command lines. A list of `commands` (the Responses
    API's `shell` tool runs them in turn) is also one script under `command`, the name every other
    shell tool's rules use."""
    if text is None:
        return None
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        literals = [_ESCAPE.sub(_unescape, "".join(m.groups(default=""))) for m in _LITERAL.finditer(text)]
        return {"input": text, "literals": literals} if literals else {"input": text}
    if not isinstance(value, dict):
        return {"input": value}
    commands = value.get("commands")
    if "command" not in value and isinstance(commands, list):
        return {**value, "command": "\n".join(c for c in commands if isinstance(c, str))}
    return value


class PolicyError(ValueError):
    """An invalid `policy:` setting given as a raw mapping (the typed `Settings` are checked already)."""


@dataclass(frozen=True, slots=True)
class Rule(PolicyRule):
    """A checked `PolicyRule` that can match requests."""

    arg_matches: tuple[ArgMatch, ...] = field(default=(), compare=False)
    """`mcp_args` compiled."""
    tool_arg_matches: tuple[ArgMatch, ...] = field(default=(), compare=False)
    """`tool_args` compiled."""
    host_pattern: HostPattern | None = field(default=None, compare=False)
    """`host` compiled: an address range or a glob on canonical names."""

    @classmethod
    def of(cls, rule: PolicyRule) -> Rule:
        args = tuple(ArgMatch.of(n, p) for n, p in (rule.mcp_args or {}).items())
        tool_args = tuple(ArgMatch.of(n, p) for n, p in (rule.tool_args or {}).items())
        host = HostPattern.of(rule.host) if rule.host is not None else None
        return cls(
            **{f.name: getattr(rule, f.name) for f in fields(rule)},
            arg_matches=args, tool_arg_matches=tool_args, host_pattern=host,
        )  # fmt: skip

    @property
    def needs_mcp(self) -> bool:
        return self.mcp_server is not None or self.mcp_tool is not None or self.mcp_args is not None

    @property
    def needs_arguments(self) -> bool:
        """Whether deciding needs a tools/call's arguments (its body), not only its tool name."""
        return self.mcp_args is not None

    def matches_tool(self, target: ToolTarget) -> bool:
        """Whether this tool rule matches a tool call (a request rule never does)."""
        if not self.is_tool_rule:
            return False
        if self.tool is not None and not fnmatchcase(target.name.lower(), self.tool.lower()):
            return False
        for scope, value in ((self.agent, target.agent), (self.process, target.process)):
            if scope is not None and (value is None or not fnmatchcase(value.lower(), scope.lower())):
                return False
        return all(a.matches(target.arguments) for a in self.tool_arg_matches)

    def matches(self, request: CanonicalRequest, mcp: McpTarget | tuple[tuple[str, ...], str] | None) -> bool:
        if self.is_tool_rule:
            return False  # a tool rule decides on the model's answer, never on a request
        every = all if self.action == "allow" else any  # an allow must hold for every name and reading
        host = self.host_pattern
        if host is not None and not every(host.matches(name) for name in request.names):
            return False
        if self.port is not None and request.port != self.port:
            return False
        if self.path is not None and not every(fnmatchcase(p, self.path) for p in request.paths):
            return False
        if self.method is not None and request.method != self.method.upper():
            return False
        if self.needs_mcp and mcp is not UNREADABLE:
            if mcp is None:
                return False
            servers, tool = mcp[0], mcp[1]
            pattern = (self.mcp_server or "").lower()
            if self.mcp_server is not None and not any(fnmatchcase(s.lower(), pattern) for s in servers):
                return False
            if self.mcp_tool is not None and not fnmatchcase(tool, self.mcp_tool):
                return False
            arguments = mcp[2] if len(mcp) > 2 else None
            if not all(a.matches(arguments) for a in self.arg_matches):
                return False
        return True


UNREADABLE = McpTarget(("*",), "*", None)
"""An MCP body that cannot be read whole (`addons/mcp/jsonrpc.py`): it could hold any tools/call,
so it is taken as one that matches every MCP condition of every rule."""


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: str
    """allowed | warned | denied | asked (a person decides: `addons/proxy/approvals.py`)"""
    rule: str | None


ALLOW = Verdict("allowed", None)
STRICTNESS = ("denied", "asked", "warned", "allowed")
"""Decisions from the strictest; a request holding several tools/calls takes the strictest one's."""


def _strictness(verdict: Verdict) -> int:
    return STRICTNESS.index(verdict.decision) if verdict.decision in STRICTNESS else 1


@dataclass(frozen=True, slots=True)
class Policy:
    rules: tuple[Rule, ...] = ()
    ask_timeout_s: float = 120.0
    """How long a request an `ask` rule holds waits for a person (`policy.ask_timeout_s`)."""

    @property
    def has_request_rules(self) -> bool:
        """Whether any rule decides on requests (tool rules alone never hold one)."""
        return any(not r.is_tool_rule for r in self.rules)

    @property
    def has_tool_rules(self) -> bool:
        """Whether any rule decides on the model's tool calls (else answers are never held)."""
        return any(r.is_tool_rule for r in self.rules)

    @property
    def has_mcp_rules(self) -> bool:
        return any(r.needs_mcp for r in self.rules)

    @property
    def needs_arguments(self) -> bool:
        """Whether a rule matches MCP tool arguments (read from the request body)."""
        return any(r.needs_arguments for r in self.rules)

    @classmethod
    def from_settings(cls, settings: Settings | Mapping[str, Any]) -> Policy:
        """The policy of `Settings.policy`.

        A raw mapping shaped like config.yaml is still accepted (checked over the defaults, and
        refused with PolicyError) until every caller holds a `Settings`.
        """
        if not isinstance(settings, Settings):
            try:
                settings = parse(settings)
            except SettingsError as exc:
                raise PolicyError(str(exc)) from exc
        return cls(
            tuple(Rule.of(rule) for rule in settings.policy.rules), float(settings.policy.ask_timeout_s)
        )

    def decide(
        self, request: CanonicalRequest, mcp: McpTarget | tuple[tuple[str, ...], str] | None = None
    ) -> Verdict:
        """The first matching rule's verdict; `mcp` is (server names, tool, arguments) of an MCP tools/call."""
        for rule in self.rules:
            if rule.matches(request, mcp):
                return Verdict(DECISIONS[rule.action], rule.name)
        return ALLOW

    def decide_tool(self, target: ToolTarget) -> Verdict:
        """A tool call's verdict: the first matching tool rule's, else allowed. Pure and cheap (the
        proxy calls it on the event loop once per tool call of an answer)."""
        for rule in self.rules:
            if rule.matches_tool(target):
                return Verdict(DECISIONS[rule.action], rule.name)
        return ALLOW

    def decide_request(self, request: CanonicalRequest, targets: Sequence[McpTarget]) -> Verdict:
        """A request's verdict: that of its strictest MCP tools/call (a batch may hold several),
        or of the request itself when it holds none."""
        verdicts = [self.decide(request, t) for t in targets] or [self.decide(request)]
        return min(verdicts, key=_strictness)
