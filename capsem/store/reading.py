"""Opening a session's database file for reading, plain or gzipped.

A finished session's `session.db` becomes `session.db.gz` once vacuumed; readers on both sides
(the offline commands through `assembler.sessiondb`, the team pusher beside the recorder) open it
here, decompressed to a temporary file that is removed on close.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from capsem.paths import session_dir
from capsem.store.schema import connect

DB_NAME = "session.db"
GZ_NAME = "session.db.gz"


class SessionDbError(RuntimeError):
    """A session database that exists but cannot be opened (e.g. a damaged .gz)."""


def db_file(session_id: str) -> Path | None:
    """The session's database file (`session.db`, else `session.db.gz`), if one exists."""
    folder = session_dir(session_id)
    for name in (DB_NAME, GZ_NAME):
        if (folder / name).is_file():
            return folder / name
    return None


def decompress(gz_path: Path, dest: Path) -> None:
    """Gunzip `gz_path` into `dest`.

    Raises:
        SessionDbError: when the archive is damaged.
    """
    try:
        with gzip.open(gz_path, "rb") as src, open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (OSError, EOFError, zlib.error) as exc:
        raise SessionDbError(f"cannot decompress {gz_path}: {exc}") from exc


@contextmanager
def open_path(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection (`mode=ro`, `query_only`) to a database file, gzipped or not."""
    tmp_dir: str | None = None
    if path.name.endswith(".gz"):
        tmp_dir = tempfile.mkdtemp(prefix="capsem-gz-")
        target = Path(tmp_dir) / path.name.removesuffix(".gz")
        try:
            decompress(path, target)
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
        path = target
    try:
        try:
            conn = connect(path, readonly=True)
        except sqlite3.Error as exc:
            raise SessionDbError(f"cannot open {path}: {exc}") from exc
        try:
            yield conn
        finally:
            conn.close()
    finally:
        if tmp_dir is not None:
            shutil.rmtree(tmp_dir, ignore_errors=True)
