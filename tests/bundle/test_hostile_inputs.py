"""Malformed and hostile inputs: each one gives a warning (logged, and kept in `sources`) and the
bundle is still built, opens, and keeps every good record next to the bad ones."""

from __future__ import annotations

import gzip
import json
import logging
import os
import sqlite3
import zipfile
from pathlib import Path

import pytest

from assembler.bundle import BundleError, BundleVersionError, DebugBundle, Limits, NotABundle, build_bundle
from capsem.store.schema import open_session_db

GOOD_LOG = {"timestamp": "2026-01-15T10:31:01+00:00", "level": "INFO", "logger": "a", "event": "ok",
            "message": "fine", "context": {}}  # fmt: skip


def build(tmp_path: Path, *inputs: Path, **kw) -> DebugBundle:
    out = tmp_path / "out" / "bundle.db"
    report = build_bundle(out, list(inputs), **kw)
    bundle = DebugBundle.open(out)
    bundle.report = report
    return bundle


def source(bundle: DebugBundle, name: str) -> dict:
    cur = bundle.query("SELECT * FROM sources WHERE path LIKE ?", (f"%{name}",))
    (row,) = [dict(zip([d[0] for d in cur.description], r, strict=True)) for r in cur]
    row["warnings"] = json.loads(row["warnings"] or "[]")
    return row


def test_malformed_log_lines_are_counted_and_skipped(tmp_path, caplog):
    log = tmp_path / "app.log"
    with log.open("wb") as f:
        f.write(json.dumps(GOOD_LOG).encode() + b"\n")
        f.write(b"{not json\n")
        f.write(b"[1, 2, 3]\n")
        f.write(b'{"message": "caf\xe9 in latin-1"}\n')
        f.write(b'{"message": "' + b"x" * 10_000 + b'"}\n')  # over max_line_bytes below
        f.write(b"[" * 3000 + b"]" * 3000 + b"\n")  # nested too deeply for json
        f.write(b"\n   \n")
        f.write(json.dumps({**GOOD_LOG, "message": "still read"}).encode())  # no final newline
    with caplog.at_level(logging.WARNING, logger="assembler.bundle"):
        bundle = build(tmp_path, log, limits=Limits(max_line_bytes=8192))
    with bundle:
        src = source(bundle, "app.log")
        assert (src["kind"], src["records"], src["errors"]) == ("log", 2, 5)
        assert [m for m in src["warnings"]] == [
            "line 2: not JSON (Expecting property name enclosed in double quotes); skipped",
            "line 3: a JSON list, not an object; skipped",
            "line 4: not UTF-8 (invalid continuation byte at byte 16); skipped",
            "line 5: longer than 8192 bytes; skipped",
            "line 6: not JSON (nested too deeply); skipped",
        ]
        assert [r[0] for r in bundle.query("SELECT message FROM logs ORDER BY id")] == ["fine", "still read"]
        (problem,) = bundle.query("SELECT message FROM error_log WHERE kind = 'import_error'").fetchall()
        assert "5 records skipped" in problem[0]
    assert sum("line 2: not JSON" in r.getMessage() for r in caplog.records) == 1


def test_bad_snapshot_lines_keep_the_good_sessions(tmp_path):
    good = {"version": "1", "created_at": "2026-01-15T10:31:02+00:00", "parent_id": None, "children_ids": [],
            "tags": {"session_id": "s-1"}, "policies": {},
            "slices": [{"slice_type": "app:Plan", "item_type": "app:Plan", "items": [{"__type__": "app:Plan"}]},
                       {"slice_type": "app:Broken", "item_type": "app:Broken", "items": "not a list"}]}  # fmt: skip
    seed_style = {"created_at": "2026-01-15T10:32:00+00:00", "tags": {"session_id": "s-2"},
                  "slices": {"app:Note": [{"text": "the seed's mapping form"}]}}  # fmt: skip
    path = tmp_path / "s.jsonl"
    lines = [
        good,
        {"slices": [], "tags": {}},
        {"version": "1", "tags": {"session_id": "x"}, "slices": 5},
        seed_style,
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with build(tmp_path, path) as bundle:
        src = source(bundle, "s.jsonl")
        assert (src["kind"], src["errors"]) == ("snapshot", 3)
        assert "slice 'app:Broken' has no items list" in src["warnings"][0]
        items = bundle.query("SELECT session_id, slice_type, payload FROM slice_items ORDER BY id").fetchall()
        assert items == [("s-1", "app:Plan", '{"__type__":"app:Plan"}'),
                         ("s-2", "app:Note", '{"text":"the seed\'s mapping form"}')]  # fmt: skip
        assert bundle.session_ids == ["s-1", "s-2"]


def _zip_entry(zf: zipfile.ZipFile, name: str, data: bytes, *, mode: int = 0o100644) -> None:
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 15, 10, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = mode << 16
    zf.writestr(info, data)


def _mark_encrypted(archive: Path, name: str) -> None:
    """Set the "encrypted" flag of an entry in its local header and central directory record
    (zipfile cannot write encrypted entries)."""
    data = bytearray(archive.read_bytes())
    encoded = name.encode()
    for signature, flag_at, name_at in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
        start = 0
        while (at := data.find(signature, start)) >= 0:
            if data[at + name_at : at + name_at + len(encoded)] == encoded:
                data[at + flag_at] |= 0x1
            start = at + 4
    archive.write_bytes(bytes(data))


def test_hostile_zip_entries_are_refused(tmp_path):
    archive = tmp_path / "work" / "files.zip"
    archive.parent.mkdir()
    big = os.urandom(1536 * 1024)  # incompressible: over the size cap, not a bomb
    with zipfile.ZipFile(archive, "w") as zf:
        _zip_entry(zf, "ok.txt", b"hello\n")
        _zip_entry(zf, ".env", b"OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123456789\n")
        _zip_entry(zf, "../escape.txt", b"outside")
        _zip_entry(zf, "/etc/cron.d/evil", b"* * * * * root sh")
        _zip_entry(zf, "C:/Windows/evil.txt", b"drive")
        _zip_entry(zf, "sub/../../up.txt", b"up")
        _zip_entry(zf, "link", b"/etc/passwd", mode=0o120777)
        _zip_entry(zf, "secret.bin", b"locked")
        _zip_entry(zf, "zeros.bin", bytes(20 * 1024 * 1024))  # 20 MiB of zeros: a ~1000x ratio
        _zip_entry(zf, "big.bin", big)
        _zip_entry(zf, "dir/", b"")
    _mark_encrypted(archive, "secret.bin")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with build(tmp_path, archive) as bundle:
        src = source(bundle, "files.zip")
        assert src["errors"] == 7
        refused = " | ".join(src["warnings"])
        for name, why in (("../escape.txt", "path with '..'"), ("/etc/cron.d/evil", "absolute path"),
                          ("C:/Windows/evil.txt", "absolute path"), ("sub/../../up.txt", "path with '..'"),
                          ("link", "symbolic link"), ("secret.bin", "encrypted entry"),
                          ("zeros.bin", "decompression bomb")):  # fmt: skip
            assert f"entry {name!r} refused: {why}" in refused
        files = {
            r[0]: r[1:]
            for r in bundle.query("SELECT path, content, is_binary, truncated, size_bytes FROM files")
        }
        assert set(files) == {"ok.txt", ".env", "big.bin"}
        assert files["ok.txt"] == ("hello\n", 0, 0, 6)
        assert files[".env"][0].startswith("OPENAI_API_KEY=[redacted hash:")
        assert files["big.bin"] == (None, 1, 1, len(big))  # metadata only: above max_file_bytes
        (digest,) = bundle.query("SELECT sha256 FROM files WHERE path = 'big.bin'").fetchone()
        assert digest == __import__("hashlib").sha256(big).hexdigest()
    after = sorted(p.name for p in tmp_path.rglob("*"))
    # nothing was extracted anywhere (CAPSEM_HOME gets the installation's marker key, made on first use)
    assert set(after) - set(before) - {"capsem-home", "hash.key"} == {"out", "bundle.db"}


def test_archive_budget_stops_reading(tmp_path):
    archive = tmp_path / "many.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(5):
            _zip_entry(zf, f"f{i}.txt", os.urandom(4000).hex().encode())
    with build(tmp_path, archive, limits=Limits(max_archive_bytes=20_000, max_archive_entries=4)) as bundle:
        src = source(bundle, "many.zip")
        assert "5 entries; only the first 4 are read" in src["warnings"][0]
        assert "more than 20000 bytes uncompressed" in src["warnings"][1]
        assert bundle.query("SELECT COUNT(*) FROM files").fetchone()[0] == 2


def test_broken_databases_and_archives(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    db = folder / "good" / "session.db"
    db.parent.mkdir()
    open_session_db(db).close()
    data = gzip.compress(db.read_bytes())
    (folder / "cut.db.gz").write_bytes(data[: len(data) // 2])  # a vacuumed session cut short
    (folder / "garbage.db").write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    (folder / "fake.zip").write_bytes(b"PK\x03\x04" + b"not really a zip")
    (folder / "notes.txt").write_text("plain text, not JSON\n")
    (folder / "link.log").symlink_to("/etc/passwd")
    previous = tmp_path / "old" / "bundle.db"
    build_bundle(previous, [db])
    os.replace(previous, folder / "older-bundle.db")
    with build(tmp_path, folder, source_directory=folder) as bundle:
        by_kind = {r[0]: r[1:] for r in bundle.query("SELECT path, kind, errors, warnings FROM sources")}
        assert by_kind["cut.db.gz"][:2] == ("capsem_session", 1)
        assert "cannot read the session database" in by_kind["cut.db.gz"][2]
        assert by_kind["garbage.db"][0] == "unknown" and "not recognised" in by_kind["garbage.db"][2]
        assert by_kind["fake.zip"][:2] == ("archive", 1) and "not a readable zip" in by_kind["fake.zip"][2]
        assert by_kind["notes.txt"][0] == "unknown"
        assert by_kind["older-bundle.db"][0] == "bundle" and "never imported" in by_kind["older-bundle.db"][2]
        assert "link.log" not in by_kind  # symbolic links are never followed
        assert by_kind["good/session.db"][:2] == ("capsem_session", 0)
        assert bundle.query("SELECT kind FROM sessions").fetchall() == [("capsem",)]


def test_a_failed_build_leaves_the_previous_bundle(tmp_path, monkeypatch):
    log = tmp_path / "a.log"
    log.write_text(json.dumps(GOOD_LOG) + "\n")
    out = tmp_path / "bundle.db"
    build_bundle(out, [log])
    before = out.read_bytes()

    def broken(conn):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr("assembler.bundle.build.create_views", broken)
    with pytest.raises(sqlite3.OperationalError):
        build_bundle(out, [log])
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.log", "bundle.db"]  # no temporary file left


def test_refusals(tmp_path):
    log = tmp_path / "a.log"
    log.write_text(json.dumps(GOOD_LOG) + "\n")
    not_bundle = tmp_path / "precious.db"
    sqlite3.connect(not_bundle).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(BundleError, match="exists and is not a bundle"):
        build_bundle(not_bundle, [log])
    assert sqlite3.connect(not_bundle).execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match="no input files"):
        build_bundle(tmp_path / "b.db", [tmp_path / "empty"])
    with pytest.raises(BundleError, match="does not exist"):
        build_bundle(tmp_path / "b.db", [tmp_path / "missing.log"])
    with pytest.raises(NotABundle):
        DebugBundle.open(not_bundle)
    with pytest.raises(NotABundle):
        DebugBundle.open(tmp_path / "nothing.db")

    newer = tmp_path / "newer.db"
    build_bundle(newer, [log])
    conn = sqlite3.connect(newer)
    conn.execute("UPDATE bundle_meta SET schema_version = schema_version + 1")
    conn.commit()
    conn.close()
    with pytest.raises(BundleVersionError, match="newer than the v1 this capsem reads"):
        DebugBundle.open(newer)


def test_an_opened_bundle_is_read_only(tmp_path):
    log = tmp_path / "a.log"
    log.write_text(json.dumps(GOOD_LOG) + "\n")
    with build(tmp_path, log) as bundle, pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only"):
        bundle.query("DELETE FROM logs")
