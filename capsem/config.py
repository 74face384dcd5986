"""The settings error, and the settings as a plain dict for readers not yet on the typed tree.

`capsem.settings` reads and checks the settings (`config/default.yaml`, overridden by
`$CAPSEM_HOME/config.yaml`, then by `--set` options) into one typed `Settings`; read that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """Settings that cannot be read or hold a bad value (`capsem.settings.SettingsError`)."""


def load_settings(user_file: Path | None = None) -> dict[str, Any]:
    """The checked settings as a nested plain dict (`Settings.as_dict()`).

    Transitional: new code calls `capsem.settings.load()` and reads the typed tree.

    Raises:
        capsem.settings.SettingsError: a bad file, key or value, in one line.
    """
    from capsem.settings import load

    return load(user_file).as_dict()
