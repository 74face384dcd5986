"""`capsem config check|show`, and a bad setting stopping `capsem run` and mitmdump in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from capsem.mitm import ADDON_PATH, mitmdump_executable
from capsem.paths import default_config_path
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
    row = next(line for line in table.splitlines() if "capture.preview_bytes" in line)
    assert row.split() == ["capture.preview_bytes", "4096", str(config)]
    row = next(line for line in table.splitlines() if "policy.rules" in line)
    assert row.split()[:4] == ["policy.rules", "-", "{name:", "rule-1,"] and row.split()[-1] == str(config)
    row = next(line for line in table.splitlines() if "retention.retention_days" in line)
    assert row.split() == ["retention.retention_days", "30", "default"]


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


@pytest.mark.timeout(90)
def test_mitmdump_with_a_bad_setting_exits_with_the_line_and_no_traceback(config, tmp_path):
    config.write_text(BAD)
    done = subprocess.run(
        [mitmdump_executable(), "--listen-host", "127.0.0.1", "-p", "0", "--set", f"confdir={tmp_path / 'conf'}",
         "-s", str(ADDON_PATH)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert f"{config}: capture.preview_bytes must be a whole number of bytes, got 'lots'" in out
    assert "Traceback" not in out, out
