"""zstd-compressed content read back in SQL: `unzstd(data)` and `unzstd(data, start, size)`.

Every connection capsem opens (`capsem.store.schema.connect`) has the `unzstd` SQL function, so views
such as `item_contents` (a slice of a compressed `content_frames` row, see addons/recorder/bodies.py) read
as plain text in `capsem query-session`, the bundle and the view. A bare `sqlite3` shell shows the
tables and says `no such function: unzstd` for the views.
"""

from __future__ import annotations

import sqlite3
from functools import lru_cache

import zstandard


@lru_cache(maxsize=16)
def _decompressed(data: bytes) -> bytes:
    """A frame decompressed (the last few kept: the items of one call share a frame)."""
    return zstandard.ZstdDecompressor().decompress(data)


def unzstd(data: bytes | None, start: int | None = None, size: int | None = None) -> str | None:
    """The text of a zstd frame, or of `size` bytes of it from `start`; NULL stays NULL."""
    if data is None:
        return None
    whole = _decompressed(bytes(data))
    part = whole if start is None else whole[start : start + (size if size is not None else len(whole))]
    return part.decode("utf-8", "replace")


def register(conn: sqlite3.Connection) -> None:
    """Give `conn` the `unzstd` SQL function (one and three arguments)."""
    conn.create_function("unzstd", 1, unzstd, deterministic=True)
    conn.create_function("unzstd", 3, unzstd, deterministic=True)
