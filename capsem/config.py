"""Settings: `config/default.yaml`, overridden by `$CAPSEM_HOME/config.yaml`.

The merge is recursive for mappings; any other value in the user file replaces the default.
mitmproxy `--set capsem_*` options are applied on top by the addon.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from capsem.paths import default_config_path, user_config_path


class ConfigError(ValueError):
    """A settings file that cannot be read."""


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read settings from {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at the top level, not {type(data).__name__}")
    return data


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """A new dict: `base` with `override` merged in, recursively for nested mappings."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load_settings(user_file: Path | None = None) -> dict[str, Any]:
    """Default settings merged with the user's file (if present)."""
    settings = _read(default_config_path())
    user_file = user_file or user_config_path()
    if user_file.is_file():
        settings = merge(settings, _read(user_file))
    return settings
