from pathlib import Path

from watchfiles import Change

from assembler.fswatch import WorkspaceWatcher, fold
from tests.conftest import rows
from tests.recording import recorder_thread


def test_fold_changes(tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "dir").mkdir()
    (tmp_path / "b.txt").write_text("x")
    changes = {
        (Change.added, str(tmp_path / "a.txt")), (Change.modified, str(tmp_path / "a.txt")),
        (Change.added, str(tmp_path / "dir")), (Change.modified, str(tmp_path / "b.txt")),
        (Change.deleted, str(tmp_path / "gone.txt")), (Change.added, str(tmp_path / "vanished.txt")),
    }  # fmt: skip
    assert fold(changes, tmp_path) == [
        ("created", "a.txt", 5), ("modified", "b.txt", 1), ("deleted", "gone.txt", None),
        ("deleted", "vanished.txt", None),
    ]  # fmt: skip


def test_ready_returns_once_every_folder_is_watched(tmp_path):
    """`capsem run` starts the watcher beside mitmdump and the agent once it is `ready`: a file the
    agent writes at once, in the last of ~2,000 folders, is recorded."""
    session, workspace = tmp_path / "s", tmp_path / "ws"
    deep = Path(*(f"d{i}" for i in range(40)))
    for i in range(40):
        for j in range(50):
            (workspace / deep.parents[len(deep.parts) - 1 - i] / f"side{j}").mkdir(parents=True)
    (workspace / deep).mkdir(parents=True)
    db = session / "session.db"
    with recorder_thread(session):
        watcher = WorkspaceWatcher(workspace, db, skip=())
        watcher.start()
        assert watcher.ready()
        (workspace / deep / "first.txt").write_text("x")
        assert watcher.stop()
    assert rows(db, "SELECT action, path FROM fs_events") == [
        {"action": "created", "path": str(deep / "first.txt")}
    ]
