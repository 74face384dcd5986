"""`capsem diff` on sessions recorded through real mitmdump (tests/diff/conftest.py)."""

from __future__ import annotations

import json

from tests.cli.conftest import run


def test_look(runs, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    print(run("diff", runs.base, runs.again))
    print(run("diff", runs.base, runs.changed))
    print(json.dumps(json.loads(run("diff", runs.base, runs.changed, "--json"))["calls"][0], indent=1)[:3000])
    assert 0
