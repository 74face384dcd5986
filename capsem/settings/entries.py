"""The settings' entries: policy rules, secret rules, budgets and credentials, each parsed and
checked field by field (`policy.rules[2].port`, `budgets.daily.limit_usd`)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from capsem.argmatch import ArgPatternError, matcher
from capsem.settings.checks import (
    _HEADER_RE,
    _Bad,
    _fields_of,
    _glob,
    _is_number,
    _must,
    _one_of,
    _shown,
    _unknown,
)

Action = Literal["allow", "warn", "deny", "ask"]
ACTIONS: tuple[Action, ...] = ("allow", "warn", "deny", "ask")
REQUEST_FIELDS = ("host", "port", "path", "method", "mcp_server", "mcp_tool", "mcp_args")
"""What a request rule matches: the request, or the MCP tools/calls it carries."""
TOOL_FIELDS = ("tool", "tool_args")
"""What a tool rule matches: a tool call in the model's answer (`addons/proxy/policy.py: decide_tool`)."""
SCOPE_FIELDS = ("agent", "process")
"""What scopes a tool rule to one agent (never matched alone)."""
MATCH_FIELDS = (*REQUEST_FIELDS, *TOOL_FIELDS)
RULE_FIELDS = ("name", "action", *MATCH_FIELDS, *SCOPE_FIELDS)
Scope = Literal["session", "day", "month", "team"]
SCOPES: tuple[Scope, ...] = ("session", "day", "month", "team")
BUDGET_FIELDS = (
    "scope",
    "period",
    "limit_usd",
    "warn_at",
    "provider",
    "model",
    "host",
    "on_unconfirmed",
    "on_unpriced",
    "reserve_output_tokens",
)
CREDENTIAL_FIELDS = ("host", "header", "query", "env", "file", "placeholder", "agent_env")
_TOKEN_RE = re.compile(r"[A-Za-z0-9_.\-]{8,}")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One `policy.rules` entry; every field but name and action is a condition (None: any)."""

    name: str
    action: Action
    host: str | None = None
    """A glob on every canonical name the request carries (lower-case, no trailing dot, IDNA), or
    an address or CIDR range (`127.0.0.0/8`, `::1`) matching an IP literal in any spelling
    (`addons/canonical.py`)."""
    port: int | None = None
    path: str | None = None
    """Glob on the canonical path (dot segments removed, slashes merged, unreserved escapes
    decoded, `;params` set aside), without the query."""
    method: str | None = None
    mcp_server: str | None = None
    """Glob on an MCP server's initialize name or its host[:port]/path endpoint."""
    mcp_tool: str | None = None
    """Glob on the tool of an MCP tools/call."""
    mcp_args: dict[str, str | dict[str, str]] | None = None
    """Argument name (or a glob on names) -> a pattern on its value: a glob (`"rm -rf *"`),
    `{regex: ...}` (searched), `{shell: "rm -rf"}` (the command it runs) or `{any: GLOB}` (any
    string at any depth), see `capsem/argmatch.py`; every one named must match. Kept as plain
    data (`capsem config show` prints it); `addons/proxy/policy.py` compiles it."""
    tool: str | None = None
    """Glob (any case) on the name of a tool call the model asks for in its answer (`Bash`,
    `run_shell_command`, `shell`). Makes the rule a tool rule: it never matches a request."""
    tool_args: dict[str, str | dict[str, str]] | None = None
    """A tool call's arguments, by name, with the patterns of `mcp_args` (a tool rule too)."""
    agent: str | None = None
    """Glob (any case) on the agent the tool call goes to: the program `capsem run` started
    (`claude`, `codex`, `gemini`; `addons/proxy/policy.py: agent_name`). Tool rules only."""
    process: str | None = None
    """Glob (any case) on the name of the local process whose connection carried the answer
    (as `net_events.process_name` records it). Tool rules only."""

    @property
    def is_tool_rule(self) -> bool:
        return self.tool is not None or self.tool_args is not None

    @classmethod
    def parse(cls, key: str, n: int, raw: Any) -> PolicyRule:
        """Rule `n` (from 1) of the YAML list, at `key` (`policy.rules[n]`). Raises _Bad naming the field."""
        if not isinstance(raw, Mapping):
            raise _must(key, f"a mapping of rule fields ({', '.join(RULE_FIELDS)})", raw)
        unknown = [str(k) for k in raw if k not in RULE_FIELDS]
        if unknown:
            raise _unknown(f"{key}.", unknown, "rule field", "a rule has", RULE_FIELDS)
        action = raw.get("action")
        if not isinstance(action, str) or action.lower() not in ACTIONS:
            raise _must(f"{key}.action", "allow, warn, deny or ask", action)
        if all(raw.get(f) is None for f in MATCH_FIELDS):
            raise _Bad(
                key, f"must name something to match ({', '.join(MATCH_FIELDS)}), got {_shown(dict(raw))}"
            )
        _one_kind(key, raw)
        port = raw.get("port")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
            raise _must(f"{key}.port", "a port number (1-65535)", port)
        globs = {}
        for name in ("host", "path", "method", "mcp_server", "mcp_tool", "tool", "agent", "process"):
            value = raw.get(name)
            if value is not None and not (isinstance(value, str) and value):
                raise _must(f"{key}.{name}", "an HTTP method" if name == "method" else "a glob (text)", value)
            globs[name] = value
        host = globs["host"]
        if host is not None and "/" in host:
            try:
                ipaddress.ip_network(host.strip().strip("[]"), strict=False)
            except ValueError:
                raise _must(
                    f"{key}.host", "a glob or an address range (10.0.0.0/8, fd00::/8)", host
                ) from None
        label = raw.get("name")
        if label is not None and (isinstance(label, bool) or not isinstance(label, str | int)):
            raise _must(f"{key}.name", "a name (text)", label)
        args = _mcp_args(f"{key}.mcp_args", raw.get("mcp_args"))
        globs["tool_args"] = _mcp_args(f"{key}.tool_args", raw.get("tool_args"), "tool")
        return cls(name=str(label or f"rule-{n}"), action=action.lower(), port=port, mcp_args=args, **globs)  # type: ignore[arg-type]


def _one_kind(key: str, raw: Mapping[str, Any]) -> None:
    """A rule matches requests (REQUEST_FIELDS) or the model's tool calls (TOOL_FIELDS), never
    both: a request carries no tool call of the model's answer, so such a rule would match nothing.
    `agent`/`process` scope tool rules only."""
    request = [f for f in REQUEST_FIELDS if raw.get(f) is not None]
    tool = [f for f in TOOL_FIELDS if raw.get(f) is not None]
    scope = [f for f in SCOPE_FIELDS if raw.get(f) is not None]
    if request and tool:
        raise _Bad(
            key,
            f"mixes a tool rule's fields ({', '.join(tool)}: a tool call in the model's answer) with a "
            f"request rule's ({', '.join(request)}), which never match together: write two rules",
        )
    if scope and not tool:
        raise _Bad(
            f"{key}.{scope[0]}",
            "scopes tool rules only: add tool (a glob on the tool's name, e.g. Bash) or tool_args",
        )


def _mcp_args(key: str, raw: Any, kind: str = "MCP") -> dict[str, str | dict[str, str]] | None:
    """`mcp_args` (or `tool_args`): a mapping of argument name (or glob on names) -> a pattern of
    `capsem/argmatch.py` (a glob, `{regex: ...}`, `{shell: ...}`, `{any: ...}`), which must compile."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not raw:
        raise _must(
            key,
            f"a mapping of {kind} argument name -> glob, {{regex: ...}}, {{shell: ...}} or {{any: ...}}",
            raw,
        )
    out: dict[str, str | dict[str, str]] = {}
    for name, pattern in raw.items():
        if not isinstance(name, str) or not name:
            raise _must(key, "a mapping keyed by argument names (text)", name)
        try:
            matcher(pattern)
        except ArgPatternError as exc:
            shown = pattern[exc.where[1:]] if exc.where else pattern
            raise _Bad(f"{key}.{name}{exc.where}", f"{exc}, got {_shown(shown)}") from None
        out[name] = pattern if isinstance(pattern, str) else dict(pattern)
    return out


SECRET_RULE_FIELDS = ("id", "regex", "keywords", "secret_group", "entropy", "description")


@dataclass(frozen=True, slots=True)
class SecretRule:
    """One `redaction.rules` entry: a credential shape, in gitleaks' rule form (`capsem.secret_rules`)."""

    id: str
    regex: str
    """Its first group (or `secret_group`) is the secret; the whole match when it has none."""
    keywords: tuple[str, ...] = ()
    """The rule runs only on text holding one of these (compared lower-cased); none: on every text."""
    secret_group: int = 0
    entropy: float = 0.0
    """Shannon entropy below which a found secret is kept (a placeholder, not a key)."""
    description: str | None = None

    def as_gitleaks(self) -> dict[str, Any]:
        return {"id": self.id, "regex": self.regex, "keywords": list(self.keywords),
                "secretGroup": self.secret_group, "entropy": self.entropy}  # fmt: skip

    @classmethod
    def parse(cls, key: str, n: int, raw: Any) -> SecretRule:
        """Rule `n` (from 1) at `key` (`redaction.rules[n]`); its regex must compile."""
        from capsem.secret_rules import RuleError, rule_from

        fields_ = _fields_of(key, raw, "secret rule", SECRET_RULE_FIELDS)
        rule_id, regex = fields_.get("id"), fields_.get("regex")
        if not isinstance(rule_id, str) or not rule_id:
            raise _must(f"{key}.id", "a rule id (text)", rule_id)
        if not isinstance(regex, str) or not regex:
            raise _must(f"{key}.regex", "a regular expression (text)", regex)
        keywords = fields_.get("keywords") or []
        if not isinstance(keywords, list) or not all(isinstance(k, str) and k for k in keywords):
            raise _must(f"{key}.keywords", "a list of words", keywords)
        group, entropy = fields_.get("secret_group", 0), fields_.get("entropy", 0)
        if isinstance(group, bool) or not isinstance(group, int) or group < 0:
            raise _must(f"{key}.secret_group", "a group number >= 0", group)
        if not _is_number(entropy) or entropy < 0:
            raise _must(f"{key}.entropy", "a number >= 0", entropy)
        rule = cls(rule_id, regex, tuple(keywords), group, float(entropy), fields_.get("description"))
        try:
            rule_from(rule.as_gitleaks(), check=True)
        except RuleError as exc:
            raise _Bad(f"{key}.regex", f"does not compile: {str(exc).rsplit(': ', 1)[-1]}") from exc
        return rule


@dataclass(frozen=True, slots=True)
class Budget:
    """One `budgets:` entry: a limit in USD on the model calls it matches, over a scope."""

    name: str
    scope: Scope
    """`session` (this run of mitmdump), `day` or `month` (UTC, every session on this machine),
    `team` (every machine of the team, per `period`: leased from the team's PostgreSQL)."""
    limit_usd: float
    warn_at: float | None = 0.8
    """Fraction of the limit from which calls are recorded `warned`; None: never."""
    provider: str | None = None
    """Glob on the provider (anthropic, openai, google, bedrock...); None: any."""
    model: str | None = None
    """Glob on the model the request names; None: any."""
    host: str | None = None
    """Glob on the host the call goes to (case-insensitive); None: any."""
    on_unconfirmed: Literal["deny", "allow"] = "deny"
    """What a matched call gets while this session's spend cannot be confirmed (its recorder is not
    answering): `deny` (refused with the budget's 402) or `allow` (let through unchecked, logged and
    recorded as such)."""
    on_unpriced: Literal["deny", "allow"] = "deny"
    """What a matched call gets when the price table has no price for its model (its cost could not
    be counted): `deny` (refused with the budget's 402, saying how to allow it) or `allow` (let
    through uncounted, recorded `warned` with matched_rule `budget:<name> (unpriced)`)."""
    reserve_output_tokens: int | None = None
    """Output tokens reserved for a call that sets no output limit (`max_tokens` or its provider's
    field); None: 131,072 (above every output limit providers document), or the model's context
    window in the price table when that is smaller."""
    period: Literal["day", "month"] = "day"
    """The span of a `team` budget (UTC): its limit is per day or per month."""

    @classmethod
    def parse(cls, key: str, name: str, raw: Any) -> Budget:
        """The budget `name` at `key` (`budgets.<name>`). Raises _Bad naming the field."""
        raw = _fields_of(key, raw, "budget", BUDGET_FIELDS)
        scope = raw.get("scope")
        if not isinstance(scope, str) or scope.lower() not in SCOPES:
            raise _must(f"{key}.scope", "session, day, month or team", scope)
        period = raw.get("period", "day")
        if period not in ("day", "month"):
            raise _must(f"{key}.period", "day or month", period)
        if "period" in raw and scope.lower() != "team":
            raise _must(f"{key}.period", "set only with scope: team (day and month scopes are their own period)",
                        period)  # fmt: skip
        limit = raw.get("limit_usd")
        if not _is_number(limit) or limit < 0:
            raise _must(f"{key}.limit_usd", "a number of US dollars >= 0", limit)
        warn = raw.get("warn_at", 0.8)
        if warn is not None and (not _is_number(warn) or not 0 < warn <= 1):
            raise _must(f"{key}.warn_at", "a fraction of the limit above 0 and at most 1 (null: never)", warn)
        globs = {f: _glob(f"{key}.{f}", raw.get(f)) for f in ("provider", "model", "host")}
        unconfirmed = raw.get("on_unconfirmed", "deny")
        if unconfirmed not in ("deny", "allow"):
            raise _must(f"{key}.on_unconfirmed", "deny or allow", unconfirmed)
        unpriced = raw.get("on_unpriced", "deny")
        if unpriced not in ("deny", "allow"):
            raise _must(f"{key}.on_unpriced", "deny or allow", unpriced)
        output = raw.get("reserve_output_tokens")
        if output is not None and (not isinstance(output, int) or isinstance(output, bool) or output < 1):
            raise _must(f"{key}.reserve_output_tokens", "a whole number of tokens >= 1 (null: the model's "
                        "output ceiling)", output)  # fmt: skip
        return cls(name=name, scope=scope.lower(), limit_usd=float(limit), warn_at=warn,  # type: ignore[arg-type]
                   on_unconfirmed=unconfirmed, on_unpriced=unpriced, reserve_output_tokens=output,  # type: ignore[arg-type]
                   period=period, **globs)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Credential:
    """One `credentials:` entry: a key capsem holds for the agent, and where it may go."""

    name: str
    host: str
    """Glob (case-insensitive): the only hosts the real value is ever sent to."""
    header: tuple[str, ...] | None
    """The headers that may carry the key (lower-case: `x-api-key`, `authorization`...; several for
    a gateway whose clients send it in either), or None."""
    query: str | None
    """The query parameter that carries it (`key`), or None."""
    env: str | None
    """Where capsem reads the real value: a variable of its own environment, or..."""
    file: str | None
    """...a file readable only by its owner (path with `~` expanded)."""
    placeholder: str
    """What the agent is given instead of the key (default `capsem-placeholder-<name>`)."""
    agent_env: tuple[str, ...] = ()
    """Variables `capsem run --broker` puts the placeholder in (default: the `env` variable)."""

    @classmethod
    def parse(cls, key: str, name: str, raw: Any) -> Credential:
        """The entry `name` at `key` (`credentials.<name>`). Raises _Bad naming the field."""
        raw = _fields_of(key, raw, "credential", CREDENTIAL_FIELDS)
        host = raw.get("host")
        if not isinstance(host, str) or not host:
            raise _must(f"{key}.host", "a host glob (the only hosts the real value may go to)", host)
        header, query = _one_of(key, raw, "header", "query", "must say where the key goes: header (x-api-key, "
                                "authorization...) or query (a query parameter), one of them")  # fmt: skip
        headers = [header] if isinstance(header, str) else header
        if header is not None and not (
            isinstance(headers, list)
            and headers
            and all(isinstance(h, str) and _HEADER_RE.fullmatch(h) for h in headers)
        ):
            raise _must(f"{key}.header", "a header name or a list of them", header)
        if query is not None and not (isinstance(query, str) and query):
            raise _must(f"{key}.query", "a query parameter name", query)
        env, file = _one_of(key, raw, "env", "file", "must name one source of the real value: env (a variable "
                            "of capsem's own environment) or file (readable only by you)")  # fmt: skip
        if env is not None and not (isinstance(env, str) and _ENV_NAME_RE.fullmatch(env)):
            raise _must(f"{key}.env", "an environment variable name", env)
        if file is not None:
            if not isinstance(file, str) or not file:
                raise _must(f"{key}.file", "a path", file)
            file = str(Path(file).expanduser())
            if not Path(file).is_absolute():
                raise _must(f"{key}.file", "an absolute path (or one starting with ~)", raw.get("file"))
        placeholder = raw.get("placeholder", f"capsem-placeholder-{name}")
        if not isinstance(placeholder, str) or not _TOKEN_RE.fullmatch(placeholder):
            raise _must(f"{key}.placeholder", "8 or more letters, digits, '_', '-' or '.'", placeholder)
        agent_env = raw.get("agent_env", env)
        names = [agent_env] if isinstance(agent_env, str) else agent_env
        if names is None:
            names = []
        if not isinstance(names, list) or not all(
            isinstance(n, str) and _ENV_NAME_RE.fullmatch(n) for n in names
        ):
            raise _must(f"{key}.agent_env", "an environment variable name or a list of them", agent_env)
        header = tuple(dict.fromkeys(h.lower() for h in headers)) if headers else None  # each once
        return cls(name=name, host=host, header=header, query=query, env=env, file=file, placeholder=placeholder,
                   agent_env=tuple(names))  # fmt: skip
