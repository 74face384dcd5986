"""Files only the user reads: `$CAPSEM_HOME` and every folder capsem makes 0700, every file it
writes 0600, whatever the umask.

What capsem keeps (prompts, answers, tool results, paths, logs) is as private as a shell history,
so it never relies on the umask (022 leaves files readable by every local user, 000 writable
too): folders are made with mode 0700 level by level (`Path.mkdir(parents=True)` would make the
missing parents with the umask's mode), files are created with mode 0600 (`os.open`), and a
SQLite database is created empty with 0600 before SQLite opens it, since SQLite gives its `-wal`,
`-shm` and `-journal` files the database file's mode. An existing file written again is set back
to 0600; an existing folder is left as it is (`capsem doctor` warns about one others can read).

The processes capsem starts for itself (mitmdump for `capsem run`, the recorder) run with the
umask `CHILD_UMASK`, so what they and their libraries write (mitmproxy's CA, SQLite's files) is
private too; the agent `capsem run` starts keeps the user's umask.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

DIR_MODE = 0o700
FILE_MODE = 0o600
CHILD_UMASK = 0o077
"""The umask of the processes capsem starts for itself (never the agent's)."""
OPEN_TO_OTHERS = 0o077
"""The mode bits that let the group or other users in."""


def private_dir(path: Path) -> Path:
    """`path` as a folder, it and each missing parent made with mode 0700 (an existing one is kept)."""
    missing = []
    for level in (path, *path.parents):
        if level.exists() or level.is_symlink():  # (a file there: mkdir says it is not a folder)
            break
        missing.append(level)
    for level in reversed(missing):
        try:
            level.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not level.is_dir():
                raise
            continue
        os.chmod(level, DIR_MODE)  # mkdir's mode is masked by the umask: 0700 whatever it is
    return path


def private_file(path: Path) -> Path:
    """`path` created empty with mode 0600 when it does not exist (before SQLite, or a library that
    writes it with the umask's mode, opens it); an existing file is left as it is."""
    private_dir(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        pass
    return path


def make_private(path: Path) -> Path:
    """Set a file some library wrote (a temporary file before its rename) to mode 0600."""
    os.chmod(path, FILE_MODE)
    return path


_FLAGS = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
          "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}  # fmt: skip


def open_private(path: Path | str, mode: str = "w", **kwargs: Any) -> IO[Any]:
    """`open(path, mode)` for writing ("w", "a", "x", with "b" for bytes), the file mode 0600 even
    when it existed with another."""
    fd = os.open(path, _FLAGS[mode.replace("b", "").replace("+", "")], FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def write_private(
    path: Path, data: str | bytes, *, encoding: str = "utf-8", newline: str | None = None
) -> Path:
    """`path.write_text(data)` / `path.write_bytes(data)` with mode 0600."""
    if isinstance(data, bytes):
        with open_private(path, "wb") as out:
            out.write(data)
    else:
        with open_private(path, "w", encoding=encoding, newline=newline) as out:
            out.write(data)
    return path


def open_to_others(path: Path) -> bool:
    """Whether the group or other users may read, write or enter `path`."""
    return bool(path.stat().st_mode & OPEN_TO_OTHERS)
