"""Arize Phoenix, the real OpenTelemetry backend of the OTLP export tests (installed by `make
test-backends` into .tools/phoenix, an environment of its own). It takes 10-20 s to start on this
machine (importing it is most of that), so the run starts it once, in the background, as soon as
collection shows an OTLP test is selected (`tests/conftest.py`), and stops it at the end. Under
pytest-xdist the controller, which collects nothing, starts it as the session starts when the
paths given include the OTLP tests, and the workers reach it at the URL it leaves in their
environment (`CAPSEM_TEST_PHOENIX_URL`): the worker that runs them then rarely waits for it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PHOENIX = ROOT / ".tools" / "phoenix" / "bin" / "phoenix"
USES_PHOENIX = "tests/e2e/test_otlp.py"
SHARED_URL = "CAPSEM_TEST_PHOENIX_URL"
SHARED_LOG = "CAPSEM_TEST_PHOENIX_LOG"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Phoenix:
    """One Phoenix server on loopback: data in a temporary SQLite, telemetry and external
    resources off, and any outbound HTTP sent to a closed local port."""

    def __init__(self) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="capsem-phoenix-"))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
        env.update(PHOENIX_WORKING_DIR=str(self.work), PHOENIX_PORT=str(self.port), PHOENIX_HOST="127.0.0.1",
                   PHOENIX_GRPC_PORT=str(_free_port()), PHOENIX_TELEMETRY_ENABLED="false",
                   PHOENIX_ALLOW_EXTERNAL_RESOURCES="false", HTTP_PROXY="http://127.0.0.1:9",
                   HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="127.0.0.1,localhost")  # fmt: skip
        self.log = self.work / "phoenix.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)  # fmt: skip

    def wait(self, timeout: float = 100.0) -> str:
        """The server's URL once /healthz answers (AssertionError with its log when it never does)."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"Phoenix did not start in {timeout:.0f} s"
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.work, ignore_errors=True)


class Started:
    """The Phoenix the xdist controller started for this run (its URL in our environment)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def wait(self, timeout: float = 100.0) -> str:
        """The server's URL once /healthz answers."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (
                f"Phoenix at {self.url} did not answer in {timeout:.0f} s (its log: {os.environ.get(SHARED_LOG)})"
            )
            time.sleep(0.1)


_server: Phoenix | None = None


def phoenix() -> Phoenix | Started:
    """The run's Phoenix: the one the xdist controller started, else ours, started on first use."""
    global _server
    if os.environ.get(SHARED_URL) and os.environ.get("PYTEST_XDIST_WORKER"):
        return Started(os.environ[SHARED_URL])
    if _server is None:
        _server = Phoenix()
    return _server


def start_for_workers(paths: list[str]) -> None:
    """In the xdist controller, before the workers start: start Phoenix when the paths given hold
    the OTLP tests (and it is installed), and leave its URL in the environment they inherit."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not PHOENIX.exists():
        return
    wanted = ROOT / USES_PHOENIX
    for path in paths:
        given = (Path.cwd() / path.split("::", 1)[0]).resolve()
        if given == wanted or given in wanted.parents:
            server = phoenix()
            os.environ.update({SHARED_URL: server.url, SHARED_LOG: str(server.log)})
            return


def start_early(nodeids: list[str]) -> None:
    """Start Phoenix in the background when a selected test uses it (and it is installed). Not in an
    xdist worker: every worker collects every test, and the one that runs it starts Phoenix on use."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if PHOENIX.exists() and any(n.startswith(USES_PHOENIX) for n in nodeids):
        phoenix()


def stop() -> None:
    global _server
    if _server is not None:
        _server.stop()
        _server = None
