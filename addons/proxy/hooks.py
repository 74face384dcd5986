"""What every capsem addon's hooks share: a guard that keeps a capture bug out of mitmproxy, and
the small conversions from mitmproxy's objects to the messages' plain values."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger("addons.proxy.capture")
F = TypeVar("F", bound=Callable[..., Any])


def guarded(hook: F) -> F:
    """Never let a capture bug escape a hook: log it and carry on."""

    @functools.wraps(hook)
    def wrapper(self: Any, *args: Any) -> Any:
        try:
            return hook(self, *args)
        except Exception as exc:
            self.hook_failures += 1
            logger.warning("capsem: %s hook failed: %r", hook.__name__, exc, exc_info=True)
            return None

    return wrapper  # type: ignore[return-value]


def peer(address: Any) -> tuple[str, int] | None:
    return (str(address[0]), int(address[1])) if address else None


def header_fields(fields: tuple[tuple[bytes, bytes], ...]) -> tuple[tuple[str, str], ...]:
    """Header fields (mitmproxy's `headers.fields`) as `headers.items(multi=True)` gives them
    (UTF-8, undecodable bytes surrogate-escaped), each decoded once, in one step."""
    return tuple(
        [(k.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape")) for k, v in fields]
    )


@functools.lru_cache(maxsize=1024)
def authority(raw: bytes) -> str:
    """A request's authority as mitmproxy's `Request.authority` reads it (IDNA, else UTF-8),
    each spelling decoded once (IDNA's codec is slow, and an agent uses a few)."""
    try:
        return raw.decode("idna")
    except UnicodeError:
        return raw.decode("utf8", "surrogateescape")


def addr(address: Any) -> str | None:
    if not address:
        return None
    return f"{address[0]}:{address[1]}"
