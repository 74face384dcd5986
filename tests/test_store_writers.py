"""One way to write a session.db: the store's writer (`SessionWriter`, which chains and signs
every row it writes, `capsem/store/ledger.py`). Parsed with `ast` (nothing imported), every place
in the project's packages that opens a SQLite database for writing is listed below with the
database it writes; anything else that does (a raw `sqlite3.connect` of a path, capsem's
`connect` without `readonly=True`, `open_session_db`) fails this test, so a new write to
session.db cannot bypass the ledger unnoticed. Read-only (`mode=ro`, `readonly=True`) and
in-memory connections are free."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("addons", "assembler", "capsem", "pricing")

WRITERS = {
    "capsem/store/schema.py": "defines connect and open_session_db / open_main_db",
    "capsem/store/writer.py": "session.db: the store's one writer (open_session_db)",
    "addons/recorder/spend.py": "main.db: spend_entries",
    "assembler/view/search.py": "search.db: the search index",
    "assembler/doctor.py": "main.db: doctor's write check",
    "assembler/bundle/build.py": "bundle.db",
    "capsem/team/outbox.py": "the team outbox's own database",
    "assembler/retention.py": "session.db: checkpoint, journal mode and VACUUM only (no row changes); "
    "its rows through SessionWriter (_fold_health)",
}
"""Module -> the database it opens for writing, and why that is not a way around the writer."""
READERS = {"assembler/bundle/detect.py": "a `mode=ro` URI built in a variable"}
"""Modules whose connections are read-only in a way the rule cannot see."""


def _read_only(call: ast.Call) -> bool:
    for kw in call.keywords:
        if kw.arg == "readonly" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
            return True
    texts = [
        n.value
        for a in call.args[:1]
        for n in ast.walk(a)
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]
    return any("mode=ro" in t or t == ":memory:" for t in texts)


def writes(source: str) -> list[tuple[int, str]]:
    """(line, call) of each call that may open a database for writing."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        if name == "open_session_db" or (
            name == "connect" and owner in ("", "sqlite3", "schema") and not _read_only(node)
        ):
            found.append((node.lineno, f"{owner + '.' if owner else ''}{name}"))
    return found


def test_the_rule_sees_a_raw_write_and_lets_readers_be():
    assert writes("import sqlite3\nsqlite3.connect(db)\n") == [(2, "sqlite3.connect")]
    assert writes("connect(path)\nopen_session_db(p)\n") == [(1, "connect"), (2, "open_session_db")]
    assert writes("sqlite3.connect(f'{uri}?mode=ro', uri=True)\nconnect(p, readonly=True)\n") == []
    assert writes("sqlite3.connect(':memory:')\nhttpx.connect(x)\n") == []


def test_nothing_but_the_listed_modules_opens_a_database_for_writing():
    unlisted = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name in WRITERS or name in READERS:
                continue
            unlisted += [f"{name}:{line} {call}" for line, call in writes(path.read_text())]
    assert not unlisted, (
        "these open a database for writing; a session.db is written only through SessionWriter "
        "(capsem/store/writer.py), so its rows are chained and signed. Use it, or list the module "
        "in WRITERS with the database it writes:\n" + "\n".join(unlisted)
    )
