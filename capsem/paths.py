"""Where capsem keeps its files: `$CAPSEM_HOME` (default `~/.capsem`)."""

from __future__ import annotations

import os
from pathlib import Path


def capsem_home() -> Path:
    """The root directory, from `CAPSEM_HOME` or `~/.capsem`."""
    env = os.environ.get("CAPSEM_HOME")
    return Path(env).expanduser() if env else Path.home() / ".capsem"


def sessions_dir() -> Path:
    return capsem_home() / "sessions"


def session_dir(session_id: str) -> Path:
    return sessions_dir() / session_id


def session_db_path(session_id: str) -> Path:
    return session_dir(session_id) / "session.db"


def main_db_path() -> Path:
    return capsem_home() / "main.db"


def user_config_path() -> Path:
    return capsem_home() / "config.yaml"


def shipped_config_path(name: str) -> Path:
    """`config/<name>` of the checkout (editable install) or of the installed wheel (`capsem/_config`)."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "config" / name, here / "_config" / name):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"config/{name} not found next to {here}")


def default_config_path() -> Path:
    """`config/default.yaml` of the checkout (editable install) or of the installed wheel."""
    return shipped_config_path("default.yaml")
