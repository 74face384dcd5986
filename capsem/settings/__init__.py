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

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from capsem.paths import default_config_path, user_config_path
from capsem.settings.checks import Check, SettingsError, _Bad, _must, _shown, _unknown
from capsem.settings.entries import (
    ACTIONS,
    BUDGET_FIELDS,
    CREDENTIAL_FIELDS,
    MATCH_FIELDS,
    RULE_FIELDS,
    SCOPES,
    SECRET_RULE_FIELDS,
    Action,
    Budget,
    Credential,
    PolicyRule,
    Scope,
    SecretRule,
)
from capsem.settings.tree import (
    _BY_KEY,
    _CLASSES,
    _NAMED,
    DEFAULT,
    OVERRIDE,
    SECTIONS,
    SETTINGS,
    BudgetSettings,
    CaptureSettings,
    CredentialSettings,
    DiagnosticsSettings,
    Entry,
    ExportSettings,
    PolicySettings,
    RetentionSettings,
    Setting,
    Settings,
    TeamSettings,
)

# fmt: off
__all__ = ["ACTIONS", "BUDGET_FIELDS", "CREDENTIAL_FIELDS", "DEFAULT", "MATCH_FIELDS", "OVERRIDE", "RULE_FIELDS",
           "SCOPES", "SECRET_RULE_FIELDS", "SECTIONS", "SETTINGS", "Action", "Budget", "BudgetSettings",
           "CaptureSettings", "Check", "Credential", "CredentialSettings", "DiagnosticsSettings", "Entry",
           "ExportSettings", "PolicyRule", "PolicySettings", "RetentionSettings", "Scope", "SecretRule", "Setting",
           "Settings", "SettingsError", "TeamSettings", "defaults", "load", "parse", "read_yaml"]
# fmt: on


# --- reading ----------------------------------------------------------------------------------


_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML has it: the same data as `yaml.safe_load`, ~12× less CPU (the
default settings are read by every mitmdump, recorder and CLI process, twice in mitmdump)."""


def read_yaml(path: Path) -> Any:
    """A YAML file's data ({} when empty). Raises SettingsError in one line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(str(path), None, f"cannot be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise SettingsError(str(path), None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    try:
        data = yaml.load(text, Loader=_FAST_LOADER)  # a safe loader (libyaml's SafeLoader)
        return {} if data is None else data
    except yaml.YAMLError:
        pass  # the Python parser below says what is wrong, in the words users know
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
