"""Shared fixtures: an isolated CAPSEM_HOME per test, the provider emulator, a real mitmdump."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import capsem.mitm
from capsem.mitm import Mitmdump, start_mitmdump
from capsem.private import CHILD_UMASK
from capsem.store.schema import connect
from tests.forkserver import ForkServer

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def pytest_configure(config: pytest.Config) -> None:
    # as under `uv run` (and with capsem installed): its bin directory on PATH, so the commands
    # capsem suggests read `capsem ...` however pytest was started (test_cli_support.py tries both)
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    if hasattr(os, "fork") and os.environ.get("CAPSEM_TEST_FORK_SERVER", "1") == "1":
        # mitmdump forked from a process that has imported mitmproxy (~0.7 CPU-second less a start)
        global _FORK_SERVER
        _FORK_SERVER = ForkServer()
        capsem.mitm.LAUNCHER = _FORK_SERVER.popen


_FORK_SERVER: ForkServer | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # the xdist controller collects nothing: it starts Phoenix for its workers before they start
    if session.config.pluginmanager.hasplugin("dsession"):
        from tests import backends

        backends.start_for_workers([str(a) for a in session.config.args])


SHARED_SESSION_FIXTURES = ("tests/diff", "tests/team")
"""Directories whose files share session fixtures that cost much (sessions recorded through several
mitmdumps; a PostgreSQL cluster): under `--dist loadfile`, one worker runs each of them whole."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` (a file at a time to a free worker: a module's shared mitmdump starts once),
    but with each directory of SHARED_SESSION_FIXTURES as one unit: its session fixtures are made
    once, not once in each worker that runs one of its files."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return next((d for d in SHARED_SESSION_FIXTURES if path.startswith(d + "/")), path)

    return Scheduling(config, log)


_USING_PHOENIX: set[str] = set()
"""The selected tests that use Phoenix and have not ended: once none is left, it is stopped (idle, it
still takes ~0.05 of a core, minutes long)."""


def pytest_collection_finish(session: pytest.Session) -> None:
    from tests import backends

    backends.start_early([item.nodeid for item in session.items])  # Phoenix boots while other tests run
    _USING_PHOENIX.update(
        item.nodeid for item in session.items if item.nodeid.startswith(backends.USES_PHOENIX)
    )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """In the xdist controller (which collects nothing): the tests a worker collected."""
    from tests import backends

    _USING_PHOENIX.update(i for i in ids if i.startswith(backends.USES_PHOENIX))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Stop Phoenix (where this process started it) once the last test using it has ended."""
    if report.when == "teardown" and report.nodeid in _USING_PHOENIX:
        from tests import backends

        _USING_PHOENIX.discard(report.nodeid)
        if not _USING_PHOENIX:
            backends.stop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests import backends

    backends.stop()
    if _FORK_SERVER is not None:
        _FORK_SERVER.close()


@contextmanager
def environ(**values: str) -> Iterator[None]:
    """`os.environ` with `values` set, as it was afterwards (module fixtures cannot use monkeypatch)."""
    old = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_ca_dir: Path | None = None


def seeded_confdir(confdir: Path) -> Path:
    """`confdir` holding this test run's one mitmproxy CA (copied, private), so that a test's fresh
    mitmdump does not make its own 2048-bit key: ~0.2 s of CPU for each of hundreds of mitmdumps."""
    global _ca_dir
    import atexit
    import shutil
    import tempfile

    from mitmproxy.certs import CertStore

    if _ca_dir is None:
        _ca_dir = Path(tempfile.mkdtemp(prefix="capsem-test-ca-"))
        atexit.register(shutil.rmtree, _ca_dir, True)  # the run's CA key: gone with the run
        CertStore.from_store(_ca_dir, "mitmproxy", 2048)
    if not confdir.exists():
        confdir.mkdir(mode=0o700, parents=True)
        for file in _ca_dir.iterdir():
            shutil.copy(file, confdir / file.name)
            (confdir / file.name).chmod(0o600)
    return confdir


@contextmanager
def emulated_client(emu, work: Path, session_id: str | None = None, log_name: str | None = None,
                    args: list[str] | None = None) -> Iterator[Any]:  # fmt: skip
    """An httpx client through a fresh mitmdump (upstream: the emulator `emu`, more mitmdump `args`)
    recording session `session_id` (else one it names), trusting its CA; mitmdump stops when the
    block ends."""
    import ssl

    import httpx

    named = ["--set", f"capsem_session_id={session_id}"] if session_id else []
    proxy = start_mitmdump(confdir=seeded_confdir(work / "conf"),
                           log_path=work / (log_name or f"{session_id or 'mitmdump'}.log"),
                           args=["--mode", f"upstream:{emu.proxy_url}",
                                 "--set", f"ssl_verify_upstream_trusted_ca={emu.ca_path}",
                                 *named, *(args or [])])  # fmt: skip
    try:
        trust = ssl.create_default_context(cafile=proxy.ca_cert)
        with httpx.Client(proxy=proxy.url, verify=trust, timeout=30) as client:
            yield client
    finally:
        proxy.stop()


@pytest.fixture(autouse=True)
def capsem_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "capsem-home"
    monkeypatch.setenv("CAPSEM_HOME", str(home))
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "")
    # wide enough that temporary paths (longer under pytest-xdist) do not wrap the lines tests look
    # for; the tests of narrow terminals set their own width
    monkeypatch.setenv("COLUMNS", "160")
    return home


@pytest.fixture(scope="session")
def emulator():
    from capsem.emulator import Emulator

    with Emulator() as emu:
        yield emu


@pytest.fixture
def emu(emulator):
    """The shared emulator with an empty exchange log and default behaviour."""
    emulator.clear()
    yield emulator
    emulator.clear()


class ProxyFactory:
    def __init__(self, tmp_path: Path, home: Path) -> None:
        self.tmp_path = tmp_path
        self.home = home
        self.started: list[Mitmdump] = []

    def __call__(
        self,
        *,
        upstream: str | None = None,
        ca: str | None = None,
        addon: bool = True,
        args: list[str] | None = None,
        umask: int = CHILD_UMASK,
    ) -> Mitmdump:
        extra = list(args or [])
        if upstream:
            extra += ["--mode", f"upstream:{upstream}"]
        if ca:
            extra += ["--set", f"ssl_verify_upstream_trusted_ca={ca}"]
        n = len(self.started)
        proxy = start_mitmdump(
            confdir=seeded_confdir(self.tmp_path / "mitm-conf"),
            log_path=self.tmp_path / f"mitmdump-{n}.log",
            args=extra,
            addon=addon,
            umask=umask,
        )
        self.started.append(proxy)
        return proxy


@pytest.fixture
def mitmdump(tmp_path: Path, capsem_home: Path) -> Iterator[ProxyFactory]:
    factory = ProxyFactory(tmp_path, capsem_home)
    yield factory
    for proxy in factory.started:
        if not proxy.stopped:
            proxy.stop()


def rows(db: Path, sql: str, params: tuple = ()) -> list[dict]:
    conn = connect(db, readonly=True)  # capsem's connection: its SQL functions (`unzstd`) too
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def only_session(home: Path) -> Path:
    """The session.db of the one session under `home`."""
    dbs = sorted((home / "sessions").glob("*/session.db"))
    assert len(dbs) == 1, dbs
    return dbs[0]
