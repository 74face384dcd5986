"""The tests' fork server (tests/forkserver.py): a forked mitmdump is started as `subprocess.Popen`
would start it (environment, umask, working directory, session, log) and ends as one does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import capsem.mitm
from capsem.mitm import start_mitmdump
from tests.conftest import seeded_confdir
from tests.forkserver import Forked, ForkServer

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork server needs fork()")


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def _umask_of(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return next(line for line in status if line.startswith("Umask")).split()[1]


def test_a_forked_mitmdump_runs_the_addon_with_what_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not isinstance(getattr(capsem.mitm.LAUNCHER, "__self__", None), ForkServer):
        pytest.skip("the fork server is off (CAPSEM_TEST_FORK_SERVER=0)")
    monkeypatch.chdir(tmp_path)
    env = dict(os.environ, CAPSEM_HOME=str(tmp_path / "home"), CAPSEM_FORK_TEST="given")
    proxy = start_mitmdump(confdir=seeded_confdir(tmp_path / "conf"), log_path=tmp_path / "log", env=env,
                           umask=0o027)  # fmt: skip
    try:
        assert isinstance(proxy.process, Forked)
        pid = proxy.process.pid
        # the child's environment is the one given (its recorder, started with it, shows it: a
        # forked process's own /proc/<pid>/environ still shows the server's)
        (recorder,) = psutil.Process(pid).children()
        assert _environ(recorder.pid)["CAPSEM_FORK_TEST"] == "given"
        assert Path(f"/proc/{pid}/cwd").resolve() == tmp_path.resolve()
        assert _umask_of(pid) == "0027"
        assert os.getpgid(pid) == os.getpgid(0)  # as Popen's child: in our process group
        assert proxy.process.poll() is None
        assert proxy.session_id()  # the addon loaded and its recorder opened the session
        assert (tmp_path / "home" / "sessions").is_dir()
    finally:
        code = proxy.stop()
    assert code == 0 and proxy.process.returncode == 0
    assert "stopped; database" in proxy.log()


def test_a_new_session_a_kill_and_a_failure_read_as_popen_reads_them(tmp_path: Path) -> None:
    server = ForkServer()
    try:
        log = tmp_path / "log"
        with log.open("wb") as out:
            refused = server.popen(["mitmdump", "--no-such-option"], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)  # fmt: skip
        assert isinstance(refused, Forked)
        assert refused.wait(30) == 1  # mitmproxy's own exit code for a bad argument
        assert "usage: mitmdump" in log.read_text()
        with log.open("wb") as out:
            proxy = server.popen(["mitmdump", "--listen-host", "127.0.0.1", "-p", "0"], stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        assert os.getsid(proxy.pid) == proxy.pid
        assert _umask_of(proxy.pid) == _umask_of(os.getpid())  # no umask given: ours, as with Popen
        with pytest.raises(subprocess.TimeoutExpired):
            proxy.wait(0.2)
        proxy.send_signal(signal.SIGKILL)
        assert proxy.wait(30) == -signal.SIGKILL
        proxy.kill()  # ended: nothing to do, as with Popen
    finally:
        server.close()


def test_an_environment_python_reads_at_start_gets_a_real_process(tmp_path: Path) -> None:
    server = ForkServer()
    env = dict(os.environ)
    flag = "0" if env.pop("PYTHONDONTWRITEBYTECODE", "") else "1"
    if flag == "1":
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    try:
        with (tmp_path / "log").open("wb") as out:
            process = server.popen([sys.executable, "-c", "import sys; print(int(sys.flags.dont_write_bytecode))"],
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)  # fmt: skip
        assert isinstance(process, subprocess.Popen)
        assert process.wait(30) == 0
        assert (tmp_path / "log").read_text().strip() == flag
    finally:
        server.close()
