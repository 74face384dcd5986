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
from dataclasses import dataclass, field
from pathlib import Path

ADDON_PATH = Path(__file__).resolve().parent.parent / "addons" / "capsem_addon.py"
_LISTENING = re.compile(rb"proxy(?: \([a-z ]+\))? listening at \*?\[?([0-9a-fA-F.:]+?)\]?:(\d+)")


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


def start_mitmdump(
    *,
    confdir: Path,
    log_path: Path,
    args: list[str] | None = None,
    addon: bool = True,
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> Mitmdump:
    """Start mitmdump on 127.0.0.1 and a free port; return once it listens.

    Args:
        confdir: mitmproxy's confdir (its CA lives there).
        log_path: file receiving mitmdump's output.
        args: extra mitmdump arguments (e.g. ``["--mode", "upstream:http://127.0.0.1:9000"]``).
        addon: load `addons/capsem_addon.py` (False gives a plain mitmdump for comparisons).
        env: environment for the process (default: ours).
    Raises:
        MitmdumpError: when mitmdump exits or does not listen within `timeout`.
    """
    confdir.mkdir(parents=True, exist_ok=True)
    cmd = [
        mitmdump_executable(),
        "--listen-host", "127.0.0.1",
        "-p", "0",
        "--set", f"confdir={confdir}",
        "--set", "termlog_verbosity=info",
        "--set", "flow_detail=0",
    ]  # fmt: skip
    if addon:
        cmd += ["-s", str(ADDON_PATH)]
    cmd += args or []
    log = log_path.open("wb")
    process = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env or dict(os.environ)
    )
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        output = log_path.read_bytes()
        match = _LISTENING.search(output)
        # with the addon, also wait for its session to be registered (its `running` hook logs after "listening")
        if match and (not addon or b"capsem: recording session" in output):
            return Mitmdump(process, int(match.group(2)), log_path, confdir)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    if process.poll() is None:
        process.kill()
        process.wait()
    raise MitmdumpError(_startup_failure(process.returncode, log_path))


_ADDON_LINE = re.compile(r"^\[[0-9:.]+\] capsem: (.*)$", re.MULTILINE)


def _startup_failure(code: int | None, log_path: Path) -> str:
    """What the addon said when mitmdump did not start (one line per problem: a bad setting),
    else the end of mitmdump's log."""
    log = log_path.read_text(errors="replace")
    said = _ADDON_LINE.findall(log)
    if said and code:
        return "; ".join(said) + f" (mitmdump exited {code}; its log: {log_path})"
    return f"mitmdump did not start (exit {code}):\n{log[-4000:]}"
