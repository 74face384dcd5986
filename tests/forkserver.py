"""mitmdump for the tests, forked from a process that has already imported mitmproxy.

Starting mitmdump costs ~3 CPU-seconds, of which ~1 is importing mitmproxy; the slow tests start
~150 of them on two cores. So each pytest process starts one *fork server*
(`python -m tests.forkserver`) that imports mitmproxy and the libraries capsem's addon uses, and
nothing of capsem's own, then forks a child per mitmdump asked for. The child takes the
environment, working directory, umask, session and log file it is given, then runs mitmproxy's
own `mitmdump` entry point with the same arguments, in a fresh asyncio loop: the same program as
the `mitmdump` script, with the capsem addon loaded by `-s` from its file, as a user runs it;
only the imports that depend on nothing are done once. `capsem run`, the demo and the benchmarks
still start mitmdump as users do (`capsem.mitm.LAUNCHER` is `subprocess.Popen` outside the tests).

An environment that differs from the server's in what Python reads at start-up (`PYTHON*`) or
in `CAPSEM_NATIVE` gets a real `subprocess.Popen`, as does any platform without `fork`.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

PRELOAD = (
    "mitmproxy.tools.main", "mitmproxy.tools.dump", "mitmproxy.tools.cmdline", "mitmproxy.addons",
    "mitmproxy.addons.script", "cryptography.x509", "msgspec", "msgspec.json", "msgspec.msgpack",
    "hyperscan", "zstandard", "yaml", "psutil", "tiktoken", "sqlite3",
)  # fmt: skip
"""Imported once by the server: mitmproxy and third-party libraries (none reads capsem's settings)."""


def _fresh_start_keys(env: Mapping[str, str]) -> dict[str, str]:
    """What a fresh interpreter (or capsem's import) reads from the environment once, at start."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON") or k == "CAPSEM_NATIVE"}


# -- the server ---------------------------------------------------------------------------------

_done: dict[int, int] = {}


def _reap(*_: object) -> None:
    """SIGCHLD: collect every child that ended (its exit code as `Popen.returncode` reads)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _done[pid] = os.waitstatus_to_exitcode(status)


def _child(request: dict[str, Any], channel: socket.socket, log: int, started: int) -> None:
    """In the forked child: become the mitmdump asked for (its output to the file `log`), say so on
    the pipe `started` (as `Popen` returns once its child is set up), and exit as mitmdump does."""
    channel.detach()  # closed below with the rest: its object must not close a number reused by then
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # its own children (the recorder) are waited on
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
    if request["new_session"]:
        os.setsid()
    os.umask(request["umask"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.write(started, b"1")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, 1024)  # the server's socket, the log's and /dev/null's first descriptors
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), write_through=unbuffered,
                                  line_buffering=name == "stderr",
                                  errors="backslashreplace" if name == "stderr" else "strict")  # fmt: skip
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    sys.argv = list(request["argv"])
    from mitmproxy.tools.main import mitmdump

    sys.exit(mitmdump(sys.argv[1:]))  # unwinds to the interpreter's own exit: atexit, threads, flush


def serve(fd: int) -> None:
    """Answer each request on the socket `fd` (a JSON message; a spawn comes with the log's
    descriptor): `spawn` with the child's pid, `status` with its exit code (null while it runs)."""
    for name in PRELOAD:
        __import__(name)
    signal.signal(signal.SIGCHLD, _reap)
    channel = socket.socket(fileno=fd)
    channel.send(b"ready")
    while True:
        message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 1)
        if not message:
            return
        request = json.loads(message)
        if request["op"] == "spawn":
            # SIGCHLD held until the new pid's old exit code (a pid is reused) is forgotten
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
            ready, started = os.pipe()
            pid = os.fork()
            if pid == 0:
                _child(request, channel, fds[0], started)
            _done.pop(pid, None)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            os.close(started)
            os.read(ready, 1)  # set up (or ended trying)
            os.close(ready)
            os.close(fds[0])
            answer: dict[str, Any] = {"pid": pid}
        else:
            _reap()
            answer = {"returncode": _done.get(request["pid"])}
        channel.send(json.dumps(answer).encode())


# -- the tests' side ----------------------------------------------------------------------------


class ForkServer:
    """One server per test process, started on first use; `popen` is `subprocess.Popen`'s stand-in."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server: subprocess.Popen[bytes] | None = None
        self._channel: socket.socket | None = None
        self._env = dict(os.environ)
        self._keys = _fresh_start_keys(self._env)

    def _ask(self, request: dict[str, Any], fds: Sequence[int] = ()) -> dict[str, Any]:
        with self._lock:
            if self._server is None or self._server.poll() is not None:
                self._start()
            assert self._channel is not None
            socket.send_fds(self._channel, [json.dumps(request).encode()], list(fds))
            return json.loads(self._channel.recv(1 << 16))

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._server = subprocess.Popen(
                [sys.executable, "-m", "tests.forkserver", str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                env=self._env, cwd=Path(__file__).resolve().parent.parent,
            )  # fmt: skip
        self._channel = ours
        if ours.recv(16) != b"ready":
            raise RuntimeError("the fork server did not start")

    def popen(self, args: Sequence[str], *, stdout: IO[bytes], env: Mapping[str, str] | None = None,
              start_new_session: bool = False, umask: int = -1, **popen: Any) -> Any:  # fmt: skip
        """A mitmdump forked by the server, as `subprocess.Popen(args, stdout=log, stderr=STDOUT,
        stdin=DEVNULL, ...)` would start it; any other start is a real `Popen`."""
        env = dict(os.environ if env is None else env)
        plain = popen.get("stderr") == subprocess.STDOUT and popen.get("stdin") == subprocess.DEVNULL
        if not plain or set(popen) - {"stderr", "stdin"} or _fresh_start_keys(env) != self._keys:
            return subprocess.Popen(args, stdout=stdout, env=env, start_new_session=start_new_session,
                                    umask=umask, **popen)  # fmt: skip
        request = {"op": "spawn", "argv": list(args), "env": env, "cwd": os.getcwd(),
                   "umask": umask if umask >= 0 else _umask(), "new_session": start_new_session}  # fmt: skip
        return Forked(self, list(args), self._ask(request, [stdout.fileno()])["pid"])

    def returncode(self, pid: int) -> int | None:
        return self._ask({"op": "status", "pid": pid})["returncode"]

    def close(self) -> None:
        """End the server (the mitmdumps it forked run on)."""
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            if self._server is not None:
                self._server.wait(10)


def _umask() -> int:
    """This process's umask, read without setting it (another thread may be creating a file)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise RuntimeError("no Umask line in /proc/self/status")


class Forked:
    """A forked mitmdump, as much of `subprocess.Popen` as the tests use of it."""

    stdin = stdout = stderr = None

    def __init__(self, server: ForkServer, args: list[str], pid: int) -> None:
        self._server = server
        self.args = args
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.returncode(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
            time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
