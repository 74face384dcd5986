"""Start and stop a real `mitmdump` with the capsem addon (for `capsem run`, the demo, tests).

mitmdump listens on a port the OS picks (`-p 0`); we read the port from its log line
"HTTP(S) proxy listening at 127.0.0.1:PORT". Its output goes to a file, never an unread pipe
(a full pipe would stall the proxy). Stopping sends SIGINT, which makes mitmproxy run every
addon's `done` hook (capsem ends its session there), and waits.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from capsem.private import CHILD_UMASK, open_private, private_dir

ADDON_PATH = Path(__file__).resolve().parent.parent / "addons" / "capsem_addon.py"
_LISTENING = re.compile(rb"proxy(?: \([a-z ]+\))? listening at \*?\[?([0-9a-fA-F.:]+?)\]?:(\d+)")


RECORDING = b"capsem: recording session "
"""The addon's line once its recorder has opened session.db."""
CAPTURING = b"registered; capture started"
"""The addon's line once its session is registered and flows are kept (before RECORDING)."""


LAUNCHER: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen
"""What starts the mitmdump process (`subprocess.Popen`; the test suite forks it from a process
that has imported mitmproxy: `tests/forkserver.py`)."""


class MitmdumpError(RuntimeError):
    """mitmdump did not start or stop as expected; the message quotes its log."""


def mitmdump_executable() -> str:
    candidate = Path(sys.executable).parent / "mitmdump"
    return str(candidate) if candidate.exists() else "mitmdump"


@dataclass
class Mitmdump:
    """A running mitmdump process."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    confdir: Path
    stopped: bool = field(default=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ca_cert(self) -> Path:
        """The CA clients must trust (mitmproxy creates it in its confdir on first start)."""
        return self.confdir / "mitmproxy-ca-cert.pem"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def session_id(self) -> str:
        """The id of the session the capsem addon recorded (from its log line).

        Raises:
            MitmdumpError: the addon did not start a session.
        """
        for line in self.log().splitlines():
            if "capsem: recording session " in line:
                return line.split("capsem: recording session ", 1)[1].split()[0]
        raise MitmdumpError(f"the capsem addon did not start a session; mitmdump said:\n{self.log()[-3000:]}")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGINT, wait for a clean exit (addon `done` hooks run), kill if it hangs."""
        if self.stopped:
            return self.process.returncode
        self.stopped = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise MitmdumpError(
                    f"mitmdump did not stop within {timeout} s:\n{self.log()[-4000:]}"
                ) from None
        return self.process.returncode

    def kill(self) -> None:
        """kill -9: no `done` hook runs (crash tests)."""
        self.stopped = True
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def spawn_mitmdump(
    *,
    confdir: Path,
    log_path: Path,
    args: list[str] | None = None,
    addon: bool = True,
    env: dict[str, str] | None = None,
    new_session: bool = False,
    umask: int = CHILD_UMASK,
) -> subprocess.Popen[bytes]:
    """Start mitmdump on 127.0.0.1 and a free port, without waiting (`wait_for_mitmdump` waits).

    Args:
        confdir: mitmproxy's confdir (its CA lives there).
        log_path: file receiving mitmdump's output.
        args: extra mitmdump arguments (e.g. ``["--mode", "upstream:http://127.0.0.1:9000"]``).
        addon: load `addons/capsem_addon.py` (False gives a plain mitmdump for comparisons).
        env: environment for the process (default: ours).
        new_session: in a session (and process group) of its own: signals sent to ours (a
            terminal's Ctrl-C) do not reach it (`capsem run`).
        umask: its umask: 077, so that all it writes (mitmproxy's CA, the session's files) is
            private (tests pass another to play a mitmdump the user started).
    """
    private_dir(confdir)
    cmd = [
        mitmdump_executable(),
        "--listen-host", "127.0.0.1",
        "-p", "0",
        "--set", f"confdir={confdir}",
        "--set", "termlog_verbosity=info",
    ]  # fmt: skip
    args = args or []
    # no flow lines (URLs, headers): session.db holds the flows, scrubbed (unless the caller sets
    # flow_detail: mitmproxy refuses an option set twice)
    if not any(a.startswith("flow_detail=") for a in args):
        cmd += ["--set", "flow_detail=0"]
    if addon:
        cmd += ["-s", str(ADDON_PATH)]
    cmd += args
    with open_private(log_path, "wb") as log:  # mitmdump and its recorder write only private files
        return LAUNCHER(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        env=env or dict(os.environ), start_new_session=new_session, umask=umask)  # fmt: skip


def wait_for_mitmdump(
    process: subprocess.Popen[bytes],
    *,
    confdir: Path,
    log_path: Path,
    addon: bool = True,
    timeout: float = 30.0,
    session_timeout: float = 10.0,
    ready: bytes = RECORDING,
) -> Mitmdump:
    """Return once mitmdump listens (and, with the addon, logs `ready`: by default that it
    records its session, session.db open; `CAPTURING` comes ~0.2 s earlier, flows are kept).

    Raises:
        MitmdumpError: saying why when mitmdump exits, does not listen within `timeout`, or
        listens without the addon starting a session within `session_timeout` after that.
    """
    deadline = time.monotonic() + timeout
    listening_since: float | None = None
    why = f"it did not listen within {timeout:g} s"
    while time.monotonic() < deadline:
        output = log_path.read_bytes()
        match = _LISTENING.search(output)
        # with the addon, also wait for its session to be registered (its `running` hook logs after "listening")
        if match and (not addon or ready in output):
            return Mitmdump(process, int(match.group(2)), log_path, confdir)
        if process.poll() is not None:
            why = f"it exited with status {process.returncode}"
            break
        if match and listening_since is None:
            listening_since = time.monotonic()
        if listening_since is not None and time.monotonic() - listening_since > session_timeout:
            why = f"it listens but the capsem addon started no session within {session_timeout:g} s"
            break
        time.sleep(0.02)
    if process.poll() is None:
        process.kill()
        process.wait()
    raise MitmdumpError(_startup_failure(why, process.returncode, log_path))


_ADDON_LINE = re.compile(r"^\[[0-9:.]+\] capsem: (.*)$", re.MULTILINE)


def _startup_failure(why: str, code: int | None, log_path: Path) -> str:
    """What the addon said when mitmdump exited at start (one line per problem: a bad setting), else
    why it did not start and the lines of its log that say what went wrong."""
    log = log_path.read_text(errors="replace")
    said = _ADDON_LINE.findall(log)
    if said and code:
        return "; ".join(said) + f" (mitmdump exited {code}; its log: {log_path})"
    return f"mitmdump did not start: {why}{reason_in_log(log)}\n(log: {log_path})"


def reason_in_log(log: str) -> str:
    """The lines of a mitmdump log that say what went wrong (errors, usage), as `: ...` or ``."""
    lines = [line.strip() for line in log.splitlines()]
    found = [
        line for line in lines
        if re.search(r"error|exception|usage:|cannot|invalid|not ", line, re.I) and "Traceback" not in line
    ]  # fmt: skip
    return (":\n  " + "\n  ".join(found[-5:])) if found else ""


def start_mitmdump(
    *,
    confdir: Path,
    log_path: Path,
    args: list[str] | None = None,
    addon: bool = True,
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
    umask: int = CHILD_UMASK,
) -> Mitmdump:
    """Start mitmdump on 127.0.0.1 and a free port; return once it listens (`spawn_mitmdump`'s
    arguments).

    Raises:
        MitmdumpError: when mitmdump exits or does not listen within `timeout`, saying why.
    """
    process = spawn_mitmdump(confdir=confdir, log_path=log_path, args=args, addon=addon, env=env, umask=umask)
    return wait_for_mitmdump(process, confdir=confdir, log_path=log_path, addon=addon, timeout=timeout)
