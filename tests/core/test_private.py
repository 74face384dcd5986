"""Folders 0700 and files 0600 whatever the umask (`capsem/private.py`), SQLite's -wal and -shm
included."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from capsem.private import make_private, open_private, private_dir, private_file, write_private
from capsem.store.schema import open_main_db


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o000], ids=["umask022", "umask000"])
def umask(request) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_folders_are_made_0700_level_by_level(tmp_path, umask):
    deep = private_dir(tmp_path / "home" / "sessions" / "s1")
    assert [mode(p) for p in (deep, deep.parent, deep.parent.parent)] == [0o700] * 3
    (tmp_path / "open").mkdir()
    os.chmod(tmp_path / "open", 0o755)
    private_dir(tmp_path / "open" / "inner")
    assert (
        mode(tmp_path / "open") == 0o755 and mode(tmp_path / "open" / "inner") == 0o700
    )  # an existing one kept


def test_files_are_written_0600_even_over_a_file_open_to_others(tmp_path, umask):
    assert mode(write_private(tmp_path / "a.html", "<p>")) == 0o600
    assert mode(write_private(tmp_path / "b.bin", b"\0")) == 0o600
    shared = tmp_path / "shared.json"
    shared.write_text("{}")
    os.chmod(shared, 0o644)
    with open_private(shared, "a") as out:
        out.write("\n")
    assert mode(shared) == 0o600 and shared.read_text() == "{}\n"
    other = tmp_path / "c.parquet"
    other.write_bytes(b"x")
    assert mode(make_private(other)) == 0o600
    existing = tmp_path / "kept.db"
    existing.write_bytes(b"")
    os.chmod(existing, 0o640)
    assert mode(private_file(existing)) == 0o640  # not created here: left alone


def test_a_database_its_wal_and_its_shm_are_0600(tmp_path, umask):
    db = tmp_path / "home" / "main.db"
    conn = open_main_db(db)
    try:
        conn.execute(
            "INSERT INTO sessions (id, status, created_at) VALUES ('s', 'running', '2026-01-01T00:00:00Z')"
        )
        made = sorted(p.name for p in db.parent.iterdir())
        assert made == ["main.db", "main.db-shm", "main.db-wal"]
        assert {p.name: mode(p) for p in db.parent.iterdir()} == dict.fromkeys(made, 0o600)
        assert mode(db.parent) == 0o700
    finally:
        conn.close()
