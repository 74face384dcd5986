"""The canonical request: what a request means, decided once, so that no rule can be walked round by
writing the same request another way (issue 33).

Pure: strings in, frozen values out; no mitmproxy. The proxy computes it once per flow at
`requestheaders` (`addons/proxy/flows.py`), the policy decides on it (`addons/proxy/policy.py`), the
record keeps the path as sent with its canonical form beside it, and `capsem policy test` runs the
same functions on recorded rows (`assembler/backtest.py`). Envoy is the anchor: it normalizes the
path once at the edge before any filter runs (`normalize_path`, `merge_slashes`,
`path_with_escaped_slashes_action`). Unlike Envoy, capsem forwards the request exactly as sent;
the canonical form only decides.

The path (`path_readings`), in this order:
1. the fragment (`#...`) is dropped; a path that does not start with `/` gets one (`*` stays `*`);
2. percent-encoded unreserved characters (`A-Z a-z 0-9 - . _ ~`, upper- or lower-case hex) are
   decoded, once: `%2561` stays `%2561` (a server decodes once; decoding twice would decide on a
   path no server sees); every other escape is upper-cased (`%3b` -> `%3B`);
3. `;params` are set aside from each segment (`/admin;x=1/users`, Tomcat's `/..;/admin`);
4. repeated slashes are merged and dot segments removed (RFC 3986 §5.2.4; `..` stops at the root).
Escaped slashes (`%2F`, `%5C`) and backslashes are read two ways, as servers differ: as `/` (what
Python's http.server, IIS and a server that decodes before routing see; Envoy's
UNESCAPE_AND_FORWARD with backslash translation) and as part of their segment (Envoy's default,
KEEP_UNCHANGED; Tomcat sets `;params` aside before it decodes). The first reading is *the*
canonical path; the second is added only when it differs. A rule that denies, asks or warns
matches when any reading matches, an allow only when every reading does.

A host (`canonical_name`): port and brackets removed, lower-cased, trailing dots removed,
IDNA-encoded (Python's codec, the one mitmproxy's own connection resolves with). An IP literal in
any spelling glibc's `inet_aton` accepts (what curl and most clients resolve: `127.1`,
`2130706433`, `0x7f000001`, `0x7f.1`, `0177.0.0.1`) or any IPv6 spelling is one `ipaddress` address;
an IPv4-mapped IPv6 address (`::ffff:127.0.0.1`, `[::ffff:7f00:1]`) is its IPv4 address.
`localhost` and the names under it (RFC 6761) are loopback, as are 127.0.0.0/8 and ::1: a rule on
either spelling covers the other (`HostPattern`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
LOOPBACK = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))
"""What `localhost` resolves to (RFC 6761), for address rules."""

_NEEDS_WORK = re.compile(r"[%\\;#]|//|/\.\.?(?:/|$)")
"""A path without any of these is its own canonical form (the common case: no work per request)."""
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_SLASHES = re.compile(r"%2F|%5C|\\")
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_DIGITS = {8: frozenset("01234567"), 10: frozenset("0123456789"), 16: frozenset("0123456789abcdefABCDEF")}


def split_target(target: str) -> tuple[str, str]:
    """(path exactly as sent, query): a request target split at its first `?` only (a `//x` at
    its start is a path, never a host)."""
    path, _, query = target.partition("?")
    return path, query


def _escape(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in UNRESERVED else "%" + match.group(1).upper()


def _segments(path: str) -> str:
    """`;params` set aside per segment, repeated slashes merged, dot segments removed (`path`
    starts with `/`)."""
    out: list[str] = []
    last = ""
    for segment in path.split("/")[1:]:
        last = segment.split(";", 1)[0]
        if last == "..":
            if out:
                out.pop()
        elif last not in (".", ""):
            out.append(last)
    trailing = "/" if out and last in ("", ".", "..") else ""
    return "/" + "/".join(out) + trailing


def path_readings(path: str) -> tuple[str, ...]:
    """The canonical path, then (only when it differs) the reading that keeps escaped slashes and
    backslashes inside their segment. `path` is without the query."""
    if not path.startswith("/"):
        if path == "*":
            return (path,)
        path = "/" + path
    if _NEEDS_WORK.search(path) is None:
        return (path,)
    decoded = _ESCAPE.sub(_escape, path.split("#", 1)[0])
    split = _segments(_SLASHES.sub("/", decoded))
    kept = _segments(decoded)
    return (split,) if kept == split else (split, kept)


def canonical_path(path: str) -> str:
    """The canonical form of a path (without its query): see the module's docstring."""
    return path_readings(path)[0]


# --- hosts and addresses -------------------------------------------------------------------------


def _inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """An IPv4 address as glibc's `inet_aton` reads it (1 to 4 parts, each decimal, 0x-hex or
    0-octal, the last filling the bytes left), else None."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = []
    for part in parts:
        if part[:2] in ("0x", "0X"):
            digits, base = part[2:] or "0", 16
        elif len(part) > 1 and part[0] == "0":
            digits, base = part[1:], 8
        else:
            digits, base = part, 10
        if not digits or not set(digits) <= _DIGITS[base]:
            return None
        values.append(int(digits, base))
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = last
    for n, value in enumerate(head):
        number |= value << (8 * (3 - n))
    return ipaddress.IPv4Address(number)


def parse_address(host: str) -> Address | None:
    """The address an IP literal names, in any spelling (an IPv4-mapped IPv6 address as IPv4), or
    None for a name. `host` is without port or brackets."""
    if ":" in host:
        try:
            address = ipaddress.IPv6Address(host.partition("%")[0])  # a zone id names no other host
        except ValueError:
            return None
        return address.ipv4_mapped or address
    if host and (host[0].isdigit() or host[-1].isdigit()):
        return _inet_aton(host)
    return None


def _idna(host: str) -> str:
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:  # an empty or overlong label: no resolver would find it; keep the text
        return host


@dataclass(frozen=True, slots=True)
class Name:
    """One name a request carries, canonical: `host` is the lower-case IDNA name or the address's
    own text (`127.0.0.1` for `0x7f000001`)."""

    host: str
    address: Address | None = None

    @property
    def loopback(self) -> bool:
        if self.address is not None:
            return self.address.is_loopback
        return self.host == "localhost" or self.host.endswith(".localhost")


def _host_of(authority: str) -> str:
    """The host of `[user@]host[:port]`, `[v6][:port]` or a bare IPv6 address."""
    host = authority.strip().rpartition("@")[2]
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


@lru_cache(maxsize=4096)  # an agent talks to a few hosts: each spelling is read once, not per request
def canonical_name(authority: str) -> Name | None:
    """The canonical name of a host as a request carries it (Host header, SNI, `:authority`, URI
    or CONNECT target, with or without a port); None when empty."""
    host = _idna(_host_of(authority).rstrip(".").lower())  # first: nameprep maps `１２７.１` to `127.1`
    if not host:
        return None
    address = parse_address(host)
    return Name(host) if address is None else Name(str(address), address)


@dataclass(frozen=True, slots=True)
class CanonicalRequest:
    """What the policy decides on: every name the request carries and every reading of its path."""

    method: str
    port: int
    paths: tuple[str, ...]
    """The canonical path first (see `path_readings`)."""
    names: tuple[Name, ...]
    """The destination (where the proxy connects) first, then every other name it carries."""

    @property
    def path(self) -> str:
        return self.paths[0]

    @classmethod
    def of(cls, method: str, port: int, path: str, names: Iterable[str]) -> CanonicalRequest:
        """`path` as sent (without the query); `names` as carried (the destination first)."""
        return _canonical_request(method, port, path, tuple(names))


@lru_cache(maxsize=4096)  # an agent sends the same few requests again and again: each read once
def _canonical_request(method: str, port: int, path: str, names: tuple[str, ...]) -> CanonicalRequest:
    canonical: list[Name] = []
    for text in dict.fromkeys(names):  # the same spelling is read once
        name = canonical_name(text)
        if name is not None and name not in canonical:
            canonical.append(name)
    return CanonicalRequest(method.upper(), port, path_readings(path), tuple(canonical) or (Name(""),))


@dataclass(frozen=True, slots=True)
class HostPattern:
    """A rule's `host`: an address or CIDR range (any spelling `canonical_name` reads), or a glob
    on the canonical name (lower-cased, trailing dots removed, IDNA-encoded)."""

    glob: str | None = None
    network: Network | None = None

    @classmethod
    def of(cls, text: str) -> HostPattern:
        """Raises ValueError for a `/` range that is no CIDR range."""
        value = text.strip()
        if "/" in value:
            return cls(network=_unmapped(ipaddress.ip_network(value.strip("[]"), strict=False)))
        address = parse_address(_idna(_host_of(value).rstrip(".").lower()))
        if address is not None:
            return cls(network=ipaddress.ip_network(address))
        glob = value.rstrip(".").lower()
        return cls(glob=".".join(_idna(label) if not any(c in label for c in "*?[") else label
                                 for label in glob.split(".")))  # fmt: skip

    def matches(self, name: Name) -> bool:
        if self.network is not None:
            if name.address is not None:
                return name.address in self.network
            return name.loopback and any(a in self.network for a in LOOPBACK)
        assert self.glob is not None
        return fnmatchcase(name.host, self.glob) or (name.loopback and fnmatchcase("localhost", self.glob))


def _unmapped(network: Network) -> Network:
    """An IPv4-mapped IPv6 range as the IPv4 range it maps (addresses are compared unmapped)."""
    if isinstance(network, ipaddress.IPv6Network) and network.prefixlen >= 96 and network.subnet_of(_MAPPED):
        base = network.network_address.ipv4_mapped
        assert base is not None
        return ipaddress.IPv4Network(f"{base}/{network.prefixlen - 96}")
    return network
