"""Readers and views on inputs the e2e tests do not produce: a weakincentives debug-bundle zip,
MCP calls (capsem's schema, rows written here since no recorder fills mcp_calls yet), generic
JSON-line logs, and correlation by time, tags and directory."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from assembler.bundle import DebugBundle, build_bundle
from assembler.bundle.detect import detect
from assembler.bundle.sources.logs import map_generic, normalize_level
from capsem.store.schema import open_session_db
from tests.bundle.conftest import FIXTURES

SID = "9b0e2c1a-1111-4a7e-9b2e-2f4c1d9a0001"
TI = "weakincentives.runtime.events.types:ToolInvoked"


def q(bundle: DebugBundle, sql: str, *params) -> list[dict]:
    cur = bundle.query(sql, params)
    return [dict(zip([d[0] for d in cur.description], r, strict=True)) for r in cur]


def snapshot_line(event_id: str) -> str:
    item = {"__type__": TI, "adapter": "claude_agent_sdk", "call_id": "toolu_01", "created_at": "2026-01-20T09:00:01+00:00",
            "event_id": event_id, "name": "Bash", "params": {"command": "ls"}, "prompt_name": "fix",
            "rendered_output": "a b", "result": {"stdout": "a b", "is_error": False}, "run_context": None,
            "session_id": SID, "usage": None}  # fmt: skip
    return json.dumps({"version": "1", "created_at": "2026-01-20T09:00:02+00:00", "parent_id": None,
                       "children_ids": [], "tags": {"session_id": SID}, "policies": {TI: "log"},
                       "slices": [{"slice_type": TI, "item_type": TI, "items": [item]}]})  # fmt: skip


def test_weakincentives_debug_bundle_zip(tmp_path):
    archive = tmp_path / "b1_20260120_090005.zip"
    manifest = {"format_version": "1.0.0", "bundle_id": "b1", "created_at": "2026-01-20T09:00:05+00:00",
                "request": {"request_id": "r1", "session_id": SID, "status": "success"}}  # fmt: skip
    log = {"timestamp": "2026-01-20T09:00:00+00:00", "level": "INFO", "logger": "app", "event": "start",
           "message": "started", "context": {}}  # fmt: skip
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("debug_bundle/manifest.json", json.dumps(manifest))
        zf.writestr("debug_bundle/logs/app.jsonl", json.dumps(log) + "\n")
        zf.writestr("debug_bundle/session/before.jsonl", snapshot_line("e-before") + "\n")
        zf.writestr("debug_bundle/session/after.jsonl", snapshot_line("e-after") + "\n")
        zf.writestr("debug_bundle/filesystem/src/app.py", "print('x')\n")
    with DebugBundle.from_artifacts(tmp_path / "out.db", filesystem_archives=[archive]) as bundle:
        (tool,) = q(bundle, "SELECT * FROM tool_invocations")
        assert (tool["event_id"], tool["tool_name"], tool["result_success"]) == ("e-after", "Bash", 1)
        assert json.loads(tool["result_value"]) == {"stdout": "a b", "is_error": False}
        (entry,) = q(bundle, "SELECT session_id, correlation, message FROM logs")
        assert entry == {
            "session_id": SID,
            "correlation": "directory",
            "message": "started",
        }  # the zip holds one session
        files = {f["path"]: f for f in q(bundle, "SELECT * FROM files")}
        # the earlier snapshot is kept as a file (the later one holds the same events and more)
        assert set(files) == {"src/app.py", "debug_bundle/manifest.json", "debug_bundle/session/before.jsonl"}
        assert files["src/app.py"]["session_id"] == SID and files["src/app.py"]["correlation"] == "explicit"
        assert {f["archive_id"] for f in files.values()} == {"b1"}


def _session_with_mcp(path: Path) -> None:
    conn = open_session_db(path)
    conn.execute("INSERT INTO session_meta VALUES ('session_id', '20260120-090000-abcd'), "
                 "('started_at', '2026-01-20T09:00:00.000000Z')")  # fmt: skip
    conn.execute("INSERT INTO model_calls (timestamp, provider, model, method, path, status_code, stop_reason, "
                 "input_tokens, output_tokens, trace_id, complete, error_type) VALUES ('2026-01-20T09:00:01.000000Z', "
                 "'anthropic', 'claude-haiku-4-5', 'POST', '/v1/messages', 200, NULL, 10, 2, 't1', 1, "
                 "'overloaded_error')")  # fmt: skip
    conn.execute("INSERT INTO mcp_calls (timestamp, server_name, method, tool_name, decision, duration_ms) VALUES "
                 "('2026-01-20T09:00:02.000000Z', 'github', 'tools/call', 'get_issue', 'allowed', 640), "
                 "('2026-01-20T09:00:03.000000Z', 'github', 'tools/call', 'create_pr', 'error', 12)")  # fmt: skip
    conn.execute("UPDATE mcp_calls SET error_message = 'rate limited' WHERE tool_name = 'create_pr'")
    conn.execute(
        "INSERT INTO net_events (timestamp, domain, decision, method, path, error) VALUES "
        "('2026-01-20T09:00:04.000000Z', 'api.github.com', 'error', 'GET', '/x', 'connection refused')"
    )
    conn.close()


def test_mcp_calls_model_errors_and_correlation(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    _session_with_mcp(folder / "session.db")
    logs = [
        {"time": "2026-01-20T09:00:02.500Z", "severity": "warning", "msg": "slow MCP call"},  # in the session's span
        {"time": "2026-01-21T00:00:00Z", "severity": "info", "msg": "next day"},  # outside: next to it on disk
    ]  # fmt: skip
    (folder / "agent.jsonl").write_text("".join(json.dumps(x) + "\n" for x in logs))
    other = tmp_path / "elsewhere"
    other.mkdir()
    tagged = json.loads(snapshot_line("e1"))
    tagged["tags"]["capsem_session"] = "20260120-090000-abcd"
    (other / "tagged.jsonl").write_text(json.dumps(tagged) + "\n")
    build_bundle(tmp_path / "b.db", [folder, other])
    with DebugBundle.open(tmp_path / "b.db") as bundle:
        sid = "20260120-090000-abcd"
        steps = q(bundle, "SELECT event_type, name, success FROM execution_timeline WHERE session_id = ? "
                          "ORDER BY step_order", sid)  # fmt: skip
        assert steps == [
            {"event_type": "model_call", "name": "claude-haiku-4-5", "success": 0},
            {"event_type": "mcp_call", "name": "github:get_issue", "success": 1},
            {"event_type": "mcp_call", "name": "github:create_pr", "success": 0},
        ]
        tools = {
            t["tool_name"]: t for t in q(bundle, "SELECT * FROM tool_summary WHERE source = 'mcp_calls'")
        }
        assert (
            tools["github:get_issue"]["success_rate"] == 100.0
            and tools["github:create_pr"]["failure_count"] == 1
        )
        errors = {e["kind"]: e for e in q(bundle, "SELECT * FROM error_log WHERE session_id = ?", sid)}
        assert set(errors) == {"model_error", "mcp_error", "http_error", "log"}
        assert errors["mcp_error"]["error_detail"] == "rate limited"
        assert errors["http_error"]["message"] == "GET api.github.com/x -> no response"
        by_msg = {r["message"]: r for r in q(bundle, "SELECT * FROM logs")}
        assert (by_msg["slow MCP call"]["session_id"], by_msg["slow MCP call"]["correlation"]) == (
            sid,
            "time",
        )
        assert (by_msg["next day"]["session_id"], by_msg["next day"]["correlation"]) == (sid, "directory")
        (snap,) = q(
            bundle, "SELECT correlated_session_id, correlation FROM sessions WHERE session_id = ?", SID
        )
        assert snap == {"correlated_session_id": sid, "correlation": "explicit"}


def test_generic_log_lines_map_by_usual_keys():
    row = map_generic({"@timestamp": "2026-01-20T09:00:00Z", "levelname": "warn", "name": "svc", "msg": "hi",
                       "request_id": "r1"}, "file.log")  # fmt: skip
    assert row == {"timestamp": "2026-01-20T09:00:00.000000Z", "level": "WARNING", "logger": "svc", "event": None,
                   "message": "hi", "context": {"request_id": "r1"}}  # fmt: skip
    bare = map_generic({"value": 3}, "metrics.jsonl")
    assert (bare["logger"], bare["level"], bare["message"], bare["timestamp"]) == (
        "metrics.jsonl", "INFO", '{"value":3}', None)  # fmt: skip
    assert [normalize_level(v) for v in (10, 30, 40, 50, 60, "fatal", "Err", "notice", "custom")] == [
        "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "CRITICAL", "ERROR", "INFO", "CUSTOM"]  # fmt: skip


def test_kinds_are_detected_from_content_not_names(tmp_path):
    disguised = {
        "notes.txt": FIXTURES / "debug" / "session.log",  # a six-key log named .txt
        "data.log": FIXTURES / "debug" / "54615587-eefe-49d2-a5e4-4ee679c8cd24.jsonl",  # a snapshot named .log
        "trace.json": FIXTURES / "diagnostics" / "sessions" / "5b1f0c7e-8a0d-4a7e-9b2e-2f4c1d9a77e2" / "proc_trace.jsonl",
        "archive.bin": FIXTURES / "debug" / "3f0c1c2e-5b8a-4f7e-9a51-0d3f6c2b7e10.zip",
    }  # fmt: skip
    want = {"notes.txt": "log", "data.log": "snapshot", "trace.json": "proc_trace", "archive.bin": "archive"}
    for name, source in disguised.items():
        (tmp_path / name).write_bytes(source.read_bytes())
        assert detect(tmp_path / name).kind == want[name], name


def test_gzipped_json_lines(tmp_path):
    import gzip

    (tmp_path / "app.log.gz").write_bytes(gzip.compress((FIXTURES / "debug" / "session.log").read_bytes()))
    assert detect(tmp_path / "app.log.gz").kind == "log"
    with DebugBundle.from_directory(tmp_path) as bundle:
        assert bundle.statistics.log_count == 5
