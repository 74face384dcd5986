"""Faults in capsem's own storage never reach the agent's traffic, and never go unreported.

- The WAL index (`session.db-shm`) that SQLite maps into memory becomes unwritable mid-run: the
  recorder process dies of SIGBUS; mitmdump keeps forwarding byte for byte, and the session ends
  `crashed` with its capture `failed`, never `running`.
- CAPSEM_HOME on a full disk: commits fail, the rows wait and are written once space returns;
  nothing is lost and inspect-session says what happened.
- CAPSEM_HOME full until after the session ends: the rows that could not be written are counted
  in `capsem run`'s summary at once and in main.db once space returns; the session never reads
  as a complete capture.

Both need root (chattr, mount); without it they are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from assembler.inspect import inspect_session
from tests.cli.conftest import run
from tests.conftest import only_session, rows
from tests.reliability.test_crash_and_faults import ask

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chattr +i / mount -t tmpfs)")


def main_row(home):
    (row,) = rows(home / "main.db", "SELECT * FROM sessions")
    return row


@needs_root
def test_an_unwritable_wal_index_kills_only_the_recorder(mitmdump, emu, capsem_home):
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    assert [ask(proxy, n) for n in range(3)] == [200] * 3
    db = only_session(capsem_home)
    shm = db.with_name("session.db-shm")
    assert shm.exists()
    if subprocess.run(["chattr", "+i", str(shm)], capture_output=True).returncode != 0:
        pytest.skip("this filesystem does not take chattr +i")
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:  # the recorder faults while these stream
            assert list(pool.map(lambda n: ask(proxy, n), range(3, 23))) == [200] * 20
        deadline = time.monotonic() + 10  # its successor cannot open session.db either: capture ends
        while "capture stopped, traffic is not affected" not in proxy.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [ask(proxy, n) for n in range(23, 26)] == [200] * 3  # handed to no recorder: dropped
        assert proxy.stop() == 0
    finally:
        subprocess.run(["chattr", "-i", str(shm)], check=False)
    log = proxy.log()
    session = main_row(capsem_home)
    assert session["status"] in ("crashed", "stopped"), log[-3000:]
    if "the recorder process died" in log:
        assert "SIGBUS" in log or "SIGSEGV" in log, log[-3000:]
        assert (session["status"], session["capture_status"]) == ("crashed", "failed")
        assert "died" in session["capture_error"]
        # what the hand-over dropped after the end of capture is saved and logged
        dropped = re.search(r"(\d+) messages dropped by the hand-over", session["capture_error"])
        assert dropped and int(dropped.group(1)) >= 3, session["capture_error"]
        assert dropped.group(0) in log


@pytest.fixture
def tiny_home(tmp_path, monkeypatch):
    """CAPSEM_HOME on its own 3 MiB tmpfs."""
    if os.geteuid() != 0:
        pytest.skip("needs root (mount -t tmpfs)")
    home = tmp_path / "tiny-home"
    home.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(home)], capture_output=True
    ).returncode:
        pytest.skip("cannot mount a tmpfs here")
    monkeypatch.setenv("CAPSEM_HOME", str(home))
    yield home
    subprocess.run(["umount", "-l", str(home)], check=False)


def fill(path) -> None:
    """Write zeros until the filesystem is full."""
    with open(path, "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass


def test_rows_wait_out_a_full_disk_and_nothing_is_lost(mitmdump, emu, tiny_home):
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    assert [ask(proxy, n) for n in range(2)] == [200] * 2
    filler = tiny_home / "filler"
    fill(filler)
    assert [ask(proxy, n) for n in range(2, 32)] == [200] * 30  # the agent never notices
    filler.unlink()
    assert [ask(proxy, n) for n in range(32, 37)] == [200] * 5
    assert proxy.stop() == 0
    db = only_session(tiny_home)
    asked = {json.loads(r["request_body_preview"])["messages"][0]["content"]
             for r in rows(db, "SELECT request_body_preview FROM model_calls")}  # fmt: skip
    assert asked == {f"question {n}" for n in range(37)}
    session = main_row(tiny_home)
    assert (session["status"], session["total_requests"], session["capture_rows_lost"]) == ("stopped", 37, 0)
    meta = dict((r["key"], r["value"]) for r in rows(db, "SELECT key, value FROM session_meta"))
    assert int(meta["capture_commit_failures"]) >= 1 and "full" in meta["capture_last_error"]
    report = inspect_session(db.parent.name)
    (finding,) = [f for f in report.findings if f.check == "capture"]
    assert finding.severity == "warning" and "nothing was lost" in finding.message


FILLING_AGENT = """
import os, anthropic
client = anthropic.Anthropic(api_key="sk-ant-api03-FULLDISK00000000000000000", max_retries=0)
def ask(n):
    client.messages.create(model="claude-haiku-4-5", max_tokens=64,
                           messages=[{"role": "user", "content": f"question {n}"}])
ask(0)
# the disk is full from here on (unbuffered: no bytes left to flush, and fail, at close)
with open(os.path.join(os.environ["CAPSEM_HOME"], "filler"), "wb", buffering=0) as out:
    try:
        while True:
            out.write(bytes(65536))
    except OSError:
        pass
for n in range(1, 41):
    ask(n)
print("asked 41")
"""


def test_a_disk_full_to_the_end_never_reads_as_a_complete_capture(emu, tiny_home, tmp_path, mitmdump):
    """The disk stays full past the session's end: the rows that could not be written are counted in
    `capsem run`'s summary at once, and in main.db once space returns (never `ok`, never 0 lost)."""
    script = tmp_path / "agent.py"
    script.write_text(FILLING_AGENT)
    upstream = f"--mode upstream:{emu.proxy_url} --set ssl_verify_upstream_trusted_ca={emu.ca_path}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # exit 0: the agent never noticed
    out = run(
        "run", "--workspace", str(workspace), "--mitmdump-args", upstream, "--", sys.executable, str(script)
    )
    db = only_session(tiny_home)
    recorded = rows(db, "SELECT COUNT(*) AS n FROM model_calls")[0]["n"]
    assert recorded < 41, "the disk was not full: nothing to test"
    assert re.search(r"capture (failed|incomplete|degraded): .*\d+ rows could not be written", out), out

    (tiny_home / "filler").unlink()  # space returns; the next start finds the session
    mitmdump(upstream=emu.proxy_url, ca=emu.ca_path).stop()
    session = next(
        r for r in rows(tiny_home / "main.db", "SELECT * FROM sessions") if r["id"] == db.parent.name
    )
    assert session["status"] in ("crashed", "stopped") and session["capture_status"] in ("failed", "degraded")
    assert session["capture_rows_lost"] > 0
    errors = [f.message for f in inspect_session(db.parent.name).findings if f.severity == "error"]
    assert any("rows could not be written" in e for e in errors), errors
