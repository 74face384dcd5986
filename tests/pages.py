"""A page of `capsem view` laid out by real headless Chromium at a given width (offline: every host
but 127.0.0.1 unresolvable), for what only layout shows: a word cut in two, a page that scrolls
sideways. Screenshots (the whole page) go where the test says."""

from __future__ import annotations

import atexit
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.bundle.conftest import CHROMIUM_FLAGS, DevTools, chromium_path

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


_browser: tuple[subprocess.Popen, str, Path] | None = None
"""This process's headless Chromium for `laid_out` (its DevTools host:port, its profile): one launch
(~0.8 CPU-s) for all the pages a test process lays out, each in a browser context of its own."""


def _chromium() -> str:
    """The host:port of this process's Chromium's DevTools, started on first use (offline), stopped
    when the process exits."""
    global _browser
    if _browser is not None and _browser[0].poll() is None:
        return _browser[1]
    profile = Path(tempfile.mkdtemp(prefix="capsem-test-chromium-"))
    log = profile.parent / (profile.name + ".log")  # a file, never a pipe nobody reads for minutes
    with log.open("wb") as out:
        proc = subprocess.Popen([chromium_path(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                 "--remote-debugging-port=0", OFFLINE, "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=out)  # fmt: skip
    deadline = time.monotonic() + 60
    while not (found := re.search(r"DevTools listening on ws://([\d.:]+)/", log.read_text(errors="replace"))):
        assert proc.poll() is None and time.monotonic() < deadline, "Chromium started no DevTools endpoint"
        time.sleep(0.02)
    _browser = (proc, found[1], profile)
    atexit.register(_stop_chromium, proc, profile, log)
    return found[1]


def _stop_chromium(proc: subprocess.Popen, profile: Path, log: Path) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    shutil.rmtree(profile, ignore_errors=True)
    log.unlink(missing_ok=True)


@contextmanager
def laid_out(url: str, width: int, height: int = 844) -> Iterator[LaidOut]:
    """`url` loaded in a viewport `width` CSS pixels wide (a phone's, touch and all, below 500): a new
    page in a new browser context (no cookie, cache or storage of another page) of this process's
    headless Chromium (`_chromium`), closed with its context when the block ends."""
    from websockets.sync.client import connect

    host = _chromium()
    version = json.load(urllib.request.urlopen(f"http://{host}/json/version", timeout=10))
    with connect(version["webSocketDebuggerUrl"], max_size=None, open_timeout=10) as browser_ws:
        browser = LaidOut(DevTools(browser_ws))
        context = browser.call("Target.createBrowserContext")["browserContextId"]
        try:
            made = browser.call("Target.createTarget", url="about:blank", browserContextId=context)
            target = made["targetId"]
            with connect(f"ws://{host}/devtools/page/{target}", max_size=None, open_timeout=10) as ws:
                tools = DevTools(ws)
                page = LaidOut(tools)
                page.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                          mobile=width < 500)  # fmt: skip
                page.call("Page.enable")
                page.call("Page.navigate", url=url)
                tools.wait_event("Page.loadEventFired")
                yield page
        finally:
            browser.call("Target.disposeBrowserContext", browserContextId=context)  # its pages closed with it


LINES_OF = """[...document.querySelectorAll(%s)].map(e => {
  const r = document.createRange(); r.selectNodeContents(e);
  return [e.textContent.trim(), new Set([...r.getClientRects()].map(b => Math.round(b.top))).size];
})"""
"""Each element of a selector: its text and on how many lines it is laid out."""

SIDEWAYS = "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
"""The page's width and the viewport's: a page wider than its viewport scrolls sideways."""
