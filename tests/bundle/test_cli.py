"""`capsem bundle create|serve|info|query|export` on the real-format fixtures."""

from __future__ import annotations

import csv
import io
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from assembler.bundle import DebugBundle
from tests.cli.conftest import run

ROOT = "54615587-eefe-49d2-a5e4-4ee679c8cd24"


@pytest.fixture
def made(artifacts: Path) -> Path:
    """A bundle built by `capsem bundle create DIR` (default output DIR/bundle.db)."""
    out = run("bundle", "create", str(artifacts), "--description", "fixtures", "--tag", "team=qa")
    assert "wrote" in out and "4 sessions" in out
    return artifacts / "bundle.db"


def test_create_reports_every_source(made, artifacts):
    with DebugBundle.open(made) as bundle:
        assert bundle.meta["description"] == "fixtures" and json.loads(bundle.meta["tags"]) == {"team": "qa"}
        assert bundle.meta["source_directory"] == str(artifacts)
        assert bundle.session_ids[0] == ROOT
    again = json.loads(run("bundle", "create", str(artifacts), "--json"))  # rebuilds over the old bundle
    kinds = sorted(s["kind"] for s in again["sources"])
    assert "bundle" not in kinds and kinds.count("proc_trace") == 2 and kinds.count("diag_sessions") == 2
    assert again["statistics"]["tool_invocation_count"] == 2 and again["statistics"]["file_count"] == 4


def test_create_needs_inputs_and_checks_tags(tmp_path):
    assert "give at least one input" in run("bundle", "create", "-o", str(tmp_path / "b.db"), code=2)
    assert "is not KEY=VALUE" in run("bundle", "create", str(tmp_path), "--tag", "oops", code=2)
    (tmp_path / "empty").mkdir()
    assert "no input files found" in run("bundle", "create", str(tmp_path / "empty"), code=1)


def test_info(made):
    out = run("bundle", "info", str(made))
    assert f"{ROOT} (snapshot, root)" in out and f"child of {ROOT}" in out
    assert "Tool invocations: 2" in out and "Anomalies: 5" in out and "Description: fixtures" in out
    info = json.loads(run("bundle", "info", str(made), "--json"))
    assert info["meta"]["schema_version"] == 1 and len(info["sources"]) == 10
    assert info["statistics"]["total_input_tokens"] == 1500


def test_query(made):
    sql = "SELECT tool_name, COUNT(*) AS n FROM tool_invocations GROUP BY tool_name ORDER BY tool_name"
    assert json.loads(run("bundle", "query", str(made), "--format", "json", sql)) == [
        {"tool_name": "read_file", "n": 1}, {"tool_name": "write_file", "n": 1}]  # fmt: skip
    table = run("bundle", "query", str(made), sql)
    assert "read_file" in table and "(2 rows)" in table
    rows = list(csv.reader(io.StringIO(run("bundle", "query", str(made), "--format", "csv",
                                           "SELECT level FROM logs WHERE logger = ?", "-p", "demo.agent"))))  # fmt: skip
    assert rows == [["level"], ["INFO"], ["WARNING"], ["ERROR"]]
    assert "only SELECT" in run("bundle", "query", str(made), "DELETE FROM logs", code=1)


def test_query_at_80_columns_keeps_columns_whole(made, monkeypatch):
    """Issue 25, point 4: as seen, `bundle query` squeezed every column to 5 characters."""
    for width in (80, 160):
        monkeypatch.setenv("COLUMNS", str(width))
        out = run("bundle", "query", str(made), "SELECT * FROM logs LIMIT 3")
        assert all(len(line.rstrip()) <= width for line in out.splitlines()), out
        with DebugBundle.open(made) as bundle:
            result = bundle.run("SELECT * FROM logs LIMIT 3", [])
        for name in result.columns:
            assert name in out.split(), name
        for row in result.rows:
            for value in row:
                if isinstance(value, str) and " " not in value and len(value) < 40:
                    assert value in out, value  # whole, never folded
    assert "no such table" in run("bundle", "query", str(made), "SELECT * FROM nope", code=1)


def test_export(made, tmp_path):
    out = tmp_path / "tools.csv"
    assert "wrote 2 rows" in run("bundle", "export", str(made), "tool_invocations", "-o", str(out))
    with out.open(newline="") as f:
        assert {r["tool_name"] for r in csv.DictReader(f)} == {"read_file", "write_file"}
    errors = json.loads(run("bundle", "export", str(made), "--format", "json", "--query",
                            "SELECT kind, message FROM error_log WHERE kind = 'tool_failed'"))  # fmt: skip
    assert errors == [{"kind": "tool_failed", "message": "write_file: Permission denied"}]
    lines = run("bundle", "export", str(made), "files", "--format", "jsonl").splitlines()
    logo = next(json.loads(x) for x in lines if '"assets/logo.bin"' in x)
    assert __import__("base64").b64decode(logo["data"]) == bytes(range(256))
    assert "no table or view 'nope'" in run("bundle", "export", str(made), "nope", code=1)
    assert "either a TABLE or --query" in run("bundle", "export", str(made), code=2)


def test_api_exports(made, tmp_path):
    with DebugBundle.open(made) as bundle:
        path = bundle.export_csv("error_log", tmp_path / "errors.csv")
        with path.open(newline="") as f:
            assert any(r["kind"] == "anomaly" for r in csv.DictReader(f))
        path = bundle.export_json("SELECT path, size_bytes FROM files ORDER BY path", tmp_path / "files.json")
        assert json.loads(path.read_text())[0] == {"path": "README.md", "size_bytes": 7}
        meta = bundle.metadata()
        tables = meta["databases"]["bundle"]["tables"]
        assert tables["tool_invocations"]["label_column"] == "tool_name"
        assert {"tool_success", "errors", "timeline", "token_usage", "agent_files"} <= set(
            meta["databases"]["bundle"]["queries"])  # fmt: skip


def test_serve_refuses_other_hosts(made):
    assert "only served on loopback" in run("bundle", "serve", str(made), "--host", "0.0.0.0", "--no-browser",
                                            code=1)  # fmt: skip


def _serving(made: Path, log: Path) -> subprocess.Popen:
    with log.open("wb") as f:
        return subprocess.Popen([sys.executable, "-m", "assembler", "bundle", "serve", str(made), "--port", "0",
                                 "--no-open"], stdout=f, stderr=subprocess.STDOUT)  # fmt: skip


def _served_url(proc: subprocess.Popen, log: Path) -> str:
    """The URL from the "Serving ... at URL" line, once it is printed."""
    deadline = time.monotonic() + 90
    while "Serving" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    line = next(x for x in log.read_text().splitlines() if x.startswith("Serving"))
    return line.split(" at ", 1)[1].split()[0]


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not a listener
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _kill(proc: subprocess.Popen, *children: psutil.Process) -> None:
    """A failed test leaves nothing running: capsem, and the Datasette it started."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for child in children:
        if child.is_running():
            child.kill()


def test_serve_stopped_by_sigterm_stops_datasette(made, tmp_path):
    log = tmp_path / "serve.log"
    proc, children = _serving(made, log), []
    try:
        url = _served_url(proc, log)
        port = int(url.split(":")[2].split("/")[0])
        assert httpx.get(url + ".json", timeout=30).status_code == 200 and not _port_is_free(port)
        (child,) = children = psutil.Process(proc.pid).children()
        assert "datasette" in child.cmdline()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        _kill(proc, *children)
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert _port_is_free(port)


def test_serve_stopped_by_sigterm_while_starting_leaves_no_datasette(made, tmp_path):
    proc, children = _serving(made, tmp_path / "serve.log"), []
    try:
        deadline = time.monotonic() + 90
        while not (children := psutil.Process(proc.pid).children()) and time.monotonic() < deadline:
            time.sleep(0.01)
        (child,) = children
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) in (0, 1)  # 1: click's "Aborted!" when Datasette had not started yet
    finally:
        _kill(proc, *children)
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


def test_serve_until_interrupted(made, tmp_path):
    log = tmp_path / "serve.log"
    proc = _serving(made, log)
    try:
        url = _served_url(proc, log)
        assert url.startswith("http://127.0.0.1:") and url.endswith("/bundle")
        errors = httpx.get(f"{url}/errors.json?_shape=objects", timeout=30).json()
        assert any(r["message"] == "write_file: Permission denied" for r in errors["rows"])
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, log.read_text()
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=5)
