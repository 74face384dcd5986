"""`capsem run` end to end (issues 33 and 34): every text it stores goes through the one scrubber
(the session's name and tags, its command line, the processes' command lines, the paths of the
files the agent wrote, the log lines of a policy rule that warns on a path holding a Slack webhook
secret and a Telegram bot token), and what capsem writes only its user reads, under umask 022 and
000: CAPSEM_HOME's folders 0700, its files 0600 (main.db and session.db with their -wal and -shm,
the logs, the vacuumed archives, search.db) and the exports 0600. Searched: every file under
CAPSEM_HOME and every export (tests/reliability/sweep.py)."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import run
from tests.conftest import rows
from tests.reliability.sweep import Corpus, everything, found_in, home_of

ANTHROPIC = "sk-ant-api03-" + "Nm4Qx8Lw2Rt6Yp0Ks3Dv7Hb1" * 2
GITHUB = "ghp_" + "Zq7Wm3Xn8Vb2Lc5Kd9Jf4Hg1Ps6" + "Tr0Ye"
GITLAB = "glpat-" + "Fp3Kx9Lm2Qw7Zt5Rv8Nb"
ACME = "acme_" + "k3j9x0q2w8e7r6t5y4u1i2o3p9a8s7d6"  # a shape only this installation's rules know
SLACK = "T0RUNPRIV1/B0RUNPRIV2/Hs8dK2mQ7vXp4Lz9Wc1Ny6Tb"
TELEGRAM = "6012345678:AAHq2w3e4r5t6y7u8i9o0pAsDfGhJkLzXcV"
FILE_KEY = "ghp_" + "Bn5Mv8Cx2Zl4Kj7Hg1Fd3Sa9Qw" + "0Er6T"
SECRETS = {"name": ANTHROPIC, "tag": GITHUB, "argv": GITLAB, "custom rule": ACME, "slack": SLACK,
           "telegram": TELEGRAM, "file name": FILE_KEY}  # fmt: skip
# Values only the credential-context rules find (branch `scrub`: `NAME=value` with a secret-meaning
# name, whatever the value's shape); `test_context_secrets_are_stored_nowhere` checks them.
DB_PASS = "Qm7vW2xK9pL4"
MYSQL_PWD = "Zr5tY8nB3cF6"
CONFIG = (
    "redaction:\n  rules:\n    - {id: acme-key, regex: '\\b(acme_[a-z0-9]{32})\\b', keywords: [acme_]}\n"
    "policy:\n  rules:\n"
    "    - {name: watch-slack, action: warn, host: hooks.slack.com}\n"
    "    - {name: watch-telegram, action: warn, host: api.telegram.org}\n"
)
AGENT = f"""
import os, pathlib, sys, time, httpx
client = httpx.Client(proxy=os.environ["HTTPS_PROXY"], verify=os.environ["SSL_CERT_FILE"], timeout=30)
client.post("https://hooks.slack.com/services/{SLACK}", json={{"text": "deployed"}})
client.get("https://api.telegram.org/bot{TELEGRAM}/getMe")
client.post("https://api.anthropic.com/v1/messages", json={{"model": "claude-haiku-4-5", "max_tokens": 20,
            "messages": [{{"role": "user", "content": "hi"}}]}},
            headers={{"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"}})
pathlib.Path("notes-{FILE_KEY}.txt").write_text("done")
time.sleep(1.5)  # long enough for the process sampler to see this command line
"""


def modes(root: Path, *, skip: tuple[Path, ...] = ()) -> dict[str, str]:
    """Every folder and file under `root` (itself included) whose mode is not 0700 / 0600."""
    wrong = {}
    for path in [root, *root.rglob("*")]:
        if path in skip:
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            wrong[str(path.relative_to(root))] = oct(mode)
    return wrong


@pytest.fixture(scope="module", params=[0o022, 0o000], ids=["umask022", "umask000"])
def recorded(request, tmp_path_factory) -> Iterator[tuple[Path, Path, Corpus]]:
    """CAPSEM_HOME after one `capsem run` under the umask, and every export of it (`everything`:
    HAR, JSONL, Parquet, HTML, bundle, OTLP, then vacuumed and searched)."""
    base = tmp_path_factory.mktemp("run-private")
    home, work, out = base / "home", base / "work", base / "exports"
    home.mkdir(mode=0o700)  # the user's, with their settings (read-only to capsem)
    (home / "config.yaml").write_text(CONFIG)
    os.chmod(home / "config.yaml", 0o600)
    work.mkdir()
    (work / "agent.py").write_text(AGENT)
    command = (
        f"DB_PASS={DB_PASS} MYSQL_PWD={MYSQL_PWD} {sys.executable} agent.py --token {GITLAB} --key {ACME}"
    )
    before = os.umask(request.param)
    try:
        with home_of(home):
            said = run("run", "--emulator", "--workspace", str(work), "--name", f"x-{ANTHROPIC}",
                       "--tag", f"tok={GITHUB}", "--", "sh", "-c", command)  # fmt: skip
            assert "(stopped, exit 0," in said and "1 model call" in said, said
            corpus = everything(home, out)
    finally:
        os.umask(before)
    yield home, out, corpus


def test_nothing_under_capsem_home_or_in_an_export_holds_a_secret(recorded):
    home, _, corpus = recorded
    leaks = {what: found_in(corpus, secret) for what, secret in SECRETS.items()}
    assert not any(leaks.values()), {k: v for k, v in leaks.items() if v}
    logs = list(home.glob("sessions/*/mitmdump.log"))
    assert len(logs) == 1
    log = logs[0].read_text()
    assert "policy rule watch-slack warns: POST hooks.slack.com:443/services/[redacted hash:" in log
    assert "policy rule watch-telegram warns: GET api.telegram.org:443/bot[redacted hash:" in log


def test_the_stored_texts_are_scrubbed_and_still_say_what_they_were(recorded):
    home, _, _ = recorded
    with home_of(home):
        (session,) = json.loads(run("list-sessions", "--json"))
    assert session["name"].startswith("x-[redacted hash:"), session["name"]
    (tag,) = rows(home / "main.db", "SELECT tag FROM session_tags")
    assert tag["tag"].startswith("tok=[redacted hash:"), tag
    command = session["command"]
    assert "agent.py --token [redacted hash:" in command and "--key [redacted hash:" in command, command
    db = home / "read.db"
    if not db.exists():
        import gzip

        (archive,) = home.glob("sessions/*/session.db.gz")
        db.write_bytes(gzip.decompress(archive.read_bytes()))
        os.chmod(db, 0o600)
    paths = [r["path"] for r in rows(db, "SELECT path FROM fs_events")]
    assert any(p.startswith("notes-[redacted hash:") for p in paths), paths
    cmdlines = [r["cmdline"] for r in rows(db, "SELECT DISTINCT cmdline FROM proc_samples")]
    assert any("agent.py --token [redacted hash:" in (c or "") for c in cmdlines), cmdlines


def test_every_folder_is_0700_and_every_file_0600_whatever_the_umask(recorded):
    home, out, _ = recorded
    assert modes(home) == {}
    exported = modes(out, skip=(out,))  # the folder is the test's; what capsem wrote in it is checked
    assert exported == {}, exported
    assert {p.suffix for p in out.rglob("*") if p.is_file()} >= {".har", ".jsonl", ".html", ".db", ".parquet"}


def test_context_secrets_are_stored_nowhere(recorded):
    _, _, corpus = recorded
    assert found_in(corpus, DB_PASS) == [] and found_in(corpus, MYSQL_PWD) == []
