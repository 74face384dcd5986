"""What the team tests share: a session recorded through real mitmdump (the emulator upstream)
in a CAPSEM_HOME of its own, the CLI in it, and waiting for the pusher."""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from capsem.mitm import start_mitmdump
from tests.conftest import seeded_confdir

ANTHROPIC_KEY = "sk-ant-team-000000000000000000"


def capsem(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "CAPSEM_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "assembler", *args], env=env, capture_output=True, text=True)
    assert not check or done.returncode == 0, done.stdout + done.stderr
    return done


def call(
    http: httpx.Client, prompt: str, max_tokens: int = 50, control: str = "", status: int = 200
) -> httpx.Response:
    """One Messages call (`control`: the emulator's `x-emulator` header), answered with `status`."""
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    headers = {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"}
    if control:
        headers["x-emulator"] = control
    answer = http.post("https://api.anthropic.com/v1/messages", json=body, headers=headers)
    assert answer.status_code == status, answer.text
    return answer


class Machine:
    """One CAPSEM_HOME standing for one machine of the team."""

    def __init__(self, home: Path, name: str, emu, extra_config: str = "") -> None:
        self.home, self.name, self.emu = home, name, emu
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.yaml").write_text(f"team:\n  machine: {name}\n  user: {name}-user\n" + extra_config)

    def session(self, session_id: str):
        """A mitmdump recording `session_id` here, and an httpx client through it."""
        proxy = start_mitmdump(confdir=seeded_confdir(self.home / "conf"), log_path=self.home / f"{session_id}.log",
                               args=["--mode", f"upstream:{self.emu.proxy_url}",
                                     "--set", f"ssl_verify_upstream_trusted_ca={self.emu.ca_path}",
                                     "--set", f"capsem_session_id={session_id}"],
                               env={**os.environ, "CAPSEM_HOME": str(self.home)})  # fmt: skip
        client = httpx.Client(
            proxy=proxy.url, verify=ssl.create_default_context(cafile=proxy.ca_cert), timeout=30
        )
        return proxy, client

    def outbox(self) -> dict:
        """`capsem team status --json` here, run in this process: the tests poll it every 0.1 s, and
        a `python -m assembler` each time cost ~0.5 CPU-s of imports (the other commands run as
        processes of their own)."""
        from click.testing import CliRunner

        from assembler.cli import cli

        done = CliRunner().invoke(cli, ["team", "status", "--json"], env={"CAPSEM_HOME": str(self.home)},
                                  catch_exceptions=False)  # fmt: skip
        assert done.exit_code == 0, done.output
        return json.loads(done.stdout)

    def wait_pushed(self, seconds: float = 30) -> None:
        """Until the outbox says every session is pushed whole."""
        deadline = time.monotonic() + seconds
        while True:
            sessions = self.outbox()["sessions"]
            if sessions and all(s["state"] == "done" for s in sessions):
                return
            assert time.monotonic() < deadline, sessions
            time.sleep(0.1)

    def cost_report(self) -> dict:
        return json.loads(capsem(self.home, "cost-report", "--json").stdout)


@contextmanager
def team_view(home: Path) -> Iterator[str]:
    """`capsem view --team` in `home` as a real process; its base URL."""
    server = subprocess.Popen([sys.executable, "-m", "assembler", "view", "--team", "--no-open", "--port", "0"],
                              env={**os.environ, "CAPSEM_HOME": str(home)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        line = server.stdout.readline()  # type: ignore[union-attr]
        match = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert match, line + server.stdout.read()  # type: ignore[union-attr]
        yield match.group(0)
    finally:
        server.kill()
        server.wait()
