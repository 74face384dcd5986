"""The typed tree: one frozen dataclass per section, each field declaring its YAML key and what it
allows (`_setting("capture.preview_bytes", _whole("bytes"))`), in the manner of datasette's
`SETTINGS`; `Settings` holds them all with where each value came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from capsem.settings.checks import (
    Check,
    _amount,
    _choice,
    _flag,
    _header_map,
    _listed,
    _name,
    _named,
    _names,
    _postgres_url,
    _url,
    _whole,
)
from capsem.settings.entries import Budget, Credential, PolicyRule, SecretRule

DEFAULT = "default"
"""The origin of a value from config/default.yaml."""
OVERRIDE = "--set"
"""The origin of a value from an override (mitmproxy `--set capsem_*`, `capsem config --set`)."""


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
    ask_timeout_s: float = _setting("policy.ask_timeout_s", _amount("seconds"))
    """How long a request an `ask` rule holds waits for a person before it is denied."""


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
class TeamSettings:
    """`team:`: where this machine pushes its sessions, as whom, and how much of them."""

    url: str | None = _setting("team.url", _postgres_url())
    """The team's PostgreSQL (`CAPSEM_TEAM_URL` overrides it); None: no team."""
    machine: str | None = _setting("team.machine", _name("machine name"))
    """This machine's name in the team; None: the host name."""
    user: str | None = _setting("team.user", _name("user name"))
    """The person; None: the login name."""
    share: str = _setting("team.share", _choice("metadata", "redacted", "full"))
    """What leaves the machine: `metadata`, `redacted` (+ scrubbed conversation items), `full` (+ bodies)."""


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
    team: TeamSettings
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
    names = ("capture", "policy", "diagnostics", "retention", "budgets", "credentials", "export", "team")
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
