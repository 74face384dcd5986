"""End to end: a session recorded for real (the anthropic SDK -> a real mitmdump with the capsem
addon -> the provider emulator), plus logs, snapshots, process diagnostics and a zip in their
real formats, become one bundle. Every table and view is checked against the sources, and the
bundle served by Datasette is opened in headless Chromium (screenshots in test-artifacts/)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anthropic
import httpx
import pytest

from assembler.bundle import DebugBundle
from assembler.bundle.schema import CAPTURE_INTERNAL, CAPTURE_VIEWS
from capsem.ids import rfc3339
from capsem.store.schema import SESSION_TABLES
from tests.bundle.conftest import chromium, chromium_path
from tests.cli.conftest import run
from tests.conftest import ARTIFACTS, rows
from tests.e2e.test_capture_sdk import ANTHROPIC_KEY, TOOLS_A, claude, finish

ROOT = "54615587-eefe-49d2-a5e4-4ee679c8cd24"
CHILD = "a1bf6272-3bdd-4564-9192-5f3ef867a365"
DIAG = "5b1f0c7e-8a0d-4a7e-9b2e-2f4c1d9a77e2"
CRASHED = "crashed_48290_2026-04-13T10-02-11+00-00"
LIVE_DIAG = "agent-diag-1"
EXTRA = ("session_id", "source_id", "correlation", "raw")


def record_session(mitmdump, emu, capsem_home) -> tuple[Path, list[str]]:
    """A tool loop (one tool result is an error), a 429 and a stream cut by an error event.
    Returns the session.db and times taken while the session was recording."""
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    during = []
    client = claude(proxy, "tools=2")
    messages: list[dict] = [{"role": "user", "content": "Read the README, then search for TODOs"}]
    first = client.messages.create(
        model="claude-sonnet-4-5", max_tokens=512, tools=TOOLS_A, messages=messages
    )
    during.append(rfc3339(datetime.now(UTC)))
    uses = [b for b in first.content if b.type == "tool_use"]
    assert len(uses) == 2
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": uses[0].id, "content": "# README\nhello"},
            {"type": "tool_result", "tool_use_id": uses[1].id, "is_error": True, "content": "search backend down"}]},
    ]  # fmt: skip
    client.messages.create(model="claude-sonnet-4-5", max_tokens=512, tools=TOOLS_A, messages=messages)
    during.append(rfc3339(datetime.now(UTC)))
    with pytest.raises(anthropic.RateLimitError):
        claude(proxy, "scenario=error; status=429").messages.create(
            model="claude-haiku-4-5", max_tokens=16, messages=[{"role": "user", "content": "again"}]
        )
    with pytest.raises(anthropic.APIError), claude(proxy, "scenario=midstream_error").messages.stream(
        model="claude-haiku-4-5", max_tokens=64, messages=[{"role": "user", "content": "tell me more"}]
    ) as stream:  # fmt: skip
        stream.get_final_message()
    during.append(rfc3339(datetime.now(UTC)))
    return finish(proxy, capsem_home), during


def write_live_artifacts(folder: Path, during: list[str]) -> None:
    """Artifacts written while the session ran: an agent log without session ids (one line leaks the
    API key) and process diagnostics of this very process (which made the requests)."""
    folder.mkdir(parents=True)
    lines = [
        {"timestamp": during[0], "level": "INFO", "logger": "agent", "event": "agent.turn",
         "message": "model asked for 2 tools", "context": {"turn": 1}},
        {"timestamp": during[1], "level": "ERROR", "logger": "agent", "event": "agent.auth",
         "message": f"retrying with key {ANTHROPIC_KEY}", "context": {"api_key": ANTHROPIC_KEY}},
    ]  # fmt: skip
    (folder / "agent.log").write_text("".join(json.dumps(x) + "\n" for x in lines))
    diag = folder / "diag" / LIVE_DIAG
    diag.mkdir(parents=True)
    pid = os.getpid()
    snaps = [
        {"captured_at": ts, "comm": "pytest", "cpu_percent": 5.0, "event": "snapshot", "fd_count": 30,
         "fd_soft_limit": 1024, "oom_score": oom, "pid": pid, "seq": i, "sig_pnd": "0000000000000000",
         "state": "running", "threads": 4, "ts": ts, "vm_rss_kb": 100_000, "wchan": "0"}
        for i, (ts, oom) in enumerate(zip(during, (100, 950, 950), strict=True))
    ]  # fmt: skip
    (diag / "proc_trace.jsonl").write_text("".join(json.dumps(s, sort_keys=True) + "\n" for s in snaps))
    summary = {"session_id": LIVE_DIAG, "dir_name": LIVE_DIAG, "pid": pid, "cwd": str(folder), "success": True,
               "subtype": "success", "exit_code": 0, "start_ts": during[0], "end_ts": during[-1],
               "snapshot_count": 3, "anomaly_count": 0, "skill_command": "pytest"}  # fmt: skip
    (diag / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_bundle_of_a_recorded_session_opens_in_chromium(mitmdump, emu, capsem_home, artifacts, tmp_path):
    chromium_path()  # fail at once, with the install command, when Chromium is missing
    db, during = record_session(mitmdump, emu, capsem_home)
    sid = db.parent.name
    gz = artifacts / "capsem" / "session.db.gz"  # a vacuumed session: read through assembler/sessiondb
    gz.parent.mkdir()
    with db.open("rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    main_db = artifacts / "capsem" / "main.db"
    shutil.copy(capsem_home / "main.db", main_db)
    write_live_artifacts(artifacts / "live", during)
    debug = artifacts / "debug"
    out = tmp_path / "out" / "bundle.db"
    bundle = DebugBundle.from_artifacts(
        out, capsem_sessions=[gz, main_db], session_snapshots=[debug / f"{ROOT}.jsonl"],
        log_files=[debug / "session.log", debug / "worker.jsonl", artifacts / "live" / "agent.log"],
        filesystem_archives=[debug / "3f0c1c2e-5b8a-4f7e-9a51-0d3f6c2b7e10.zip"],
        diagnostics=[artifacts / "diagnostics", artifacts / "live" / "diag"], description="e2e bundle",
    )  # fmt: skip
    with bundle:

        def q(sql: str, *params) -> list[dict]:
            cur = bundle.query(sql, params)
            return [dict(zip([d[0] for d in cur.description], r, strict=True)) for r in cur]

        check_sources(q, artifacts)
        check_capture_tables(q, db, sid)
        check_sessions(q, sid, capsem_home)
        check_logs(q, sid, out)
        check_snapshot_tables(q)
        check_files(q)
        check_diagnostics(q)
        check_views(q, db, sid)
        stats = bundle.statistics
        assert stats.model_call_count == 4 and stats.session_count == len(q("SELECT * FROM sessions"))
        assert bundle.meta["root_session_id"] == sid and bundle.meta["description"] == "e2e bundle"
        check_in_chromium(bundle, sid, tmp_path)

    # the CLI finds a session recorded under $CAPSEM_HOME by its id, with its main.db row
    by_id = tmp_path / "by-id.db"
    assert "1 session, 4 model calls" in run("bundle", "create", "--capsem-session", sid, "-o", str(by_id))
    with DebugBundle.open(by_id) as again:
        assert again.query("SELECT status, kind FROM sessions").fetchall() == [("stopped", "capsem")]
        kinds = sorted(r[0] for r in again.query("SELECT kind FROM sources"))
        assert kinds == ["capsem_main", "capsem_session"]


def check_sources(q, artifacts: Path) -> None:
    sources = {Path(s["path"]).name: s for s in q("SELECT * FROM sources")}
    kinds = {name: s["kind"] for name, s in sources.items()}
    assert kinds == {
        "session.db.gz": "capsem_session", "main.db": "capsem_main", f"{ROOT}.jsonl": "snapshot",
        "session.log": "log", "worker.jsonl": "jsonl", "agent.log": "log",
        "3f0c1c2e-5b8a-4f7e-9a51-0d3f6c2b7e10.zip": "archive", "sessions.jsonl": "diag_sessions",
        "summary.json": "diag_sessions", "proc_trace.jsonl": "proc_trace", "anomalies.jsonl": "anomalies",
        "token_usage.json": "document",
    }  # fmt: skip
    for s in q("SELECT * FROM sources"):
        path = Path(s["path"])
        assert s["sha256"] == sha256(path) and s["size"] == path.stat().st_size, s
        assert s["errors"] == 0, s
    assert sources["main.db"]["records"] == 1
    assert sources["session.log"]["records"] == 5 and sources["agent.log"]["records"] == 2


def check_capture_tables(q, db: Path, sid: str) -> None:
    """Every row and column of the session database, unchanged (lossless)."""
    copied = 0
    for table in (*SESSION_TABLES, "proc_samples", "proc_anomalies"):
        want = rows(db, f"SELECT * FROM {table} ORDER BY id")
        got = [{k: v for k, v in r.items() if k not in EXTRA}
               for r in q(f"SELECT * FROM {table} WHERE session_id = ? ORDER BY id", sid)]  # fmt: skip
        assert got == want, table
        copied += len(want)
    others = [t["name"] for t in rows(db, "SELECT name FROM sqlite_master WHERE type = 'table' OR name IN "
                                          f"({', '.join(map(repr, CAPTURE_VIEWS))})")
              if t["name"] not in (*SESSION_TABLES, "proc_samples", "proc_anomalies", *CAPTURE_INTERNAL)
              and not t["name"].startswith("sqlite_")]  # fmt: skip
    assert {"model_items", "item_contents", "input_breakdown"} <= set(
        others
    )  # the complete record's tables too
    copied += sum(rows(db, f"SELECT COUNT(*) AS n FROM {t}")[0]["n"] for t in others)
    assert q("SELECT records FROM sources WHERE kind = 'capsem_session'")[0]["records"] == copied
    assert len(q("SELECT * FROM model_calls WHERE session_id = ?", sid)) == 4
    assert {r["correlation"] for r in q("SELECT correlation FROM net_events")} == {"explicit"}


def check_sessions(q, sid: str, capsem_home: Path) -> None:
    sessions = {s["session_id"]: s for s in q("SELECT * FROM sessions")}
    main = rows(capsem_home / "main.db", "SELECT * FROM sessions")[0]
    capsem = sessions[sid]
    assert (capsem["kind"], capsem["status"], capsem["created_at"], capsem["ended_at"]) == (
        "capsem", "stopped", main["created_at"], main["stopped_at"])  # fmt: skip
    assert json.loads(capsem["raw"])["id"] == sid and json.loads(capsem["tags"])["session_id"] == sid
    assert sessions[ROOT]["kind"] == "snapshot" and sessions[ROOT]["parent_session_id"] is None
    assert json.loads(sessions[ROOT]["tags"]) == {"app": "code-reviewer", "session_id": ROOT}
    assert sessions[CHILD]["parent_session_id"] == ROOT
    assert sessions[DIAG]["kind"] == "diagnostics" and sessions[DIAG]["status"] == "success"
    assert sessions[CRASHED]["status"] == "crashed"
    # the diagnostics of this process are tied to the capsem session its requests went through
    live = sessions[LIVE_DIAG]
    assert (live["correlated_session_id"], live["correlation"]) == (sid, "process")
    # the fixtures from January/April 2026 overlap no recording: left alone
    assert sessions[ROOT]["correlated_session_id"] is None and sessions[DIAG]["correlated_session_id"] is None


def check_logs(q, sid: str, out: Path) -> None:
    logs = q("SELECT * FROM logs ORDER BY id")
    assert len(logs) == 10
    live = [r for r in logs if r["logger"] == "agent"]
    assert [(r["session_id"], r["correlation"]) for r in live] == [(sid, "time")] * 2
    assert "[redacted hash:" in live[1]["message"] and "[redacted hash:" in live[1]["raw"]
    assert json.loads(live[1]["context"])["api_key"].startswith("[redacted hash:")
    assert ANTHROPIC_KEY.encode() not in out.read_bytes()  # nowhere in the file, in any table
    start = next(r for r in logs if r["event"] == "agent.start")
    assert (start["session_id"], start["correlation"], start["timestamp"]) == (
        ROOT, "explicit", "2026-01-15T10:31:01.103072Z")  # fmt: skip
    assert json.loads(start["raw"])["timestamp"] == "2026-01-15T10:31:01.103072+00:00"
    failed = next(r for r in logs if r["message"] == "job failed")  # pino: numeric level, epoch ms
    assert (failed["level"], failed["logger"], failed["session_id"], failed["correlation"]) == (
        "ERROR", "worker", ROOT, "directory")  # fmt: skip
    assert json.loads(failed["context"])["err"] == {"type": "Error", "message": "boom"}


def check_snapshot_tables(q) -> None:
    items = q("SELECT session_id, slice_type, item_index, item_type, payload FROM slice_items ORDER BY id")
    assert len(items) == 6 and sum(i["session_id"] == CHILD for i in items) == 1
    assert (
        json.loads(next(i for i in items if i["session_id"] == CHILD)["payload"])["goal"]
        == "Fix failing test"
    )
    tools = {t["tool_name"]: t for t in q("SELECT * FROM tool_invocations")}
    ok, bad = tools["read_file"], tools["write_file"]
    assert (ok["result_success"], ok["result_message"], ok["input_tokens"], ok["call_id"]) == (
        1, "Read 1 file", 120, "call_abc123")  # fmt: skip
    assert json.loads(ok["params"]) == {"path": "src/main.py"} and ok["prompt_name"] == "code_review"
    assert json.loads(ok["result_value"]) == {"content": "print('hi')", "path": "src/main.py"}
    assert (bad["result_success"], bad["result_message"], bad["input_tokens"]) == (
        0,
        "Permission denied",
        None,
    )
    prompts = {p["event_type"]: p for p in q("SELECT * FROM prompt_events")}
    rendered, executed = prompts["rendered"], prompts["executed"]
    assert (
        rendered["char_count"] == len("You are a code reviewer.\nReview src/main.py")
        and rendered["tool_count"] == 2
    )
    assert (
        json.loads(rendered["tool_names"]) == ["read_file", "write_file"]
        and rendered["prompt_ns"] == "review"
    )
    assert (executed["input_tokens"], executed["output_tokens"], executed["total_tokens"], executed["cached_tokens"]) == (
        1500, 320, 1820, 200)  # fmt: skip
    assert json.loads(executed["result"])["text"] == "Looks fine"


def check_files(q) -> None:
    files = {f["path"]: f for f in q("SELECT * FROM files")}
    assert set(files) == {"README.md", "src/main.py", "tests/test_main.py", "assets/logo.bin"}
    assert files["README.md"]["content"] == "# Demo\n" and files["README.md"]["size_bytes"] == 7
    assert files["README.md"]["sha256"] == hashlib.sha256(b"# Demo\n").hexdigest()
    logo = files["assets/logo.bin"]
    assert (logo["is_binary"], logo["content"], logo["data"]) == (1, None, bytes(range(256)))
    assert {f["session_id"] for f in files.values()} == {ROOT}  # next to the snapshot in debug/
    assert {f["archive_id"] for f in files.values()} == {"3f0c1c2e-5b8a-4f7e-9a51-0d3f6c2b7e10"}


def check_diagnostics(q) -> None:
    samples = q("SELECT * FROM proc_samples WHERE session_id = ? ORDER BY seq", DIAG)
    assert [(s["name"], s["rss_kb"], s["fds"], s["fd_limit"], s["oom_score"]) for s in samples] == [
        ("claude", 412380, 41, 1024, 668), ("claude", 1893004, 44, 1024, 901)]  # fmt: skip
    assert samples[1]["ts"] == "2026-04-13T09:12:10.006034Z" and samples[1]["correlation"] == "directory"
    anomalies = {a["kind"]: a for a in q("SELECT * FROM proc_anomalies WHERE session_id = ?", DIAG)}
    assert set(anomalies) == {"oom_spike", "oom_critical", "signals_pending"}
    assert (anomalies["oom_spike"]["value"], anomalies["oom_spike"]["threshold"]) == (233, 200)
    assert anomalies["oom_spike"]["first_ts"] == "2026-04-13T09:12:10.006034Z"
    derived = {a["kind"] for a in q("SELECT kind FROM proc_anomalies WHERE session_id = ?", CRASHED)}
    assert derived == {"zombie_detected", "zombie_persistent"}  # no anomalies.jsonl: capsem's detector
    live = {a["kind"] for a in q("SELECT kind FROM proc_anomalies WHERE session_id = ?", LIVE_DIAG)}
    assert live == {"oom_spike", "oom_critical"}
    diag = q("SELECT session_id, record_kind, pid, peak_rss_kb FROM diag_sessions ORDER BY id")
    assert sorted((d["session_id"], d["record_kind"]) for d in diag) == sorted(
        [(DIAG, "index"), (CRASHED, "index"), (DIAG, "summary"), (LIVE_DIAG, "summary")])  # fmt: skip
    (doc,) = q("SELECT * FROM documents")
    assert doc["session_id"] == DIAG and json.loads(doc["raw"])["input_tokens"] == 48211


def check_views(q, db: Path, sid: str) -> None:
    calls = rows(db, "SELECT * FROM model_calls ORDER BY id")
    tools = rows(db, "SELECT tool_name FROM tool_calls ORDER BY id")
    timeline = q("SELECT * FROM execution_timeline WHERE session_id = ? ORDER BY step_order", sid)
    assert [t["step_order"] for t in timeline] == list(range(1, len(timeline) + 1))
    steps = [(t["event_type"], t["name"]) for t in timeline]
    assert steps[:6] == [
        ("model_call", calls[0]["model"]), ("tool_call", tools[0]["tool_name"]), ("tool_call", tools[1]["tool_name"]),
        ("tool_result", tools[0]["tool_name"]), ("tool_result", tools[1]["tool_name"]), ("model_call", calls[1]["model"]),
    ]  # fmt: skip
    assert [t["prompt_number"] for t in timeline[:6]] == [1] * 6  # one tool loop = one prompt
    assert [t["success"] for t in timeline[3:5]] == [1, 0]
    assert [(t["event_type"], t["success"]) for t in timeline[6:]] == [("model_call", 0), ("model_call", 0)]
    assert timeline[-1]["prompt_number"] > 1
    root_steps = q(
        "SELECT event_type, name FROM execution_timeline WHERE session_id = ? ORDER BY step_order", ROOT
    )
    assert [s["event_type"] for s in root_steps] == [
        "prompt_rendered",
        "tool_invoked",
        "tool_invoked",
        "prompt_executed",
    ]
    assert {t["event_type"] for t in q("SELECT event_type FROM execution_timeline")} >= {"anomaly"}

    tokens = q("SELECT * FROM token_summary WHERE session_id = ?", sid)
    assert sum(t["total_input_tokens"] or 0 for t in tokens) == sum(c["input_tokens"] or 0 for c in calls)
    assert sum(t["call_count"] for t in tokens) == 4
    (snapshot_tokens,) = q("SELECT * FROM token_summary WHERE session_id = ?", ROOT)
    assert (snapshot_tokens["total_tokens"], snapshot_tokens["prompt_count"]) == (1820, 1)
    cost = q("SELECT * FROM cost_summary WHERE session_id = ?", sid)
    want = sum(c["estimated_cost_usd"] or 0 for c in calls)
    assert want > 0 and abs(sum(c["estimated_cost_usd"] or 0 for c in cost) - want) < 1e-6
    assert sum(c["unpriced_calls"] for c in cost) == sum(c["estimated_cost_usd"] is None for c in calls)

    summary = {(t["source"], t["tool_name"]): t for t in q("SELECT * FROM tool_summary")}
    first, second = (summary[("tool_calls", t["tool_name"])] for t in tools)
    assert (first["success_count"], first["failure_count"], second["success_count"], second["failure_count"]) == (
        1, 0, 0, 1)  # fmt: skip
    assert summary[("tool_invocations", "write_file")]["success_rate"] == 0.0
    assert summary[("tool_invocations", "read_file")]["success_rate"] == 100.0

    errors = q("SELECT * FROM error_log")
    kinds = {(e["kind"], e["session_id"]) for e in errors}
    assert {("tool_error", sid), ("http_error", sid), ("truncated_stream", sid), ("log", sid)} <= kinds
    assert {("tool_failed", ROOT), ("anomaly", DIAG), ("anomaly", CRASHED), ("log", ROOT)} <= kinds
    http = next(e for e in errors if e["kind"] == "http_error")
    assert "-> 429" in http["message"]
    assert next(e for e in errors if e["kind"] == "tool_error")["error_detail"] == "search backend down"
    pino = next(e for e in errors if e["message"] == "job failed")  # pino's `err` object
    assert json.loads(pino["error_detail"]) == {"type": "Error", "message": "boom"}
    assert [e["timestamp"] for e in errors] == sorted(e["timestamp"] for e in errors)


def check_in_chromium(bundle: DebugBundle, sid: str, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    profile = tmp_path / "chromium-profile"
    with bundle.start_server() as server:
        assert server.host == "127.0.0.1"
        base = f"{server.url}/{server.database}"
        metadata = httpx.get(f"{server.url}/-/metadata.json", timeout=30).json()
        assert metadata["title"] == f"Debug Bundle: {sid}"
        assert "tool_success" in metadata["databases"][server.database]["queries"]

        timeline_url = f"{base}/execution_timeline?session_id={sid}&_sort=step_order"
        dom = chromium(["--dump-dom", timeline_url], profile)
        assert "Execution timeline" in dom and "model_call" in dom and "tool_result" in dom and sid in dom
        assert "claude-sonnet-4-5" in dom
        shot = ARTIFACTS / "bundle-execution-timeline.png"
        shot.unlink(missing_ok=True)
        chromium([f"--screenshot={shot}", "--window-size=1600,1200", timeline_url], profile)
        assert shot.read_bytes().startswith(b"\x89PNG")

        query_url = f"{base}/tool_success"
        dom = chromium(["--dump-dom", query_url], profile)
        assert "What tools were called and how often did they succeed?" in dom
        assert "read_file" in dom and "write_file" in dom and "100.0%" in dom
        shot = ARTIFACTS / "bundle-canned-query.png"
        shot.unlink(missing_ok=True)
        chromium([f"--screenshot={shot}", "--window-size=1600,1000", query_url], profile)
        assert shot.read_bytes().startswith(b"\x89PNG")
    assert server.process.poll() is not None  # stopped
    with pytest.raises(httpx.TransportError):
        httpx.get(base, timeout=5)


def test_timestamps_from_every_source_sort_together():
    """capsem writes `...123456Z`, weakincentives `+00:00`, pino epoch ms: one format in the bundle."""
    from assembler.bundle.sources.base import normalize_ts

    moment = datetime(2026, 1, 15, 10, 31, 1, 103072, tzinfo=UTC)
    for value in ("2026-01-15T10:31:01.103072+00:00", "2026-01-15T10:31:01.103072Z", "2026-01-15 10:31:01.103072",
                  "2026-01-15T11:31:01.103072+01:00", moment.timestamp()):  # fmt: skip
        assert normalize_ts(value) == "2026-01-15T10:31:01.103072Z", value
    assert normalize_ts(int(moment.timestamp() * 1000)) == "2026-01-15T10:31:01.103000Z"
    assert normalize_ts(rfc3339(moment - timedelta(seconds=1))) < normalize_ts("2026-01-15T10:31:01Z") < (
        normalize_ts(moment.isoformat()))  # fmt: skip
    for bad in ("yesterday", "", None, True, [], "2026-13-01T00:00:00Z"):
        assert normalize_ts(bad) is None


def test_capture_tables_follow_capsem_schema():
    """A column capsem adds to session.db reaches the bundle without editing the bundle schema."""
    from assembler.bundle.schema import CAPTURE_TABLES
    from capsem.store.schema import SESSION_MIGRATIONS, migrate

    conn = sqlite3.connect(":memory:")
    migrate(conn, SESSION_MIGRATIONS)
    for table in SESSION_TABLES:
        assert [c for c, _ in CAPTURE_TABLES[table]] == [
            r[1] for r in conn.execute(f"PRAGMA table_info({table})")
        ]
