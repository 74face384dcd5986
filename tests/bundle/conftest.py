"""Helpers for the bundle tests: the fixture artifacts, headless Chromium, a build shortcut."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "bundle"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
                  "--disable-background-networking", "--disable-component-update", "--disable-extensions",
                  "--hide-scrollbars"]  # fmt: skip


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    """A writable copy of the fixture artifacts (debug/ and diagnostics/; not the README)."""
    target = tmp_path / "artifacts"
    for part in ("debug", "diagnostics"):
        shutil.copytree(FIXTURES / part, target / part)
    return target


def chromium_path() -> str:
    """The Chromium binary; fails the test (never skips) when it is missing."""
    for candidate in ("chromium", "chromium-browser", "google-chrome", "/usr/bin/chromium"):
        found = shutil.which(candidate)
        if found:
            return found
    pytest.fail(
        "headless Chromium is needed to check the served bundle, and none was found "
        "(looked for chromium, chromium-browser, google-chrome): apt-get install chromium",
        pytrace=False,
    )


def chromium(args: list[str], profile: Path, timeout: float = 180.0) -> str:
    """Run headless Chromium with a throwaway profile; return its stdout (e.g. --dump-dom)."""
    cmd = [chromium_path(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    done = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return done.stdout.decode("utf-8", errors="replace")
