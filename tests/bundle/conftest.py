"""Helpers for the bundle tests: the fixture artifacts, headless Chromium, a build shortcut."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
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


class DevTools:
    """One page of a headless Chromium, driven over the DevTools protocol (`devtools()`)."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.events: list[str | None] = []
        """The methods of the events that came while waiting for answers."""
        self._ids = iter(range(1, 1_000_000))

    def call(self, method: str, **params) -> dict:
        """Send a command and return its answer message (`result` or `error`)."""
        n = next(self._ids)
        self.ws.send(json.dumps({"id": n, "method": method, "params": params}))
        while (message := json.loads(self.ws.recv(timeout=60))).get("id") != n:
            self.events.append(message.get("method"))
        return message

    def wait_event(self, method: str) -> None:
        while method not in self.events:
            self.events.append(json.loads(self.ws.recv(timeout=60)).get("method"))


@contextmanager
def devtools(profile: Path, *flags: str) -> Iterator[DevTools]:
    """A headless Chromium with a throwaway profile, its first page under DevTools control."""
    from websockets.sync.client import connect

    command = [chromium_path(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", *flags,
               "about:blank"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:  # type: ignore[union-attr]
            if found := re.search(r"DevTools listening on ws://([\d.:]+)/", line):
                break
        else:
            raise AssertionError("Chromium did not start its DevTools endpoint")
        pages = json.load(urllib.request.urlopen(f"http://{found[1]}/json/list", timeout=10))
        page = next(p for p in pages if p["type"] == "page")
        with connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10) as ws:
            yield DevTools(ws)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
