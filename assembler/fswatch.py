"""Workspace file changes during `capsem run`, recorded as `fs_events`.

A watchfiles watcher (inotify/FSEvents, debounced) runs on its own thread and sends each batch
of changes to the recorder (`assembler/feed.py`: kept until the recorder has committed it, sent
again after a recorder restart), which writes and scrubs them as it does every row: `created`,
`modified` or `deleted`, the path relative to the workspace, and the size (NULL for deletes).
`.git` internals are ignored, and so is capsem's own folder (`$CAPSEM_HOME`: its databases, logs
and CA) when it lies inside the workspace; several changes to one path within a batch are folded
into one row. The watcher holds no writer: the recorder is session.db's one writer.

Watching a tree starts by registering each of its folders with the kernel, and watchfiles' Rust
backend holds the GIL while it does (~1 s for a repository with a virtualenv, ~7,000 folders):
`capsem run` starts the watcher while mitmdump starts, and waits for `ready` only before the agent.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import watchfiles
from watchfiles._rust_notify import RustNotify  # what `watchfiles.watch` drives (its documented backend)
from watchfiles.main import (  # how `watchfiles.watch` reads its WATCHFILES_* variables
    _default_debug,
    _default_force_polling,
    _default_ignore_permission_denied,
    _default_poll_delay_ms,
)

from addons.feed import FsChanges
from assembler.feed import Feed
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


FLUSH_TIMEOUT = 5.0
"""Seconds `stop` waits for the recorder to commit the last changes."""
READY_TIMEOUT = 30.0
"""Seconds `ready` waits for a tree's folders to be registered (the agent starts then all the same)."""


class WorkspaceWatcher:
    """Watches `root` on a thread; its rows go to the recorder of the session.db at `db_path`."""

    def __init__(
        self, root: Path, db_path: Path, *, debounce_ms: int = 100, skip: tuple[Path, ...] | None = None
    ) -> None:
        """`skip`: folders whose changes are not the agent's (default: `$CAPSEM_HOME`)."""
        from capsem.paths import capsem_home

        self.skip = tuple(p.resolve() for p in (skip if skip is not None else (capsem_home(),)))
        self.root = root.resolve()
        self.db_path = db_path
        self.feed = Feed(db_path.parent, "fswatch")
        self.debounce_ms = debounce_ms
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="capsem-fswatch", daemon=True)

    def start(self) -> None:
        """Start watching on a thread; returns at once (`ready` waits for the folders' registration)."""
        self._thread.start()

    def ready(self, timeout: float = READY_TIMEOUT) -> bool:
        """Wait until every folder is watched, or watching failed (logged): False after `timeout`."""
        return self._ready.wait(timeout)

    @property
    def events(self) -> int:
        """File events the recorder has committed."""
        return self.feed.committed[FsChanges]

    def stop(self, timeout: float = FLUSH_TIMEOUT) -> bool:
        """Let the last debounce window pass, stop, and wait until the recorder has committed every
        change (False when it has not within `timeout`: `feed` still holds them)."""
        self._stop.wait((self.debounce_ms + 200) / 1000)
        self._stop.set()
        self._thread.join(10)
        done = self.feed.flush(timeout)
        self.feed.close()  # what is left (False) is still held, and sent on a new connection if need be
        return done

    def _run(self) -> None:
        watch_filter = _Filter(self.skip)
        try:  # the loop of `watchfiles.watch`, with `ready` set once the folders are registered
            with _notify(self.root) as notify:
                self._ready.set()
                while True:
                    # quiet for a second: "timeout", to deliver what waited for the recorder to listen
                    raw = notify.watch(self.debounce_ms, 50, 1000, self._stop)
                    if raw == "stop":
                        return
                    changes = _kept(raw, watch_filter) if isinstance(raw, set) else set()
                    rows = fold(changes, self.root) if changes else []
                    if rows:
                        self.feed.send(FsChanges(utc_now(), tuple(rows)))
                    else:
                        self.feed.poke()
        except Exception as exc:  # the agent must go on even if watching fails
            logger.warning("capsem: watching %s failed: %r", self.root, exc)
        finally:
            self._ready.set()


def _notify(root: Path) -> RustNotify:
    """The watcher `watchfiles.watch` makes for `root` (the WATCHFILES_* variables, polling under
    WSL), made here so that its registration of the folders is known to be over."""
    return RustNotify([str(root)], _default_debug(None), _default_force_polling(None), _default_poll_delay_ms(300),
                      True, _default_ignore_permission_denied(None))  # fmt: skip


def _kept(raw: set[tuple[int, str]], watch_filter: _Filter) -> set[tuple[watchfiles.Change, str]]:
    """The changes `watch_filter` keeps, typed as `watchfiles.watch` gives them."""
    typed = ((watchfiles.Change(c), path) for c, path in raw)
    return {(c, path) for c, path in typed if watch_filter(c, path)}
