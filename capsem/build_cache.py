"""Derived data built once per install, not once per process (Hyperscan databases, the tokenizer).

Every mitmdump, recorder and CLI process used to build the same things from the same inputs at
start: the scrubber's Hyperscan databases (~80 ms of CPU a process) and the token estimator's
ranks (~0.1 s). `cached(kind, key, build)` keeps the bytes `build()` returns in a file named by a
hash of `kind` and `key` (the inputs, the library's version), so a changed input or library never
reads a stale entry; the caller still checks what it reads (a database that does not load, ranks
that are not ranks) and builds afresh then.

The directory is `$CAPSEM_CACHE_DIR`, else `var/cache/capsem` under the Python environment capsem
runs in (`sys.prefix`): whoever may write there may already rewrite capsem's code, so a cache
entry is trusted no more and no less than the code that reads it (a cache under `$HOME` could be
rewritten by the agent being recorded, and a rewritten scrubber database would let secrets
through). Nothing is kept when the directory cannot be written (a read-only install): the data is
then built in each process, as before. Files are private (0600) and replaced atomically, so
processes starting at once never read half an entry.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from capsem.private import DIR_MODE, FILE_MODE

logger = logging.getLogger(__name__)


def cache_dir() -> Path:
    """`$CAPSEM_CACHE_DIR`, else `<sys.prefix>/var/cache/capsem`."""
    env = os.environ.get("CAPSEM_CACHE_DIR")
    return Path(env).expanduser() if env else Path(sys.prefix) / "var" / "cache" / "capsem"


def entry_path(kind: str, key: bytes) -> Path:
    """The file holding `kind`'s entry for `key`."""
    digest = hashlib.sha256(kind.encode() + b"\0" + key).hexdigest()[:32]
    return cache_dir() / f"{kind}-{digest}"


def read(kind: str, key: bytes) -> bytes | None:
    """The bytes kept for (`kind`, `key`), or None."""
    try:
        return entry_path(kind, key).read_bytes()
    except OSError:
        return None


def write(kind: str, key: bytes, data: bytes) -> None:
    """Keep `data` for (`kind`, `key`); a directory that cannot be written keeps nothing (logged
    at debug level: a read-only install is normal)."""
    path = entry_path(kind, key)
    try:
        path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{kind}-")
        try:
            os.fchmod(fd, FILE_MODE)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        logger.debug("capsem: cannot keep %s in %s: %r", kind, path.parent, exc)


def cached(kind: str, key: bytes, build: Callable[[], bytes]) -> bytes:
    """The bytes kept for (`kind`, `key`), else `build()`'s, kept for the next process."""
    data = read(kind, key)
    if data is None:
        data = build()
        write(kind, key, data)
    return data
