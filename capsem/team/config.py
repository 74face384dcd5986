"""Who this machine is in the team, where the team's PostgreSQL is, and what is shared: the
`team:` settings with their defaults filled in (`CAPSEM_TEAM_URL` wins over `team.url`)."""

from __future__ import annotations

import getpass
import os
import re
import socket
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

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

    def said(self, exc: BaseException) -> str:
        """What a failed connection or statement said, without the URL's password: libpq quotes a
        URL it cannot read (`... in URI: "postgresql://u:pw@[::1/db"`) or the token it stumbled on
        (`invalid percent-encoded token: "pw%zz"`)."""
        text = str(exc) or repr(exc)
        for secret in _passwords(self.url):
            text = text.replace(secret, "[redacted]")
        return text


def _passwords(url: str) -> list[str]:
    """The password a postgresql:// URL holds, as written and percent-decoded: in its user info
    (`user:PASSWORD@`) or a `password` or `sslpassword` parameter; the longest first."""
    rest = url.split("://", 1)[-1]
    found = []
    for part in (rest.split("/", 1)[0].split("?", 1)[0], rest):  # the authority; all of it if odd
        userinfo = part.rsplit("@", 1)[0] if "@" in part else ""
        found.append(userinfo.split(":", 1)[1] if ":" in userinfo else "")
    found += re.findall(r"(?:^|[?&\s])(?:ssl)?password=([^&\s]+)", rest)
    found += [unquote(s) for s in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


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
