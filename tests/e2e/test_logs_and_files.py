"""Logs carry only what the record may carry, and what capsem writes only its user reads (issues
33 and 34), through a real mitmdump and its recorder: a policy rule that warns on a request whose
path holds a Slack webhook secret and a Telegram bot token leaves neither in mitmdump's log (its
own lines and mitmproxy's flow lines), nor anywhere under CAPSEM_HOME; a mitmdump the user started
with umask 000 still makes CAPSEM_HOME and its session 0700 and every file 0600; the recorder's
own log lines are scrubbed. `capsem run` end to end: tests/cli/test_run_private.py."""

from __future__ import annotations

import os
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import msgspec

from addons.spec import spec_of
from capsem.settings import defaults
from tests.conftest import only_session, rows
from tests.reliability.sweep import files, found_in

SLACK = "T0LOGS0001/B0LOGS0002/Lg5kQ8vYp2Xw7RtZ3mNc9HsD"
TELEGRAM = "7012345678:AAFzQ1w2e3r4t5y6u7i8o9p0aSdFgHjKlZx"
CONFIG = (
    "policy:\n  rules:\n"
    "    - {name: watch-slack, action: warn, host: hooks.slack.com}\n"
    "    - {name: watch-telegram, action: warn, host: api.telegram.org}\n"
)


def modes(home: Path) -> dict[str, str]:
    """Every folder and file under `home` (itself included) whose mode is not 0700 / 0600."""
    wrong = {}
    for path in [home, *home.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            wrong[str(path.relative_to(home.parent))] = oct(mode)
    return wrong


def test_a_warn_rule_logs_no_secret_of_the_path_and_a_users_mitmdump_writes_private_files(
    mitmdump, emu, capsem_home
):
    capsem_home.mkdir(mode=0o700)  # the user's home, private, with their policy
    (capsem_home / "config.yaml").write_text(CONFIG)
    os.chmod(capsem_home / "config.yaml", 0o600)
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path, args=["--set", "flow_detail=1"], umask=0o000)
    trust = ssl.create_default_context(cafile=proxy.ca_cert)
    with httpx.Client(proxy=proxy.url, verify=trust, timeout=30) as client:
        client.post(f"https://hooks.slack.com/services/{SLACK}", json={"text": "deployed"})
        client.get(f"https://api.telegram.org/bot{TELEGRAM}/sendMessage?chat_id=1&text=hi")
    assert proxy.stop() == 0
    log = proxy.log()
    assert "policy rule watch-slack warns: POST hooks.slack.com:443/services/[redacted hash:" in log
    assert "policy rule watch-telegram warns: GET api.telegram.org:443/bot[redacted hash:" in log
    assert "POST https://hooks.slack.com/services/[redacted hash:" in log  # mitmproxy's own flow line
    corpus = [("mitmdump.log", log.encode()), *files(capsem_home)]
    assert found_in(corpus, SLACK) == [] and found_in(corpus, TELEGRAM) == []
    decisions = rows(only_session(capsem_home), "SELECT decision FROM net_events")
    assert [d["decision"] for d in decisions] == ["warned", "warned"]
    assert modes(capsem_home) == {}  # CAPSEM_HOME, its session, main.db, session.db, -wal, -shm, the key


def test_the_recorders_log_lines_are_scrubbed(capsem_home, tmp_path):
    """The recorder writes its lines to its stderr, which is mitmdump's log."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    db = blocker / f"sessions-{TELEGRAM}" / "session.db"  # it cannot be opened: the error names it
    spec = msgspec.json.encode(spec_of(defaults().capture, session_id="20260101-000000-abcd", db_path=str(db),
                                       main_db_path=str(capsem_home / "main.db"), mode="mitmdump"))  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "addons.recorder.main"], input=len(spec).to_bytes(4, "big") + spec,
                          capture_output=True, timeout=60)  # fmt: skip
    said = done.stderr.decode()
    assert done.returncode == 3 and "capsem: cannot open" in said and "sessions-[redacted hash:" in said
    assert TELEGRAM not in said
