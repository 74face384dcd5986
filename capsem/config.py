"""The settings error (`capsem.settings` reads and checks the settings into one typed tree)."""

from __future__ import annotations


class ConfigError(ValueError):
    """Settings that cannot be read or hold a bad value (`capsem.settings.SettingsError`)."""
