"""Ctrl-C and SIGTERM while `capsem run` runs an agent, from a real pseudo-terminal.

`capsem run` is the foreground job of a terminal of its own; Ctrl-C is the byte the terminal turns
into SIGINT for the whole foreground process group, as when a user presses it. The agent must get
it with its default disposition, the proxy must keep recording until the agent exits, and
`capsem run` must exit with the agent's status and print its summary; the session ends `stopped`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from tests.conftest import rows

LAUNCH = "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execvp(sys.argv[1], sys.argv[1:])"
"""Make the pseudo-terminal on stdin the controlling terminal of this new session, then run the command."""

AGENT = """
import signal, subprocess, sys, time, anthropic
mode = sys.argv[1]
handler = signal.getsignal(signal.SIGINT)
print("sigint:", "default" if handler is signal.default_int_handler else handler, flush=True)
client = anthropic.Anthropic(api_key="sk-ant-api03-CTRLC000000000000000000000", max_retries=0)
def ask(text):
    client.messages.create(model="claude-haiku-4-5", max_tokens=20, messages=[{"role": "user", "content": text}])
ask("before the signal")
if mode == "ignore":  # an agent (and its child) that ignore Ctrl-C: only a second one ends them
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print("child", child.pid, flush=True)
print("agent ready", flush=True)
try:
    time.sleep(120)
except KeyboardInterrupt:
    ask("after ctrl-c")  # the proxy still records
    print("asked after ctrl-c", flush=True)
    raise
"""


class Terminal:
    """A command run as the foreground job of a pseudo-terminal of its own."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        master, slave = os.openpty()
        self.master = master
        self.process = subprocess.Popen([sys.executable, "-c", LAUNCH, *argv], stdin=slave, stdout=slave,
                                        stderr=slave, cwd=cwd, start_new_session=True)  # fmt: skip
        os.close(slave)
        self.output = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every holder of the terminal has closed it
                return
            if not data:
                return
            self.output += data

    @property
    def text(self) -> str:
        """What the terminal shows (colours left out)."""
        return re.sub(r"\x1b\[[0-9;]*m", "", self.output.decode(errors="replace"))

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.text:
            assert time.monotonic() < deadline and self.process.poll() is None, (
                f"no {text!r} in:\n{self.text}"
            )
            time.sleep(0.02)

    def ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def wait(self, timeout: float = 60.0) -> int:
        code = self.process.wait(timeout)
        self._reader.join(10)
        os.close(self.master)
        return code


def run_agent(emu, tmp_path: Path, mode: str) -> Terminal:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    upstream = f"--mode upstream:{emu.proxy_url} --set ssl_verify_upstream_trusted_ca={emu.ca_path}"
    argv = [sys.executable, "-m", "assembler", "run", "--mitmdump-args", upstream, "--",
            sys.executable, str(script), mode]  # fmt: skip
    term = Terminal(argv, tmp_path)
    term.wait_for("agent ready")
    assert "sigint: default" in term.text  # not inherited as ignored
    return term


def the_session(home: Path) -> tuple[dict, list[str]]:
    """The one session's main.db row and the questions its model calls asked."""
    (session,) = rows(home / "main.db", "SELECT * FROM sessions")
    db = home / "sessions" / session["id"] / "session.db"
    asked = [json.loads(r["request_body_preview"])["messages"][0]["content"]
             for r in rows(db, "SELECT request_body_preview FROM model_calls ORDER BY id")]  # fmt: skip
    return session, asked


def test_ctrl_c_reaches_the_agent_and_the_proxy_records_until_it_exits(emu, capsem_home, tmp_path):
    term = run_agent(emu, tmp_path, "default")
    term.ctrl_c()
    assert term.wait() == 130, term.text
    assert "asked after ctrl-c" in term.text
    session, asked = the_session(capsem_home)
    assert asked == ["before the signal", "after ctrl-c"]
    assert (session["status"], session["exit_code"], session["capture_status"]) == ("stopped", 130, "ok")
    assert session["id"] in term.text and "exit 130" in term.text  # the summary


def test_a_second_ctrl_c_kills_an_agent_that_ignores_the_first(emu, capsem_home, tmp_path):
    term = run_agent(emu, tmp_path, "ignore")
    child = psutil.Process(int(term.text.split("child ", 1)[1].split()[0]))
    term.ctrl_c()
    term.wait_for("Ctrl-C again kills it")
    assert child.is_running() and term.process.poll() is None  # ignored: it goes on, recorded
    term.ctrl_c()
    assert term.wait() == 128 + signal.SIGKILL, term.text
    child.wait(10)  # its whole tree was killed
    session, asked = the_session(capsem_home)
    assert asked == ["before the signal"]
    assert (session["status"], session["exit_code"]) == ("stopped", 137) and session["id"] in term.text


def test_sigterm_to_capsem_run_ends_the_agent_and_the_session_cleanly(emu, capsem_home, tmp_path):
    term = run_agent(emu, tmp_path, "default")
    term.process.send_signal(signal.SIGTERM)  # to capsem run alone, as a supervisor would
    assert term.wait() == 128 + signal.SIGTERM, term.text
    session, asked = the_session(capsem_home)
    assert asked == ["before the signal"]
    assert (session["status"], session["exit_code"]) == ("stopped", 143) and session["id"] in term.text
