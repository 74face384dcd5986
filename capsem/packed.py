"""Text kept zstd-compressed in SQLite and read back in SQL as text: `unzstd(data)`.

The writer stores a `Packed` value scrubbed, then compressed, at commit (like every other text it
writes). Every connection capsem opens (`capsem.schema.connect`) has the `unzstd` SQL function,
so views such as `item_contents` read as plain text in `capsem query-session`, the bundle and the
view; a bare `sqlite3` shell shows the compressed `item_data` table and says `no such function:
unzstd` for the view.
"""

from __future__ import annotations

import sqlite3

import zstandard

LEVEL = 3


class Packed(str):
    """A text column value that the writer stores zstd-compressed (scrubbed first)."""

    __slots__ = ()


def pack(text: str) -> bytes:
    """`text` as UTF-8, zstd-compressed (lone surrogates kept, as the body store keeps them)."""
    return zstandard.compress(text.encode("utf-8", "surrogatepass"), LEVEL)


def unpack(data: bytes | None) -> str | None:
    """The text `pack` stored (the `unzstd` SQL function): NULL stays NULL, undecodable bytes are replaced."""
    if data is None:
        return None
    return zstandard.decompress(data).decode("utf-8", "replace")


def register(conn: sqlite3.Connection) -> None:
    """Give `conn` the `unzstd(data)` SQL function."""
    conn.create_function("unzstd", 1, unpack, deterministic=True)
