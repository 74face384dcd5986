"""Workspace file changes during `capsem run`, recorded as `fs_events`.

A watchfiles watcher (inotify/FSEvents, debounced) runs on its own thread and writes each batch
of changes through the session's `SessionWriter` (scrubbed, one transaction, kept and retried
when the database is busy): `created`, `modified` or `deleted`, the path relative to the
workspace, and the size (NULL for deletes). `.git` internals are ignored, and so is capsem's own
folder (`$CAPSEM_HOME`: its databases, logs and CA) when it lies inside the workspace; several
changes to one path within a batch are folded into one row.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import watchfiles

from addons.recorder.rows import FsEvent, new_event_id
from addons.recorder.writer import SessionWriter
from capsem.ids import utc_now

logger = logging.getLogger(__name__)

_ACTIONS = {watchfiles.Change.added: "created", watchfiles.Change.modified: "modified",
            watchfiles.Change.deleted: "deleted"}  # fmt: skip


def fold(changes: set[tuple[watchfiles.Change, str]], root: Path) -> list[tuple[str, str, int | None]]:
    """(action, relative path, size) per path: a create followed by edits stays `created`."""
    by_path: dict[str, str] = {}
    for change, path in sorted(changes, key=lambda c: (c[1], c[0].value)):
        action = _ACTIONS[change]
        if by_path.get(path) == "created" and action == "modified":
            continue
        by_path[path] = action
    rows = []
    for path, action in sorted(by_path.items()):
        full = Path(path)
        if action != "deleted" and full.is_dir():
            continue
        try:
            size = None if action == "deleted" else full.stat().st_size
        except OSError:
            action, size = "deleted", None
        rows.append((action, os.path.relpath(full, root), size))
    return rows


class _Filter(watchfiles.DefaultFilter):
    """watchfiles' default filter (`.git` ignored), and nothing under the `skip` folders."""

    def __init__(self, skip: tuple[Path, ...]) -> None:
        super().__init__(ignore_dirs=(".git",), ignore_entity_patterns=())
        self.skip = tuple(str(p) + os.sep for p in skip)

    def __call__(self, change: watchfiles.Change, path: str) -> bool:
        return not (path + os.sep).startswith(self.skip) and super().__call__(change, path)


class WorkspaceWatcher:
    def __init__(
        self, root: Path, db_path: Path, *, debounce_ms: int = 100, skip: tuple[Path, ...] | None = None
    ) -> None:
        """`skip`: folders whose changes are not the agent's (default: `$CAPSEM_HOME`)."""
        from capsem.paths import capsem_home

        self.skip = tuple(p.resolve() for p in (skip if skip is not None else (capsem_home(),)))
        self.root = root.resolve()
        self.db_path = db_path
        self.debounce_ms = debounce_ms
        self.events = 0
        self._writer: SessionWriter | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="capsem-fswatch", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(5)

    def stop(self) -> None:
        """Let the last debounce window pass, then stop and wait for the last batch to be written."""
        self._stop.wait((self.debounce_ms + 200) / 1000)
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        watch_filter = _Filter(self.skip)
        self._ready.set()
        try:
            for changes in watchfiles.watch(self.root, watch_filter=watch_filter, debounce=self.debounce_ms,
                                            step=50, stop_event=self._stop, raise_interrupt=False):  # fmt: skip
                self._write(fold(changes, self.root))
        except Exception as exc:  # the agent must go on even if watching fails
            logger.warning("capsem: watching %s failed: %r", self.root, exc)
        finally:
            if self._writer is not None:
                self._write([])
                self._writer.close(checkpoint=False)

    def _write(self, rows: list[tuple[str, str, int | None]]) -> None:
        if self._writer is None:
            self._writer = SessionWriter(self.db_path)
        now = utc_now()
        self._writer.add(FsEvent(new_event_id(), now, *row) for row in rows)
        before = self._writer.written
        if self._writer.commit():
            self.events += self._writer.written - before
