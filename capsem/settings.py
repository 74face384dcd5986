"""Capsem's settings: declared once, read once into one typed tree, every bad value refused in one line.

Three layers, a later one winning key by key: `config/default.yaml` (every key, documented),
`$CAPSEM_HOME/config.yaml` (the user's), then overrides (mitmproxy `--set capsem_*` options,
`capsem config --set`). A list (`policy.rules`, `headers.allowlist`) is replaced whole.

Each key is declared once, on the field of its section's dataclass
(`_setting("capture.preview_bytes", _whole("bytes"))`), in the manner of datasette's `SETTINGS`.
`load()` checks every key of every layer against those declarations (unknown sections and keys,
types, ranges) and remembers where each value came from (`Settings.origins`, for `capsem config
show`). A problem is one `SettingsError` whose text is one line naming the file and the key:

    /home/me/.capsem/config.yaml: capture.preview_bytes must be a whole number of bytes, got 'lots'

Items of a list are numbered from 1: `policy.rules[2]` is the rule named `rule-2` by default.
`budgets:` and `credentials:` are sections of named entries (`budgets.daily.limit_usd`); such a
section, like a list, is replaced whole by a later layer.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, get_type_hints

import yaml

from capsem.config import ConfigError
from capsem.paths import default_config_path, user_config_path

DEFAULT = "default"
"""The origin of a value from config/default.yaml."""
OVERRIDE = "--set"
"""The origin of a value from an override (mitmproxy `--set capsem_*`, `capsem config --set`)."""

Action = Literal["allow", "warn", "deny"]
ACTIONS: tuple[Action, ...] = ("allow", "warn", "deny")
MATCH_FIELDS = ("host", "port", "path", "method", "mcp_server", "mcp_tool")
RULE_FIELDS = ("name", "action", *MATCH_FIELDS)
Scope = Literal["session", "day", "month"]
SCOPES: tuple[Scope, ...] = ("session", "day", "month")
BUDGET_FIELDS = ("scope", "limit_usd", "warn_at", "provider", "model", "host", "on_unconfirmed")
CREDENTIAL_FIELDS = ("host", "header", "query", "env", "file", "placeholder", "agent_env")
_TOKEN_RE = re.compile(r"[A-Za-z0-9_.\-]{8,}")
_HEADER_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SettingsError(ConfigError):
    """A bad setting, as one line: `<file>: <dotted.key> must be <what is allowed>, got <value>`."""

    def __init__(self, origin: str, key: str | None, problem: str) -> None:
        self.origin = origin
        """The file the bad value is in (or `--set`)."""
        self.key = key
        """The dotted key (`capture.preview_bytes`, `policy.rules[2].port`); None for the whole file."""
        self.problem = problem
        super().__init__(f"{origin}: {key} {problem}" if key else f"{origin}: {problem}")


# --- checks: what each key allows -------------------------------------------------------------


class _Bad(Exception):
    """A check's refusal of the value at `key` (a dotted key, maybe deeper: `policy.rules[2].port`)."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(problem)
        self.key = key
        self.problem = problem


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _must(key: str, allowed: str, value: Any) -> _Bad:
    return _Bad(key, f"must be {allowed}, got {_shown(value)}")


def _unknown(prefix: str, names: Sequence[str], what: str, listing: str, allowed: Sequence[str]) -> _Bad:
    """`<prefix><name> is not a <what> (did you mean ...?); <listing>: <allowed>` (or several names)."""
    if len(names) == 1:
        name = names[0]
        close = sorted((a for a in allowed if name.startswith(a) or a.startswith(name)), key=len)[-1:]
        close = close or difflib.get_close_matches(name, allowed, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return _Bad(prefix + names[0], f"is not a {what}{hint}; {listing}: {', '.join(allowed)}")
    return _Bad(", ".join(prefix + n for n in names), f"are not {what}s; {listing}: {', '.join(allowed)}")


@dataclass(frozen=True)
class Check:
    allowed: str
    """What the key allows, as the error line says it (`a whole number of bytes`)."""
    parse: Callable[[str, Any], Any]
    """(dotted key, YAML value) -> the typed value; raises _Bad."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(unit: str, minimum: int = 0, *, off: bool = False) -> Check:
    """A whole number >= `minimum`; with `off`, 0 or null means "no limit" (None)."""
    allowed = f"a whole number of {unit}" + (f" >= {minimum}" if minimum else "")
    allowed += " (0 or null: no limit)" if off else ""

    def parse(key: str, value: Any) -> int | None:
        if off and value is None:
            return None
        if not _is_number(value) or value != int(value) or value < minimum:
            raise _must(key, allowed, value)
        return None if off and value == 0 else int(value)

    return Check(allowed, parse)


def _amount(unit: str, *, off: bool = False) -> Check:
    """A number >= 0; with `off`, 0 or null means "no limit" (None)."""
    allowed = f"a number of {unit} >= 0" + (" (0 or null: no limit)" if off else "")

    def parse(key: str, value: Any) -> float | None:
        if off and value is None:
            return None
        if not _is_number(value) or value < 0:
            raise _must(key, allowed, value)
        return None if off and value == 0 else value

    return Check(allowed, parse)


def _flag() -> Check:
    def parse(key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise _must(key, "true or false", value)
        return value

    return Check("true or false", parse)


def _names(item: str) -> Check:
    """A list of `item`s (text), kept lower-cased as a frozenset."""
    allowed = f"a list of {item}s"

    def parse(key: str, value: Any) -> frozenset[str]:
        if value is None:
            return frozenset()
        if not isinstance(value, list):
            raise _must(key, allowed, value)
        for n, name in enumerate(value, 1):
            if not isinstance(name, str) or not name:
                raise _must(f"{key}[{n}]", f"a {item}", name)
        return frozenset(name.lower() for name in value)

    return Check(allowed, parse)


def _choice(*allowed_values: str) -> Check:
    allowed = "one of " + ", ".join(allowed_values)

    def parse(key: str, value: Any) -> str:
        if value not in allowed_values:
            raise _must(key, allowed, value)
        return value

    return Check(allowed, parse)


def _url(*, off: bool = False) -> Check:
    """An http(s) URL; with `off`, null or "" means none (None)."""
    allowed = "an http:// or https:// URL" + (" (null: off)" if off else "")

    def parse(key: str, value: Any) -> str | None:
        if off and value in (None, ""):
            return None
        if not isinstance(value, str) or not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            raise _must(key, allowed, value)
        return value

    return Check(allowed, parse)


def _header_map() -> Check:
    """A mapping of header names to text values, names kept lower-cased."""
    allowed = "a mapping of header names to values"

    def parse(key: str, value: Any) -> Mapping[str, str]:
        if value is None:
            return MappingProxyType({})
        if not isinstance(value, Mapping):
            raise _must(key, allowed, value)
        for name, text in value.items():
            if not isinstance(name, str) or not _HEADER_RE.fullmatch(name):
                raise _must(f"{key}.{name}", "a header name", name)
            if not isinstance(text, str):
                raise _must(f"{key}.{name}", "text", text)
        return MappingProxyType({str(name).lower(): text for name, text in value.items()})

    return Check(allowed, parse)


def _listed(entry: Callable[[str, int, Any], Any], allowed: str) -> Check:
    """A list of entries, each parsed by `entry(key, n, raw)` at `key[n]` (n from 1)."""

    def parse(key: str, value: Any) -> tuple[Any, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise _must(key, allowed, value)
        return tuple(entry(f"{key}[{n}]", n, raw) for n, raw in enumerate(value, 1))

    return Check(allowed, parse)


# --- the typed tree ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One declared key."""

    key: str
    """Dotted, as in the YAML: `capture.preview_bytes`."""
    section: str
    """The attribute of `Settings` holding it (`capture`)."""
    name: str
    """The attribute of the section holding it (`preview_bytes`)."""
    check: Check


def _setting(key: str, check: Check) -> Any:
    """Declare a field of a section: its YAML key and what it allows."""
    return field(metadata={"setting": (key, check)})


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One `policy.rules` entry; every field but name and action is a condition (None: any)."""

    name: str
    action: Action
    host: str | None = None
    """Glob, case-insensitive."""
    port: int | None = None
    path: str | None = None
    """Glob on the path without the query."""
    method: str | None = None
    mcp_server: str | None = None
    """Glob on an MCP server's initialize name or its host[:port]/path endpoint."""
    mcp_tool: str | None = None
    """Glob on the tool of an MCP tools/call."""

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
            raise _must(f"{key}.action", "allow, warn or deny", action)
        if all(raw.get(f) is None for f in MATCH_FIELDS):
            raise _Bad(
                key, f"must name something to match ({', '.join(MATCH_FIELDS)}), got {_shown(dict(raw))}"
            )
        port = raw.get("port")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
            raise _must(f"{key}.port", "a port number (1-65535)", port)
        globs = {}
        for name in ("host", "path", "method", "mcp_server", "mcp_tool"):
            value = raw.get(name)
            if value is not None and not (isinstance(value, str) and value):
                raise _must(f"{key}.{name}", "an HTTP method" if name == "method" else "a glob (text)", value)
            globs[name] = value
        label = raw.get("name")
        if label is not None and (isinstance(label, bool) or not isinstance(label, str | int)):
            raise _must(f"{key}.name", "a name (text)", label)
        return cls(name=str(label or f"rule-{n}"), action=action.lower(), port=port, **globs)  # type: ignore[arg-type]


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
            rule_from(rule.as_gitleaks())
        except RuleError as exc:
            raise _Bad(f"{key}.regex", f"does not compile: {str(exc).rsplit(': ', 1)[-1]}") from exc
        return rule


def _glob(key: str, value: Any) -> str | None:
    if value is not None and not (isinstance(value, str) and value):
        raise _must(key, "a glob (text)", value)
    return value


def _fields_of(key: str, raw: Any, what: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    """`raw` as a mapping holding only `allowed` fields (raises _Bad naming the first unknown one)."""
    if not isinstance(raw, Mapping):
        raise _must(key, f"a mapping of {what} fields ({', '.join(allowed)})", raw)
    unknown = [str(k) for k in raw if k not in allowed]
    if unknown:
        raise _unknown(f"{key}.", unknown, f"{what} field", f"a {what} has", allowed)
    return raw


def _one_of(key: str, raw: Mapping[str, Any], first: str, second: str, problem: str) -> tuple[Any, Any]:
    """The values of two fields of which exactly one must be given (raises _Bad with `problem`)."""
    a, b = raw.get(first), raw.get(second)
    if (a is None) == (b is None):
        raise _Bad(key, f"{problem}, got {_shown(dict(raw))}")
    return a, b


@dataclass(frozen=True, slots=True)
class Budget:
    """One `budgets:` entry: a limit in USD on the model calls it matches, over a scope."""

    name: str
    scope: Scope
    """`session` (this run of mitmdump), `day` or `month` (UTC, every session on this machine)."""
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

    @classmethod
    def parse(cls, key: str, name: str, raw: Any) -> Budget:
        """The budget `name` at `key` (`budgets.<name>`). Raises _Bad naming the field."""
        raw = _fields_of(key, raw, "budget", BUDGET_FIELDS)
        scope = raw.get("scope")
        if not isinstance(scope, str) or scope.lower() not in SCOPES:
            raise _must(f"{key}.scope", "session, day or month", scope)
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
        return cls(name=name, scope=scope.lower(), limit_usd=float(limit), warn_at=warn,  # type: ignore[arg-type]
                   on_unconfirmed=unconfirmed, **globs)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Credential:
    """One `credentials:` entry: a key capsem holds for the agent, and where it may go."""

    name: str
    host: str
    """Glob (case-insensitive): the only hosts the real value is ever sent to."""
    header: str | None
    """The header that carries the key (lower-case: `x-api-key`, `authorization`...), or None."""
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
        if header is not None and not (isinstance(header, str) and _HEADER_RE.fullmatch(header)):
            raise _must(f"{key}.header", "a header name", header)
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
        return cls(name=name, host=host, header=header.lower() if header else None, query=query, env=env,
                   file=file, placeholder=placeholder, agent_env=tuple(names))  # fmt: skip


def _named(entry: Callable[[str, str, Any], Any], what: str) -> Check:
    """A mapping of named entries (`budgets:`), each parsed by `entry(key, name, raw)`, kept in order."""
    allowed = f"a mapping of {what} names to their fields"

    def parse(key: str, value: Any) -> tuple[Any, ...]:
        if value is None:
            return ()
        if not isinstance(value, Mapping):
            raise _must(key, allowed, value)
        out = tuple(entry(f"{key}.{name}", str(name), raw) for name, raw in value.items())
        seen: dict[str, str] = {}
        for item in out:  # a credential's placeholder must say which entry it stands for
            mark = getattr(item, "placeholder", None)
            if mark is not None and mark in seen:
                raise _Bad(f"{key}.{item.name}.placeholder", f"is the placeholder of {key}.{seen[mark]} too")
            seen[mark or item.name] = item.name
        return out

    return Check(allowed, parse)


@dataclass(frozen=True)
class CaptureSettings:
    """What the addon records and how much of it (`capture:`, `headers:`, `redaction:`)."""

    preview_bytes: int = _setting("capture.preview_bytes", _whole("bytes"))
    """Body previews in net_events / model_calls (decoded bytes, cut on a UTF-8 boundary)."""
    content_max_bytes: int = _setting("capture.content_max_bytes", _whole("bytes"))
    """Largest text stored for text, thinking, tool arguments and tool results."""
    max_parse_bytes: int = _setting("capture.max_parse_bytes", _whole("bytes"))
    """Largest decoded body that is parsed."""
    max_body_bytes: int = _setting("capture.max_body_bytes", _whole("bytes"))
    """Largest whole body kept per model or MCP call (the complete-record issue)."""
    commit_interval_ms: int = _setting("capture.commit_interval_ms", _whole("milliseconds", 1))
    """Rows of finished flows are committed at least this often."""
    max_pending_calls: int = _setting("capture.max_pending_calls", _whole("calls", 1))
    """Pending tool call ids remembered for trace linking and result de-duplication."""
    header_allowlist: frozenset[str] = _setting("headers.allowlist", _names("header name"))
    """Header names (lower-case) whose values are kept verbatim; the others are hashed."""
    query_params: frozenset[str] = _setting("redaction.query_params", _names("query parameter name"))
    """Query parameter names (lower-case) whose values are hashed."""
    secret_rules: tuple[SecretRule, ...] = _setting(
        "redaction.rules", _listed(SecretRule.parse, "a list of secret rules")
    )
    """Credential shapes added to the shipped ones (gitleaks' rule form)."""
    disabled_rules: frozenset[str] = _setting("redaction.disabled_rules", _names("rule id"))
    """Ids of shipped rules switched off (`generic-api-key` by default)."""


@dataclass(frozen=True)
class PolicySettings:
    """`policy:`: the ordered rules; the first whose fields all match decides."""

    rules: tuple[PolicyRule, ...] = _setting("policy.rules", _listed(PolicyRule.parse, "a list of rules"))


@dataclass(frozen=True)
class DiagnosticsSettings:
    """`diagnostics:`: process sampling by `capsem run`."""

    enabled: bool = _setting("diagnostics.enabled", _flag())
    sample_interval_ms: int = _setting("diagnostics.sample_interval_ms", _whole("milliseconds", 10))


@dataclass(frozen=True)
class RetentionSettings:
    """`retention:`: compression and culling of finished sessions. None switches a rule off."""

    auto: bool = _setting("retention.auto", _flag())
    """Apply the rules beside the agent at each `capsem run` (never inside the proxy)."""
    vacuum_after_hours: float = _setting("retention.vacuum_after_hours", _amount("hours"))
    retention_days: float | None = _setting("retention.retention_days", _amount("days", off=True))
    max_sessions: int | None = _setting("retention.max_sessions", _whole("sessions", off=True))
    max_disk_gb: float | None = _setting("retention.max_disk_gb", _amount("GiB", off=True))
    min_content_keep: int = _setting("retention.min_content_keep", _whole("sessions"))


@dataclass(frozen=True)
class BudgetSettings:
    """`budgets:`: named spend limits, checked before a model call goes upstream."""

    entries: tuple[Budget, ...] = _setting("budgets", _named(Budget.parse, "budget"))


@dataclass(frozen=True)
class CredentialSettings:
    """`credentials:`: named keys capsem holds for the agent (it is given placeholders)."""

    entries: tuple[Credential, ...] = _setting("credentials", _named(Credential.parse, "credential"))


@dataclass(frozen=True)
class ExportSettings:
    """`export:`: OpenTelemetry export of each finished call, live from the recorder process."""

    otlp_endpoint: str | None = _setting("export.otlp.endpoint", _url(off=True))
    """OTLP/HTTP endpoint (`http://collector:4318`; `/v1/traces` is added when the path lacks it)."""
    otlp_headers: Mapping[str, str] = _setting("export.otlp.headers", _header_map())
    """Headers sent with every export request (an `authorization` for a hosted backend)."""
    otlp_content: bool = _setting("export.otlp.content", _flag())
    """Put message content on the spans (system instructions, messages, tool arguments and results)."""
    otlp_profile: str = _setting("export.otlp.profile", _choice("latest", "compat"))
    """`latest`: the current GenAI names only; `compat`: also the older names backends still read."""


@dataclass(frozen=True)
class Entry:
    """One key of `Settings.entries()`: its value as plain data (YAML/JSON) and its origin."""

    key: str
    value: Any
    origin: str


@dataclass(frozen=True)
class Settings:
    """Every setting, typed and checked."""

    capture: CaptureSettings
    policy: PolicySettings
    diagnostics: DiagnosticsSettings
    retention: RetentionSettings
    budgets: BudgetSettings
    credentials: CredentialSettings
    export: ExportSettings
    origins: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Dotted key -> where its value came from: `default`, the user's config.yaml path, or `--set`."""
    files: tuple[Path, ...] = field(default=(), compare=False)
    """The YAML files read, default.yaml first."""

    def entries(self) -> list[Entry]:
        """Every key in declaration order, its value as plain data, and its origin."""
        return [Entry(s.key, _plain(getattr(getattr(self, s.section), s.name), named=s.key in _NAMED),
                      self.origins.get(s.key, DEFAULT)) for s in SETTINGS]  # fmt: skip

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """The settings as the nested plain mapping a YAML file would hold."""
        out: dict[str, dict[str, Any]] = {}
        for entry in self.entries():
            *path, name = entry.key.split(".")
            if path:  # `export.otlp.endpoint` -> {"export": {"otlp": {"endpoint": ...}}}
                node = out
                for part in path:
                    node = node.setdefault(part, {})
                node[name] = entry.value
            else:  # a section of named entries
                out[entry.key] = entry.value
        return out


def _plain(value: Any, *, named: bool = False) -> Any:
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, Mapping):
        return dict(value)
    if named:  # name -> the fields that differ from their defaults
        return {v.name: {f.name: _plain(getattr(v, f.name)) for f in fields(v) if f.name != "name"
                         and (getattr(v, f.name) is not None if f.default is MISSING else getattr(v, f.name) != f.default)}
                for v in value}  # fmt: skip
    if isinstance(value, tuple) and value and not isinstance(value[0], str):
        return [
            {f.name: getattr(v, f.name) for f in fields(v) if getattr(v, f.name) is not None} for v in value
        ]
    if isinstance(value, tuple):
        return list(value)
    return value


def _declared() -> tuple[tuple[Setting, ...], dict[str, type]]:
    sections = get_type_hints(Settings)
    names = ("capture", "policy", "diagnostics", "retention", "budgets", "credentials", "export")
    classes = {name: sections[name] for name in names}
    declared = []
    for section, cls in classes.items():
        for f in fields(cls):
            key, check = f.metadata["setting"]
            declared.append(Setting(key, section, f.name, check))
    return tuple(declared), classes


SETTINGS, _CLASSES = _declared()
"""Every declared key, in order."""
_BY_KEY = {s.key: s for s in SETTINGS}
SECTIONS = tuple(dict.fromkeys(s.key.split(".", 1)[0] for s in SETTINGS))
"""The YAML sections: capture, headers, redaction, policy, diagnostics, retention, budgets, credentials, export."""
_NAMED = frozenset(s.key for s in SETTINGS if "." not in s.key)
"""Sections of named entries: the whole section is one value."""


# --- reading ----------------------------------------------------------------------------------


def read_yaml(path: Path) -> Any:
    """A YAML file's data ({} when empty). Raises SettingsError in one line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(str(path), None, f"cannot be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise SettingsError(str(path), None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = " ".join(str(exc.problem or exc.context).split())
        raise SettingsError(str(path), None, f"invalid YAML{where}: {reason}") from exc
    except yaml.YAMLError as exc:
        raise SettingsError(str(path), None, f"invalid YAML: {' '.join(str(exc).split())}") from exc
    return {} if data is None else data


def _keys(where: str, data: Any) -> dict[str, Any]:
    """One layer's values by dotted key, its shape checked (sections, known keys)."""
    if not isinstance(data, Mapping):
        raise SettingsError(where, None, f"the top level must be a mapping of sections ({', '.join(SECTIONS)}), "
                                         f"got {_shown(data)}")  # fmt: skip
    out = {}
    try:
        unknown = [str(k) for k in data if k not in SECTIONS]
        if unknown:
            raise _unknown("", unknown, "section", "sections are", SECTIONS)
        for section, body in data.items():
            if body is None:
                continue
            if section in _NAMED:
                out[section] = body
                continue
            if not isinstance(body, Mapping):
                raise _must(section, "a mapping of settings", body)
            names = [s.key.split(".", 1)[1] for s in SETTINGS if s.key.startswith(section + ".")]
            body = _flat(section, body, names)
            unknown = [str(k) for k in body if k not in names]
            if unknown:
                raise _unknown(f"{section}.", unknown, "setting", f"{section} has", names)
            out.update({f"{section}.{name}": value for name, value in body.items()})
    except _Bad as bad:
        raise SettingsError(where, bad.key, bad.problem) from None
    return out


def _flat(section: str, body: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    """`{otlp: {endpoint: x}}` -> `{"otlp.endpoint": x}` where the section declares `otlp.*` keys."""
    out: dict[str, Any] = {}
    for key, value in body.items():
        group = [n.split(".", 1)[1] for n in names if n.startswith(f"{key}.")]
        if not group:
            out[key] = value
            continue
        if value is None:
            continue
        if not isinstance(value, Mapping):
            raise _must(f"{section}.{key}", "a mapping of settings", value)
        unknown = [str(k) for k in value if k not in group]
        if unknown:
            raise _unknown(f"{section}.{key}.", unknown, "setting", f"{section}.{key} has", group)
        out.update({f"{key}.{name}": v for name, v in value.items()})
    return out


def _build(layers: Sequence[tuple[str, str, Any]], files: tuple[Path, ...]) -> Settings:
    """Settings from (origin label, name in errors, data) layers, later ones winning."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for label, where, data in layers:
        for key, raw in _keys(where, data).items():
            try:
                values[key] = _BY_KEY[key].check.parse(key, raw)
            except _Bad as bad:
                raise SettingsError(where, bad.key, bad.problem) from None
            origins[key] = label
    missing = [s.key for s in SETTINGS if s.key not in values]
    if missing:
        raise SettingsError(layers[0][1], ", ".join(missing), "must be set here (the defaults of every key)")
    sections = {
        section: cls(**{s.name: values[s.key] for s in SETTINGS if s.section == section})
        for section, cls in _CLASSES.items()
    }
    return Settings(**sections, origins=MappingProxyType(origins), files=files)


def _default_layer() -> tuple[str, str, Any]:
    path = default_config_path()
    return DEFAULT, str(path), read_yaml(path)


def _nested(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """{"capture.preview_bytes": 1} -> {"capture": {"preview_bytes": 1}}."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        section, dot, name = key.partition(".")
        if dot:
            out.setdefault(section, {})[name] = value
        else:
            out[section] = value
    return out


def load(user_file: Path | None = None, overrides: Mapping[str, Any] | None = None) -> Settings:
    """default.yaml, then the user's file (default `$CAPSEM_HOME/config.yaml`, if it exists), then
    `overrides` (dotted keys: `{"capture.preview_bytes": 4096}`), all checked.

    Raises:
        SettingsError: the first bad file, section, key or value, in one line.
    """
    layers = [_default_layer()]
    user_file = user_file or user_config_path()
    if user_file.is_file():
        layers.append((str(user_file), str(user_file), read_yaml(user_file)))
    if overrides:
        layers.append((OVERRIDE, OVERRIDE, _nested(overrides)))
    return _build(layers, tuple(Path(where) for _, where, _ in layers if where != OVERRIDE))


def parse(data: Mapping[str, Any], origin: str = "<settings>") -> Settings:
    """default.yaml overridden by `data`, a mapping shaped like config.yaml (`origin` names it in errors)."""
    default = _default_layer()
    return _build([default, (origin, origin, data)], (Path(default[1]),))


@functools.cache
def defaults() -> Settings:
    """config/default.yaml alone."""
    default = _default_layer()
    return _build([default], (Path(default[1]),))
