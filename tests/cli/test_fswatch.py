from watchfiles import Change

from assembler.fswatch import fold


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
