"""`capsem doctor`: passes on this machine, names each fault, and proves a runtime trusts the CA."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from assembler.doctor import CA_NAME, Finding, Report, ca_dir, check_ca, check_home, check_prices
from assembler.doctor_cli import summary
from assembler.run import agent_env, agent_variables
from assembler.runtimes import READS, AgentNotFound, Runtime, probe, runtime_of
from capsem.store.schema import open_main_db
from tests.cli.conftest import run

CHECKS = ("mitmdump", "fast-path", "config", "CAPSEM_HOME", "CA", "prices")


def flat(out: str) -> str:
    """The output with each wrapped line joined back to its first line."""
    return re.sub(r"\n {14,}", " ", out)


def marks(out: str) -> dict[str, str]:
    """check -> its mark (✓ ! ✗ -), from the lines of `capsem doctor`."""
    return {
        line[2:].split()[0]: line[0] for line in out.splitlines() if line[:1] in "✓!✗-" and line[1:2] == " "
    }


@pytest.mark.timeout(90)
def test_doctor_passes_here_and_leaves_the_sessions_alone(capsem_home):
    out = run("doctor")
    found = marks(out)
    if found["prices"] == "!":  # only when the shipped price table has grown old on this clock
        assert "days old" in out
        found["prices"] = "✓"
    if found["fast-path"] == "!":  # only on a machine where `make install` could not compile it
        assert "pure Python" in out
        found["fast-path"] = "✓"
    assert found == dict.fromkeys((*CHECKS, "self-test"), "✓"), out
    assert "read back: 1 model call (anthropic claude-sonnet-4-5, " in out
    assert "session stopped and rolled up" in out
    assert out.splitlines()[-1] in (
        "everything holds (7 checks passed)",
        "1 warning: prices",
        "1 warning: fast-path",
        "2 warnings: fast-path, prices",
    )
    assert (capsem_home / "mitmproxy" / CA_NAME).is_file()  # made, as the first `capsem run` would
    assert not list((capsem_home / "sessions").iterdir()) and not (capsem_home / "main.db").exists()


@pytest.mark.timeout(90)
def test_doctor_with_an_agent_names_its_variables_and_proves_its_trust(capsem_home):
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    report = json.loads(run("doctor", "--json", "--", "node", "-e", "1"))
    assert report["ok"] is True
    checks = {c["check"]: c for c in report["checks"]}
    agent = checks["agent"]["detail"]
    assert agent.startswith("node: Node.js (") and "capsem run gives it:" in agent
    assert f"NODE_EXTRA_CA_CERTS={capsem_home / 'mitmproxy' / CA_NAME} — " in agent
    trust = checks["trust"]
    assert trust["status"] == "ok"
    assert trust["detail"].startswith("Node.js trusts the CA: node v")
    assert trust["detail"].endswith("HTTP 200 through the proxy; recorded as 1 model call")


def test_a_removed_ca_certificate_is_named_with_the_way_back(capsem_home):
    assert check_ca().status == "ok"  # made
    (ca_dir() / CA_NAME).unlink()
    out = flat(run("doctor", code=1))
    assert marks(out)["CA"] == "✗" and marks(out)["self-test"] == "-", out
    assert f"{ca_dir() / CA_NAME} is missing, while mitmdump still signs with" in out
    assert f"→ restore it: openssl x509 -in {ca_dir() / 'mitmproxy-ca.pem'} -out {ca_dir() / CA_NAME}" in out
    assert out.splitlines()[-1] == "1 problem: CA"


def test_an_invalid_config_is_named_in_its_one_line(capsem_home):
    capsem_home.mkdir()
    (capsem_home / "config.yaml").write_text("capture:\n  preview_bytes: lots\n")
    out = flat(run("doctor", code=1))
    assert marks(out)["config"] == "✗"
    assert (f"✗ config      {capsem_home / 'config.yaml'}: capture.preview_bytes must be a whole number of bytes, "
            "got 'lots'") in out  # fmt: skip
    assert "`capsem config check` checks again" in out
    assert "Traceback" not in out


def test_a_capsem_home_that_is_a_file_is_named(capsem_home, monkeypatch):
    capsem_home.write_text("not a directory")
    out = flat(run("doctor", code=1))
    assert marks(out)["CAPSEM_HOME"] == "✗", out
    assert f"{capsem_home} cannot be written (" in out and "Not a directory" in out
    assert "→ make it writable" in out


def test_a_capsem_home_other_users_can_read_is_named_with_the_fix(capsem_home):
    """A home from before capsem kept its files private, or copied with another umask: what others
    can reach is named (not what sits in a folder they cannot enter)."""
    session = capsem_home / "sessions" / "20260101-000000-abcd"
    session.mkdir(parents=True)
    for path in (capsem_home / "main.db", session / "session.db"):
        path.write_text("")
    for path, mode in ((capsem_home, 0o755), (capsem_home / "sessions", 0o755), (session, 0o700),
                       (capsem_home / "main.db", 0o644), (session / "session.db", 0o644)):  # fmt: skip
        os.chmod(path, mode)
    finding = check_home()
    assert finding.status == "warn" and finding.fix == f"chmod -R go-rwx {capsem_home}", finding
    assert "other users can read 3 files and folders in it" in finding.detail, finding.detail
    assert str(capsem_home / "main.db") in finding.detail and "session.db" not in finding.detail
    subprocess.run(["chmod", "-R", "go-rwx", str(capsem_home)], check=True)
    assert check_home().status == "ok"


@pytest.mark.timeout(60)
def test_a_read_only_capsem_home_is_named(capsem_home, tmp_path):
    """A read-only mount (tests run as root, where permissions do not stop a write): a tmpfs holding
    a CA, remounted read-only, in a mount namespace of its own that ends with the command."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a read-only CAPSEM_HOME")
    assert check_ca().status == "ok"  # a home with its CA, copied into the mount
    target = tmp_path / "ro-home"
    target.mkdir()
    script = ('mount -t tmpfs tmpfs "$CAPSEM_HOME" && cp -a "$1/." "$CAPSEM_HOME" && '
              'mount -o remount,ro "$CAPSEM_HOME" && exec "$2" -m assembler doctor')  # fmt: skip
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                           str(capsem_home), sys.executable],
                          env=os.environ | {"CAPSEM_HOME": str(target)}, capture_output=True, text=True,
                          timeout=50)  # fmt: skip
    if "✓ mitmdump" not in done.stdout:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")
    out = flat(done.stdout)
    assert done.returncode == 1, out
    assert marks(out)["CAPSEM_HOME"] == "✗" and marks(out)["CA"] == "✓", out
    assert f"{target} cannot be written (" in out and "Read-only file system" in out


def test_prices_name_the_models_seen_lately_that_have_no_price(capsem_home):
    main = open_main_db(capsem_home / "main.db")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    main.execute(
        "INSERT INTO sessions (id, status, created_at) VALUES ('20260101-000000-0001', 'stopped', ?)", (now,)
    )
    main.execute("INSERT INTO sessions (id, status, created_at) VALUES ('20200101-000000-0002', 'stopped', "
                 "'2020-01-01T00:00:00.000Z')")  # fmt: skip
    for session, provider, model in [("20260101-000000-0001", "anthropic", "claude-sonnet-4-5"),
                                     ("20260101-000000-0001", "anthropic", "claude-imaginary-9"),
                                     ("20260101-000000-0001", "ollama", "llama3.2"),
                                     ("20200101-000000-0002", "openai", "gpt-from-long-ago")]:  # fmt: skip
        main.execute("INSERT INTO ai_usage (session_id, provider, model, call_count) VALUES (?, ?, ?, 1)",
                     (session, provider, model))  # fmt: skip
    main.close()
    found = check_prices()
    assert found.status == "warn"
    assert found.detail.endswith(
        "1 model of the 2 seen in the last 30 days has no known price: claude-imaginary-9 (anthropic) "
        "(1 model of local or unpriced providers, never priced)"
    )
    assert found.fix.startswith("capsem update-prices --from https://")


def test_summary_counts_agree_with_their_nouns():
    assert summary(Report([Finding("config", "fail", ""), Finding("prices", "warn", ""),
                           Finding("trust", "warn", "")])) == "1 problem and 2 warnings: config, prices, trust"  # fmt: skip
    assert summary(Report([Finding("prices", "warn", "")])) == "1 warning: prices"
    assert summary(Report([Finding("CA", "ok", "")])) == "everything holds (1 check passed)"


# --- runtimes ---------------------------------------------------------------------------------------


def test_each_variable_doctor_names_is_one_capsem_run_gives():
    given = agent_variables("http://127.0.0.1:1", Path("/ca.pem"))
    assert given["CODEX_CA_CERTIFICATE"] == "/ca.pem"
    for reads in READS.values():
        for var, _who in reads:
            assert var in given, var


def _executable(folder: Path, name: str, content: bytes) -> Path:
    path = folder / name
    path.write_bytes(content)
    path.chmod(0o755)
    return path


def test_the_runtime_of_an_agent(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _executable(bin_dir, "codex", b"#!/usr/bin/env node\n")  # the npm launcher of a Rust binary
    _executable(bin_dir, "my-agent", b"#!/usr/bin/env -S node --no-warnings\nconsole.log(1)\n")
    _executable(bin_dir, "claude", b"#!/bin/sh\n")
    _executable(bin_dir, "py-agent", f"#!{sys.executable} -u\n".encode())
    _executable(bin_dir, "sh-agent", b"#!/bin/sh\nexec something\n")
    _executable(bin_dir, "go-agent", b"\x7fELF" + b"\0" * (1 << 20) + b"\xff Go buildinf:" + b"\0" * 64)
    _executable(
        bin_dir, "rs-agent", b"\x7fELF" + b"\0" * 100 + b"/rustc/90b35a6239c3d8bdabc530a6a0816f7ff89a0aaf/"
    )
    _executable(bin_dir, "c-agent", b"\x7fELF" + b"\0" * 100)
    assert runtime_of(["codex", "exec", "hi"]).kind == "rust"
    assert runtime_of(["claude", "-p", "hi"]).kind == "node"
    node = runtime_of(["my-agent"])
    assert (node.kind, node.why) == (
        "node",
        f"#!/usr/bin/env -S node --no-warnings in {bin_dir / 'my-agent'}",
    )
    assert node.executable == shutil.which("node")
    python = runtime_of(["py-agent"])
    assert (python.kind, python.executable) == ("python", sys.executable)
    assert runtime_of(["sh-agent"]).kind == "unknown"
    assert runtime_of(["go-agent"]).kind == "go"  # the marker past the first MiB block
    assert runtime_of(["rs-agent"]).kind == "rust"
    assert runtime_of(["c-agent"]).kind == "unknown"
    assert runtime_of([sys.executable]) == Runtime("python", sys.executable, sys.executable)
    with pytest.raises(AgentNotFound, match="'no-such-agent' is not on PATH"):
        runtime_of(["no-such-agent"])


@pytest.mark.timeout(90)
def test_each_runtime_trusts_the_ca_capsem_run_gives_and_not_another(mitmdump, emu, capsem_home):
    """The probes against one real mitmdump: with `capsem run`'s variables each request goes through;
    with the CA variables pointing at another CA, each runtime refuses, saying why. (A runtime that is
    not installed is left out: Go often is not.)"""
    proxy = mitmdump(upstream=emu.proxy_url, ca=str(emu.ca_path))
    given = agent_env(proxy)
    wrong = given | dict.fromkeys(
        [v for v, value in given.items() if value == str(proxy.ca_cert)], emu.ca_path
    )
    for kind, name in (("node", "node"), ("python", "python3"), ("curl", "curl"), ("go", "go")):
        executable = shutil.which(name)
        if executable is None:
            continue
        runtime = Runtime(kind, executable, executable)
        trusted = probe(runtime, given)
        assert trusted.trusted is True, trusted
        refused = probe(runtime, wrong)
        assert refused.trusted is False, refused
        assert "certificate" in refused.detail.lower(), refused
    assert probe(Runtime("rust", "codex"), given).trusted is None
    assert probe(Runtime("go", "x", None), given).detail == "Go not found on PATH"


@pytest.mark.timeout(90)
def test_a_self_test_denied_by_the_users_policy_names_the_rule(capsem_home):
    capsem_home.mkdir(mode=0o700)  # (one others can read is a warning of its own)
    (capsem_home / "config.yaml").write_text(
        "policy:\n  rules: [{name: no-anthropic, action: deny, host: api.anthropic.com}]\n"
    )
    out = flat(run("doctor"))  # a warning: exit 0
    assert marks(out)["self-test"] == "!", out
    assert "HTTP 403: denied by your policy rule 'no-anthropic'" in out
    assert out.splitlines()[-1] == "1 warning: self-test"


@pytest.mark.timeout(90)
def test_doctor_checks_a_broker_setup_end_to_end(capsem_home, monkeypatch):
    """Issue 25, point 3: each brokered credential's value can be read, and each placeholder sent in
    every place its provider reads a key from comes out of the self-test's mitmdump replaced."""
    capsem_home.mkdir(parents=True, exist_ok=True)
    (capsem_home / "config.yaml").write_text(
        "credentials:\n"
        "  anthropic: {host: api.anthropic.com, header: x-api-key, env: DOCTOR_ANTHROPIC}\n"
        "  gemini: {host: generativelanguage.googleapis.com, query: key, env: DOCTOR_GEMINI}\n"
    )
    monkeypatch.setenv("DOCTOR_ANTHROPIC", "sk-ant-api03-DOCTORrealKEY000000000000")
    monkeypatch.setenv("DOCTOR_GEMINI", "AIzaDOCTORrealKEY000000000000000000000")
    report = json.loads(run("doctor", "--json"))
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["credentials"]["status"] == "ok", checks["credentials"]
    broker = checks["broker"]
    assert broker["status"] == "ok", broker
    for place in ("anthropic: header authorization to api.anthropic.com", "anthropic: header x-api-key to",
                  "gemini: header x-goog-api-key to generativelanguage.googleapis.com", "gemini: query key to"):  # fmt: skip
        assert place in broker["detail"]
    monkeypatch.delenv("DOCTOR_GEMINI")
    out = run("doctor", code=1)
    assert "credentials.gemini.env names DOCTOR_GEMINI, which is not set" in flat(out)
