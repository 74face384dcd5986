"""A page of `capsem view` laid out by real headless Chromium at a given width (offline: every host
but 127.0.0.1 unresolvable), for what only layout shows: a word cut in two, a page that scrolls
sideways. Screenshots (the whole page) go where the test says."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.bundle.conftest import DevTools, devtools

OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"


@contextmanager
def view_of(home: Path) -> Iterator[str]:
    """`capsem view` on `home` as a real process; its base URL."""
    server = subprocess.Popen([sys.executable, "-m", "assembler", "view", "--no-open", "--port", "0"],
                              env={**os.environ, "CAPSEM_HOME": str(home)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        line = server.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert match, line + server.stdout.read()
        yield match.group(0)
    finally:
        server.kill()
        server.wait()


class LaidOut:
    """One page open in Chromium: `js()` evaluates an expression and returns its value."""

    def __init__(self, tools: DevTools) -> None:
        self.tools = tools

    def call(self, method: str, **params: Any) -> dict:
        answer = self.tools.call(method, **params)
        assert "error" not in answer, answer
        return answer.get("result", {})

    def js(self, expression: str) -> Any:
        found = self.call("Runtime.evaluate", expression=f"JSON.stringify({expression})", returnByValue=True)
        return json.loads(found["result"]["value"])

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        assert path.stat().st_size > 10_000


@contextmanager
def laid_out(url: str, profile: Path, width: int, height: int = 844) -> Iterator[LaidOut]:
    """`url` loaded in a viewport `width` CSS pixels wide (a phone's, touch and all, below 500)."""
    with devtools(profile, OFFLINE, f"--window-size={width},{height}") as tools:
        page = LaidOut(tools)
        page.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=width < 500)  # fmt: skip
        page.call("Page.enable")
        page.call("Page.navigate", url=url)
        tools.wait_event("Page.loadEventFired")
        yield page


LINES_OF = """[...document.querySelectorAll(%s)].map(e => {
  const r = document.createRange(); r.selectNodeContents(e);
  return [e.textContent.trim(), new Set([...r.getClientRects()].map(b => Math.round(b.top))).size];
})"""
"""Each element of a selector: its text and on how many lines it is laid out."""

SIDEWAYS = "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
"""The page's width and the viewport's: a page wider than its viewport scrolls sideways."""
