"""A session's capture health, kept where it survives a full disk.

The recorder stores its loss counts (rows it could not write, failed commits, flows missed while
its process was restarted, messages the hand-over dropped) in `session_meta`. When the disk is
full that write fails too, exactly when the counts matter. So the recorder also keeps them in a
small file beside session.db, `capture-health.json`, allocated (padded with spaces) while there is
still room and then only overwritten in place: rewriting blocks a file already owns needs no new
space. The rollup and `inspect-session` merge it with `session_meta` (the larger count wins), so
a loss is reported even when nothing else about it could be written.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from capsem.private import open_private

logger = logging.getLogger(__name__)

FILE_NAME = "capture-health.json"
SIZE = 4096
COUNTS = ("capture_rows_lost", "capture_commit_failures", "capture_dropped_chunks", "capture_dropped_messages",
          "capture_failed_messages", "capture_missed_flows", "capture_recorder_restarts")  # fmt: skip
"""The integer keys (the larger of the file's and session_meta's value counts)."""


def reserve(folder: Path) -> None:
    """Allocate the file (once per session; a restarted recorder keeps what is in it)."""
    path = folder / FILE_NAME
    if path.exists():
        return
    try:
        with open_private(path, "wb") as out:
            out.write(b"{}" + b" " * (SIZE - 2))
    except OSError as exc:
        logger.warning("capsem: cannot reserve %s: %s", path, exc)


def write(folder: Path, values: dict[str, str]) -> None:
    """Overwrite the file in place with `values` (never grows it; a failure is logged)."""
    data = json.dumps(values, separators=(",", ":")).encode()[: SIZE - 1]
    path = folder / FILE_NAME
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return  # never reserved (no room even at the start): session_meta is all there is
    try:
        os.pwrite(fd, data + b" " * (SIZE - len(data)), 0)
    except OSError as exc:
        logger.warning("capsem: cannot update %s: %s", path, exc)
    finally:
        os.close(fd)


def read(folder: Path) -> dict[str, str]:
    """The values in the file ({} when there is none or it cannot be read)."""
    try:
        data = json.loads((folder / FILE_NAME).read_bytes() or b"{}")
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def merged(meta: dict[str, str], folder: Path | None) -> dict[str, str]:
    """`session_meta`'s capture values with the file's: the larger of each count, the file's last
    error when session_meta has none."""
    found = read(folder) if folder is not None else {}
    out = dict(meta)
    for key, value in found.items():
        if key in COUNTS:
            out[key] = str(max(_int(out.get(key)), _int(value)))
        elif key.startswith("capture_") and not out.get(key):
            out[key] = value
    return out


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0
