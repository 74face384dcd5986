"""Brokered credentials: the agent holds placeholders; capsem puts the real keys in their place,
and only on the way to the hosts each key belongs to.

Each `credentials:` entry (`capsem.settings.Credential`) names the host glob its key belongs to,
where the key goes (one or more headers, or a query parameter) and where capsem reads the real
value (its own environment, or a file only its owner can read: `load_secrets`, at start). For every request,
`Broker.plan` finds the placeholders in its headers, query string and path, and says what to do
with each: `substituted` when the request goes to the entry's host (over https, or to a loopback
host) and the placeholder is where the key goes; otherwise `refused`, with the reason, and the
placeholder goes on unchanged (a prompt-injected agent cannot send the real key anywhere else).
Everything but `load_secrets` is pure: the hook applies the plan to the flow.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from urllib.parse import quote, unquote

from addons.messages import Substitution
from capsem.settings import DEFAULT, Credential, Settings, SettingsError

SUBSTITUTED, REFUSED = "substituted", "refused"
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


@dataclass(frozen=True)
class Brokered:
    """An entry with its real value (kept in memory only)."""

    entry: Credential
    secret: str

    def __repr__(self) -> str:  # never print the value
        return f"Brokered({self.entry.name!r})"


def load_secrets(settings: Settings) -> list[Brokered]:
    """Read every entry's real value from its source.

    Raises:
        SettingsError: a source is missing, empty, or a file others can read (naming the entry).
    """
    origin = settings.origins.get("credentials", DEFAULT)
    out = []
    for entry in settings.credentials.entries:
        key = f"credentials.{entry.name}"
        if entry.env is not None:
            value = os.environ.get(entry.env, "").strip()
            if not value:
                raise SettingsError(origin, f"{key}.env", f"names {entry.env}, which is not set (or empty) in "
                                                          "capsem's environment")  # fmt: skip
        else:
            value = _read_private(origin, f"{key}.file", Path(entry.file or ""))
        if entry.placeholder in value:
            raise SettingsError(
                origin, f"{key}.placeholder", "occurs in the real value: choose another placeholder"
            )
        out.append(Brokered(entry, value))
    return out


def _read_private(origin: str, key: str, path: Path) -> str:
    try:
        info = path.stat()
        if stat.S_IMODE(info.st_mode) & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise SettingsError(
                origin, key, f"{path} must be readable only by you (it is {mode:o}; chmod 600 {path})"
            )
        value = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise SettingsError(origin, key, f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(
            origin, key, f"{path} cannot be read: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    if not value:
        raise SettingsError(origin, key, f"{path} is empty")
    return value


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do with one request's placeholders."""

    headers: dict[str, list[str]]
    """Header name -> all its new values, in order (only headers with a substitution)."""
    query: str | None
    """The new query string (None: unchanged)."""
    events: tuple[Substitution, ...]


class Broker:
    """The configured credentials with their real values; plans each request's substitutions."""

    def __init__(self, brokered: Sequence[Brokered] = ()) -> None:
        self.brokered = tuple(brokered)
        self._by_placeholder = {b.entry.placeholder: b for b in self.brokered}
        marks = sorted(self._by_placeholder, key=len, reverse=True)
        self._pattern = (
            re.compile(r"(?<![A-Za-z0-9_.\-])(?:" + "|".join(map(re.escape, marks)) + r")(?![A-Za-z0-9_.\-])")
            if marks
            else None
        )

    def __bool__(self) -> bool:
        return bool(self.brokered)

    @property
    def secrets(self) -> tuple[str, ...]:
        """The real values (for the scrubber: they must never reach a disk), encoded forms included."""
        values = {b.secret for b in self.brokered} | {quote(b.secret, safe="") for b in self.brokered}
        return tuple(sorted(values))

    def plan(self, *, scheme: str, host: str, path: str, query: str,
             headers: Sequence[tuple[str, str]]) -> Plan | None:  # fmt: skip
        """The substitutions of a request (None when it carries no placeholder)."""
        pattern = self._pattern
        if pattern is None:
            return None
        events: list[Substitution] = []
        new_headers: dict[str, list[str]] = {}
        changed: set[str] = set()
        for name, value in headers:
            lower = name.lower()
            if pattern.search(value):
                new = self._replace(value, scheme, host, ("header", lower), events)
                if new != value:
                    changed.add(lower)
                    value = new
            new_headers.setdefault(lower, []).append(value)
        new_query = None
        if query and pattern.search(query):
            parts = []
            for part in query.split("&"):
                name, eq, value = part.partition("=")
                parts.append(name + eq + self._replace(value, scheme, host, ("query", unquote(name)), events))
            new_query = "&".join(parts)
        for match in pattern.finditer(path):
            self._decide(match.group(), scheme, host, ("path", ""), events)
        if not events:
            return None
        headers_out = {name: values for name, values in new_headers.items() if name in changed}
        return Plan(headers_out, new_query if new_query != query else None, tuple(events))

    def _replace(self, text: str, scheme: str, host: str, where: tuple[str, str],
                 events: list[Substitution]) -> str:  # fmt: skip
        """`text` (a header value, a query value) with each placeholder decided."""
        assert self._pattern is not None
        quoted = where[0] == "query"
        return self._pattern.sub(
            lambda m: self._decide(m.group(), scheme, host, where, events, quoted=quoted), text
        )

    def _decide(self, placeholder: str, scheme: str, host: str, where: tuple[str, str],
                events: list[Substitution], *, quoted: bool = False) -> str:  # fmt: skip
        """Record what happens to one placeholder; return what goes upstream in its place."""
        brokered = self._by_placeholder[placeholder]
        entry = brokered.entry
        location = f"{where[0]} {where[1]}".strip()
        reason = _refusal(entry, scheme, host, where)
        events.append(Substitution(entry.name, location, REFUSED if reason else SUBSTITUTED, reason))
        if reason:
            return placeholder
        return quote(brokered.secret, safe="") if quoted else brokered.secret


KNOWN_PLACES: tuple[tuple[str, frozenset[tuple[str, str]]], ...] = (
    ("api.anthropic.com", frozenset({("header", "x-api-key"), ("header", "authorization")})),
    ("generativelanguage.googleapis.com", frozenset({("header", "x-goog-api-key"), ("query", "key")})),
)
"""Providers that accept their key in more than one place (host, places). An entry for one of them
whose declared place is one of these accepts the key in any of them: the Anthropic SDK sends
`x-api-key` or `Authorization: Bearer` (2.x with an auth token), Gemini clients `x-goog-api-key` or
`?key=`. OpenAI and OpenAI-compatible hosts take only `Authorization`, as declared."""


def accepted_places(entry: Credential) -> frozenset[tuple[str, str]]:
    """Where the key of `entry` may go: its declared headers (each of them: a gateway's clients may
    send it in either) or query parameter, and for a known provider's host (the entry's glob matches
    it) every place that provider reads its key from."""
    declared = (
        frozenset(("header", h) for h in entry.header)
        if entry.header
        else frozenset({("query", entry.query or "")})
    )
    for host, places in KNOWN_PLACES:
        if declared & places and fnmatchcase(host, entry.host.lower()):
            return places | declared
    return declared


def _refusal(entry: Credential, scheme: str, host: str, where: tuple[str, str]) -> str | None:
    """Why the placeholder of `entry` must not be replaced here, or None."""
    host = host.lower().rstrip(".")
    if not fnmatchcase(host, entry.host.lower()):
        return f"{host} is not a host of this credential ({entry.host})"
    if scheme != "https" and host not in _LOOPBACK:
        return "plain http: the key would cross the network in clear"
    places = accepted_places(entry)
    if where not in places:
        named = " or ".join(sorted(" ".join(p) for p in places))
        return f"the key goes in {named}, not in {' '.join(where).strip()}"
    return None


def broker_env(env: Mapping[str, str], brokered: Sequence[Brokered]) -> tuple[dict[str, str], list[str]]:
    """An agent's environment for `capsem run --broker`: each entry's placeholder in its
    `agent_env` variables, and every other variable that holds a real value removed.

    Returns:
        The environment, and the names of the variables removed.
    """
    out = dict(env)
    for b in brokered:
        for name in b.entry.agent_env:
            out[name] = b.entry.placeholder
    removed = sorted(name for name, value in out.items() if any(b.secret in value for b in brokered))
    for name in removed:
        del out[name]
    return out, removed
