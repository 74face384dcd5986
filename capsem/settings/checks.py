"""The settings' small validation language: what each key allows, and the one-line errors.

A `Check` pairs what a key allows, as the error line says it (`a whole number of bytes`), with the
function that turns a YAML value into the typed one or raises `_Bad` naming the dotted key.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from capsem.config import ConfigError

_HEADER_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class SettingsError(ConfigError):
    """A bad setting, as one line: `<file>: <dotted.key> must be <what is allowed>, got <value>`."""

    def __init__(self, origin: str, key: str | None, problem: str) -> None:
        self.origin = origin
        """The file the bad value is in (or `--set`)."""
        self.key = key
        """The dotted key (`capture.preview_bytes`, `policy.rules[2].port`); None for the whole file."""
        self.problem = problem
        super().__init__(f"{origin}: {key} {problem}" if key else f"{origin}: {problem}")


# --- checks: what each key allows -------------------------------------------------------------


class _Bad(Exception):
    """A check's refusal of the value at `key` (a dotted key, maybe deeper: `policy.rules[2].port`)."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(problem)
        self.key = key
        self.problem = problem


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _must(key: str, allowed: str, value: Any) -> _Bad:
    return _Bad(key, f"must be {allowed}, got {_shown(value)}")


def _unknown(prefix: str, names: Sequence[str], what: str, listing: str, allowed: Sequence[str]) -> _Bad:
    """`<prefix><name> is not a <what> (did you mean ...?); <listing>: <allowed>` (or several names)."""
    if len(names) == 1:
        name = names[0]
        close = sorted((a for a in allowed if name.startswith(a) or a.startswith(name)), key=len)[-1:]
        close = close or difflib.get_close_matches(name, allowed, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return _Bad(prefix + names[0], f"is not a {what}{hint}; {listing}: {', '.join(allowed)}")
    return _Bad(", ".join(prefix + n for n in names), f"are not {what}s; {listing}: {', '.join(allowed)}")


@dataclass(frozen=True)
class Check:
    allowed: str
    """What the key allows, as the error line says it (`a whole number of bytes`)."""
    parse: Callable[[str, Any], Any]
    """(dotted key, YAML value) -> the typed value; raises _Bad."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(unit: str, minimum: int = 0, *, off: bool = False) -> Check:
    """A whole number >= `minimum`; with `off`, 0 or null means "no limit" (None)."""
    allowed = f"a whole number of {unit}" + (f" >= {minimum}" if minimum else "")
    allowed += " (0 or null: no limit)" if off else ""

    def parse(key: str, value: Any) -> int | None:
        if off and value is None:
            return None
        if not _is_number(value) or value != int(value) or value < minimum:
            raise _must(key, allowed, value)
        return None if off and value == 0 else int(value)

    return Check(allowed, parse)


def _amount(unit: str, *, off: bool = False) -> Check:
    """A number >= 0; with `off`, 0 or null means "no limit" (None)."""
    allowed = f"a number of {unit} >= 0" + (" (0 or null: no limit)" if off else "")

    def parse(key: str, value: Any) -> float | None:
        if off and value is None:
            return None
        if not _is_number(value) or value < 0:
            raise _must(key, allowed, value)
        return None if off and value == 0 else value

    return Check(allowed, parse)


def _flag() -> Check:
    def parse(key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise _must(key, "true or false", value)
        return value

    return Check("true or false", parse)


def _names(item: str) -> Check:
    """A list of `item`s (text), kept lower-cased as a frozenset."""
    allowed = f"a list of {item}s"

    def parse(key: str, value: Any) -> frozenset[str]:
        if value is None:
            return frozenset()
        if not isinstance(value, list):
            raise _must(key, allowed, value)
        for n, name in enumerate(value, 1):
            if not isinstance(name, str) or not name:
                raise _must(f"{key}[{n}]", f"a {item}", name)
        return frozenset(name.lower() for name in value)

    return Check(allowed, parse)


def _choice(*allowed_values: str) -> Check:
    allowed = "one of " + ", ".join(allowed_values)

    def parse(key: str, value: Any) -> str:
        if value not in allowed_values:
            raise _must(key, allowed, value)
        return value

    return Check(allowed, parse)


def _url(*, off: bool = False) -> Check:
    """An http(s) URL; with `off`, null or "" means none (None)."""
    allowed = "an http:// or https:// URL" + (" (null: off)" if off else "")

    def parse(key: str, value: Any) -> str | None:
        if off and value in (None, ""):
            return None
        if not isinstance(value, str) or not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            raise _must(key, allowed, value)
        return value

    return Check(allowed, parse)


def _postgres_url() -> Check:
    """A `postgresql://` (or `postgres://`) URL, or null / "" for none (None)."""
    allowed = "a postgresql:// URL (null: no team)"

    def parse(key: str, value: Any) -> str | None:
        if value in (None, ""):
            return None
        if not isinstance(value, str) or not re.fullmatch(r"postgres(ql)?://\S+", value):
            raise _must(key, allowed, "a URL that is not postgresql://" if isinstance(value, str) else value)
        return value

    return Check(allowed, parse)


def _name(what: str) -> Check:
    """A short single-line name, or null for the default (None)."""
    allowed = f"a {what} (one line, at most 100 characters; null: the default)"

    def parse(key: str, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip() or len(value) > 100 or "\n" in value:
            raise _must(key, allowed, value)
        return value.strip()

    return Check(allowed, parse)


def _header_map() -> Check:
    """A mapping of header names to text values, names kept lower-cased."""
    allowed = "a mapping of header names to values"

    def parse(key: str, value: Any) -> Mapping[str, str]:
        if value is None:
            return MappingProxyType({})
        if not isinstance(value, Mapping):
            raise _must(key, allowed, value)
        for name, text in value.items():
            if not isinstance(name, str) or not _HEADER_RE.fullmatch(name):
                raise _must(f"{key}.{name}", "a header name", name)
            if not isinstance(text, str):
                raise _must(f"{key}.{name}", "text", text)
        return MappingProxyType({str(name).lower(): text for name, text in value.items()})

    return Check(allowed, parse)


def _listed(entry: Callable[[str, int, Any], Any], allowed: str) -> Check:
    """A list of entries, each parsed by `entry(key, n, raw)` at `key[n]` (n from 1)."""

    def parse(key: str, value: Any) -> tuple[Any, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise _must(key, allowed, value)
        return tuple(entry(f"{key}[{n}]", n, raw) for n, raw in enumerate(value, 1))

    return Check(allowed, parse)


def _glob(key: str, value: Any) -> str | None:
    if value is not None and not (isinstance(value, str) and value):
        raise _must(key, "a glob (text)", value)
    return value


def _fields_of(key: str, raw: Any, what: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    """`raw` as a mapping holding only `allowed` fields (raises _Bad naming the first unknown one)."""
    if not isinstance(raw, Mapping):
        raise _must(key, f"a mapping of {what} fields ({', '.join(allowed)})", raw)
    unknown = [str(k) for k in raw if k not in allowed]
    if unknown:
        raise _unknown(f"{key}.", unknown, f"{what} field", f"a {what} has", allowed)
    return raw


def _one_of(key: str, raw: Mapping[str, Any], first: str, second: str, problem: str) -> tuple[Any, Any]:
    """The values of two fields of which exactly one must be given (raises _Bad with `problem`)."""
    a, b = raw.get(first), raw.get(second)
    if (a is None) == (b is None):
        raise _Bad(key, f"{problem}, got {_shown(dict(raw))}")
    return a, b


def _named(entry: Callable[[str, str, Any], Any], what: str) -> Check:
    """A mapping of named entries (`budgets:`), each parsed by `entry(key, name, raw)`, kept in order."""
    allowed = f"a mapping of {what} names to their fields"

    def parse(key: str, value: Any) -> tuple[Any, ...]:
        if value is None:
            return ()
        if not isinstance(value, Mapping):
            raise _must(key, allowed, value)
        out = tuple(entry(f"{key}.{name}", str(name), raw) for name, raw in value.items())
        seen: dict[str, str] = {}
        for item in out:  # a credential's placeholder must say which entry it stands for
            mark = getattr(item, "placeholder", None)
            if mark is not None and mark in seen:
                raise _Bad(f"{key}.{item.name}.placeholder", f"is the placeholder of {key}.{seen[mark]} too")
            seen[mark or item.name] = item.name
        return out

    return Check(allowed, parse)
