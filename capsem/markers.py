"""The keyed hash behind every `hash:…` and `[redacted hash:…]` capsem writes.

A marker must let a reader see that two places held the same secret (the same key in a header
and in a prompt) without giving the secret back. A plain SHA-256 gives it back for anything a
wordlist holds (`Summer2024!`), in every export that leaves the machine too. So every marker and
every content hash that could stand for a short secret is keyed by 32 random bytes kept in
`$CAPSEM_HOME/hash.key` (created once, mode 0600): the same secret gives the same marker within
one installation, and nothing outside it can test a guess. Markers are keyed BLAKE2b digests
(`keyed_hex`); the identities of whole bodies and items, megabytes on the recorder's hot path,
are HMAC-SHA-256 (`content_hex`: SHA-256 runs in the CPU's own instructions on x86-64 and ARMv8,
~2.7× BLAKE2b's speed on the development VM).

When the key cannot be kept (a read-only `$CAPSEM_HOME`), a random key for this process is used
and a warning logged: markers then correlate only within the process, and are still not
reversible.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import hmac
import logging
import os
import re
import secrets
from pathlib import Path

from capsem.paths import capsem_home
from capsem.private import private_dir

logger = logging.getLogger(__name__)

KEY_FILE = "hash.key"
KEY_BYTES = 32
HASH_PREFIX = "hash:"
MARKER_RE = re.compile(r"\[redacted hash:[0-9a-f]{12}\]")
MARKER_SPLIT_RE = re.compile(r"(\[redacted hash:[0-9a-f]{12}\])")


def key_path(home: Path | None = None) -> Path:
    return (home or capsem_home()) / KEY_FILE


@functools.lru_cache(maxsize=8)
def _key_for(path: str) -> bytes:
    file = Path(path)
    try:
        return _read(file)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        logger.warning(
            "capsem: cannot read the hash key %s (%s); markers hold for this process only", file, exc
        )
        return secrets.token_bytes(KEY_BYTES)
    try:
        private_dir(file.parent)
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first
        return _read(file)
    except OSError as exc:
        logger.warning("capsem: cannot create the hash key %s (%s); markers hold for this process only",
                       file, exc.strerror or exc)  # fmt: skip
        return secrets.token_bytes(KEY_BYTES)
    key = secrets.token_bytes(KEY_BYTES)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(key.hex() + "\n")
    except OSError as exc:  # a full disk: no half-written key left behind for the next process
        file.unlink(missing_ok=True)
        logger.warning("capsem: cannot write the hash key %s (%s); markers hold for this process only",
                       file, exc.strerror or exc)  # fmt: skip
    return key


def _read(file: Path) -> bytes:
    key = bytes.fromhex(file.read_text().strip())
    if len(key) != KEY_BYTES:
        raise ValueError(f"{file} holds {len(key)} bytes, not {KEY_BYTES}")
    return key


def installation_key() -> bytes:
    """This installation's key (`$CAPSEM_HOME/hash.key`, made on first use)."""
    return _key_of_home(os.environ.get("CAPSEM_HOME", ""))


@functools.lru_cache(maxsize=8)
def _key_of_home(_home: str) -> bytes:
    """The key, looked up once per value of CAPSEM_HOME (hashing is on the recorder's hot path)."""
    return _key_for(str(key_path()))


def keyed_hex(data: bytes, chars: int) -> str:
    """The first `chars` hex digits of the keyed BLAKE2b digest of `data`."""
    return hashlib.blake2b(data, key=installation_key(), digest_size=32).hexdigest()[:chars]


def content_hex(data: bytes, chars: int) -> str:
    """The first `chars` hex digits of the HMAC-SHA-256 of `data` with the installation key: the
    keyed identity of a body or an item (its stored content is scrubbed; this hash is of what
    came, so a history item matches the answer it repeats)."""
    return hmac.digest(installation_key(), data, "sha256").hex()[:chars]


def hash_value(value: str | bytes) -> str:
    """`hash:` + 12 hex chars of the keyed hash of `value`: what a hashed header or query value is
    stored as, and what a redaction marker names."""
    if isinstance(value, str):
        try:
            data = value.encode("utf-8", "surrogateescape")  # bytes that were not UTF-8, as they came
        except UnicodeEncodeError:  # a lone surrogate (a JSON `\ud800` escape): hashed, never refused
            data = value.encode("utf-8", "surrogatepass")
    else:
        data = value
    return HASH_PREFIX + keyed_hex(data, 12)


def redacted(secret: str) -> str:
    """The marker that takes a secret's place in stored text."""
    return f"[redacted {hash_value(secret)}]"


def outside_markers(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` (sorted) less the redaction markers already in `text`: a value another pass redacted
    part of (`sig=/hooks/[redacted …]`) has only the rest redacted, never a marker cut in two, so a
    second scrub finds nothing left to do."""
    if not spans or "[redacted hash:" not in text:
        return spans
    markers = [m.span() for m in MARKER_RE.finditer(text)]
    ends = [e for _, e in markers]
    out: list[tuple[int, int]] = []
    for start, end in spans:
        for m_start, m_end in markers[bisect.bisect_right(ends, start) :]:
            if m_start >= end:
                break
            if m_start > start:
                out.append((start, m_start))
            start = max(start, m_end)
        if start < end:
            out.append((start, end))
    return out
