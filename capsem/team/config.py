"""Who this machine is in the team, where the team's PostgreSQL is, and what is shared: the
`team:` settings with their defaults filled in (`CAPSEM_TEAM_URL` wins over `team.url`)."""

from __future__ import annotations

import getpass
import os
import socket
from dataclasses import dataclass
from typing import Literal

from capsem.settings import Settings, TeamSettings

ENV_URL = "CAPSEM_TEAM_URL"
Share = Literal["metadata", "redacted", "full"]


@dataclass(frozen=True)
class Team:
    url: str
    machine: str
    user: str
    share: Share

    def __repr__(self) -> str:  # the URL may hold a password
        return f"Team(machine={self.machine!r}, user={self.user!r}, share={self.share!r})"

    @property
    def where(self) -> str:
        """The server without its credentials, for messages: `host:5432/db`."""
        rest = self.url.split("://", 1)[-1]
        return rest.rsplit("@", 1)[-1].split("?", 1)[0]


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def team_of(settings: Settings | TeamSettings | None = None) -> Team | None:
    """The team this machine pushes to, or None when neither `team.url` nor CAPSEM_TEAM_URL is set."""
    if settings is None:
        from capsem.settings import load

        settings = load()
    team = settings.team if isinstance(settings, Settings) else settings
    url = os.environ.get(ENV_URL) or team.url
    if not url:
        return None
    return Team(url, team.machine or socket.gethostname(), team.user or _login(), team.share)  # type: ignore[arg-type]
