"""`capsem config check|show`, and a bad setting stopping `capsem run` and mitmdump in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from capsem.mitm import ADDON_PATH, mitmdump_executable
from capsem.paths import default_config_path
from capsem.settings import SECTIONS
from tests.cli.conftest import run

BAD = "capture:\n  preview_bytes: lots\n"


@pytest.fixture
def config(capsem_home: Path) -> Path:
    capsem_home.mkdir(parents=True, exist_ok=True)
    return capsem_home / "config.yaml"


def test_check_names_the_files_it_read(config):
    assert run("config", "check") == f"config OK: {default_config_path()}\n"
    config.write_text("capture:\n  preview_bytes: 4096\n")
    assert run("config", "check") == f"config OK: {default_config_path()}, {config}\n"


def test_check_refuses_a_bad_file_in_one_line_and_exit_1(config):
    config.write_text(BAD)
    out = run("config", "check", code=1)
    assert out == f"Error: {config}: capture.preview_bytes must be a whole number of bytes, got 'lots'\n"


def test_check_another_file_and_overrides(config, tmp_path):
    config.write_text(BAD)  # --file replaces it
    team = tmp_path / "team.yaml"
    team.write_text("diagnostics:\n  sample_interval_ms: 500\n")
    assert run("config", "check", "--file", str(team)) == f"config OK: {default_config_path()}, {team}\n"
    team.write_text("diagnostics:\n  sample_interval_ms: 5\n")
    assert run("config", "check", "--file", str(team), code=1) == (
        f"Error: {team}: diagnostics.sample_interval_ms must be a whole number of milliseconds >= 10, got 5\n")  # fmt: skip
    out = run("config", "check", "--file", str(tmp_path / "missing.yaml"), code=2)
    assert "does not exist" in out
    config.write_text("retention:\n  max_sessions: 10\n")
    assert run("config", "check", "--set", "retention.max_sessions=-1", code=1) == (
        "Error: --set: retention.max_sessions must be a whole number of sessions (0 or null: no limit), "
        "got -1\n")  # fmt: skip
    assert "is not KEY=VALUE" in run("config", "check", "--set", "retention.max_sessions", code=2)


def test_show_gives_each_value_and_where_it_came_from(config):
    config.write_text(
        "capture:\n  preview_bytes: 4096\npolicy:\n  rules: [{action: deny, host: '*.example'}]\n"
    )
    shown = json.loads(run("config", "show", "--json", "--set", "retention.max_sessions=20",
                           "--set", "capture.preview_bytes=100"))  # fmt: skip
    assert shown["files"] == [str(default_config_path()), str(config)]
    values = shown["settings"]
    assert values["capture.preview_bytes"] == {"value": 100, "origin": "--set"}  # --set beats the file
    assert values["retention.max_sessions"] == {"value": 20, "origin": "--set"}
    assert values["policy.rules"] == {"value": [{"name": "rule-1", "action": "deny", "host": "*.example"}],
                                      "origin": str(config)}  # fmt: skip
    assert values["capture.content_max_bytes"] == {"value": 1048576, "origin": "default"}
    assert values["diagnostics.enabled"] == {"value": True, "origin": "default"}
    assert "content-type" in values["headers.allowlist"]["value"]
    assert list(values)[:2] == ["capture.preview_bytes", "capture.content_max_bytes"]  # declaration order

    table = run("config", "show")
    assert table.splitlines()[0] == f"from {default_config_path()}, {config}"
    row = next(line for line in table.splitlines() if "capture.preview_bytes" in line)
    assert row.split() == ["capture.preview_bytes", "4096", "config.yaml"]
    row = next(line for line in table.splitlines() if "policy.rules" in line)
    assert row.split()[:4] == ["policy.rules", "-", "{name:", "rule-1,"] and row.split()[-1] == "config.yaml"
    row = next(line for line in table.splitlines() if "retention.retention_days" in line)
    assert row.split() == ["retention.retention_days", "30", "default"]


def test_show_hides_export_header_values(config):
    token = "Bearer otlp-" + "T" * 24
    config.write_text(f"export:\n  otlp:\n    headers: {{authorization: '{token}'}}\n")
    shown = json.loads(run("config", "show", "--json"))["settings"]["export.otlp.headers"]
    assert shown == {"value": {"authorization": "(hidden)"}, "origin": str(config)}
    table = run("config", "show")
    assert "authorization" in table and "(hidden)" in table and "TTTT" not in table


def test_show_refuses_a_bad_file_like_check(config):
    config.write_text("capture: {preview_byte: 10}\n")
    out = run("config", "show", code=1)
    assert out.startswith(
        f"Error: {config}: capture.preview_byte is not a setting (did you mean preview_bytes?); "
    )
    assert "Traceback" not in out and out.count("\n") == 1


def test_config_help_has_examples():
    assert "capsem config check" in run("config", "--help")
    assert "capsem config show --json" in run("config", "show", "--help")


def test_run_stops_before_starting_anything_on_any_bad_setting(config):
    config.write_text(BAD)
    out = run("run", "--", sys.executable, "-c", "pass", code=1)
    assert out == f"Error: {config}: capture.preview_bytes must be a whole number of bytes, got 'lots'\n"
    assert not (config.parent / "sessions").exists()


# Every kind of bad value: (config.yaml text, the line after "<file>: ")
KINDS = [
    (BAD, "capture.preview_bytes must be a whole number of bytes, got 'lots'"),
    ("policy:\n  rules: [{action: block, host: '*.example'}]\n",
     "policy.rules[1].action must be allow, warn, deny or ask, got 'block'"),
    ("policy:\n  rules: [{action: deny}]\n",
     "policy.rules[1] must name something to match (host, port, path, method, mcp_server, mcp_tool, "
     "mcp_args, tool, tool_args), got {'action': 'deny'}"),
    ("policy:\n  rules: [{action: deny, port: 99999}]\n",
     "policy.rules[1].port must be a port number (1-65535), got 99999"),
    ("capture: {preview_byte: 10}\n", "capture.preview_byte is not a setting (did you mean preview_bytes?); "
     "capture has: preview_bytes, content_max_bytes, max_parse_bytes, max_body_bytes, commit_interval_ms, "
     "max_pending_calls"),
    ("captur: {}\n", f"captur is not a section (did you mean capture?); sections are: {', '.join(SECTIONS)}"),
    ("diagnostics: {enabled: maybe}\n", "diagnostics.enabled must be true or false, got 'maybe'"),
    ("retention: {max_disk_gb: -1}\n",
     "retention.max_disk_gb must be a number of GiB >= 0 (0 or null: no limit), got -1"),
    ("headers: {allowlist: accept}\n", "headers.allowlist must be a list of header names, got 'accept'"),
    ("capture: [1\n", "invalid YAML at line 2, column 1: expected ',' or ']', but got '<stream end>'"),
    ("- capture\n", f"the top level must be a mapping of sections ({', '.join(SECTIONS)}), got ['capture']"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "line"), KINDS, ids=[line.split(" ")[0] for _, line in KINDS])
def test_run_refuses_each_kind_of_bad_value_in_one_line(config, text, line):
    config.write_text(text)
    out = run("run", "--", sys.executable, "-c", "pass", code=1)
    assert out == f"Error: {config}: {line}\n"


def test_a_file_that_is_not_utf8_is_one_line_too(config):
    config.write_bytes(b"capture:\n  preview_bytes: \xff\n")
    out = run("run", "--", sys.executable, "-c", "pass", code=1)
    assert out == f"Error: {config}: not UTF-8 text (invalid start byte at byte 26)\n"


def _mitmdump(tmp_path: Path, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [mitmdump_executable(), "--listen-host", "127.0.0.1", "-p", "0", "--set", f"confdir={tmp_path / 'conf'}",
         "-s", str(ADDON_PATH), *args],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("text", "args", "line"),
    [
        (BAD, [], "{config}: capture.preview_bytes must be a whole number of bytes, got 'lots'"),
        (KINDS[1][0], [], "{config}: policy.rules[1].action must be allow, warn, deny or ask, got 'block'"),
        # mitmdump's own --set options: the same line, not mitmproxy's traceback or a silent plain proxy
        (None, ["--set", "capsem_preview_bytes=lots"],
         "--set: capture.preview_bytes must be a whole number of bytes, got 'lots'"),
        (None, ["--set", "capsem_session_id=bad"], "--set: capsem_session_id must be YYYYMMDD-HHMMSS-xxxx, got 'bad'"),
    ],
    ids=["file-number", "file-policy", "set-number", "set-session-id"],
)  # fmt: skip
def test_mitmdump_with_a_bad_setting_exits_with_the_line_and_no_traceback(config, tmp_path, text, args, line):
    if text is not None:
        config.write_text(text)
    code, out = _mitmdump(tmp_path, *args)
    assert code != 0, out
    assert f"capsem: {line.format(config=config)}\n" in out
    assert "Traceback" not in out, out


@pytest.mark.timeout(90)
def test_run_with_a_bad_mitmdump_option_says_the_line(config):
    out = run("run", "--mitmdump-args", "--set capsem_preview_bytes=lots", "--", sys.executable, "-c", "pass",
              code=1)  # fmt: skip
    assert out.startswith("Error: --set: capture.preview_bytes must be a whole number of bytes, got 'lots' "
                          "(mitmdump exited 1; its log: ")  # fmt: skip
    assert out.count("\n") == 1 and "Traceback" not in out


def test_mitmdump_preview_bytes_option_still_sets_the_preview(mitmdump, emu, capsem_home):
    """`--set capsem_preview_bytes=N` is text now; N still becomes the preview size."""
    import ssl

    import httpx

    from tests.conftest import only_session, rows

    proxy = mitmdump(upstream=emu.proxy_url, ca=str(emu.ca_path), args=["--set", "capsem_preview_bytes=10"])
    with httpx.Client(proxy=proxy.url, verify=ssl.create_default_context(cafile=proxy.ca_cert)) as client:
        body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi there, long enough"}]}
        client.post("https://api.openai.com/v1/chat/completions", json=body)
    proxy.stop()
    (net,) = rows(only_session(capsem_home), "SELECT request_body_preview FROM net_events")
    assert net["request_body_preview"].startswith('{"model":"\n[... ')  # 10 bytes, then what was cut


def test_show_hides_the_team_database_password(config):
    config.write_text("team:\n  url: postgresql://bob:pw-SECRET-77@db.example.com:5432/capsem\n")
    shown = json.loads(run("config", "show", "--json"))["settings"]["team.url"]["value"]
    assert shown == "postgresql://bob:(hidden)@db.example.com:5432/capsem"
    assert "pw-SECRET-77" not in run("config", "show")
