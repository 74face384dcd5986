"""The reliability suite. Tests marked `soak` are long: they run with `make soak` (`pytest -m soak`)
and are skipped by a plain `pytest` run (`make test`). Tests marked `serial` depend on timings that
a second busy core could break: `make test` runs them after the rest, one at a time."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "soak: long reliability test, run by `make soak` (pytest -m soak)")
    config.addinivalue_line("markers", "serial: timing-bound; `make test` runs it alone")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "soak" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="soak test: run with `make soak`")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)
