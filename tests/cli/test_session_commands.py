"""list-sessions, query-session, inspect-session on a session recorded through real mitmdump,
and on deliberately broken copies of it."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from assembler import inspect as checks
from assembler.query import QueryError, _heap_api, run_query
from assembler.sessiondb import open_session
from capsem.rollup import open_main, rollup
from tests.cli.conftest import (
    clone_session,
    days_ago,
    execute,
    leave_wal,
    recorded_id,
    run,
    session_db,
)

ROOT = Path(__file__).resolve().parents[2]


def gzip_session(home) -> str:
    db = session_db(home)
    with open(db, "rb") as src, gzip.open(db.with_name("session.db.gz"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    for name in ("session.db", "session.db-wal", "session.db-shm"):
        db.with_name(name).unlink(missing_ok=True)
    return db.parent.name


# --- list-sessions ------------------------------------------------------------------------------


def test_list_sessions(home, monkeypatch):
    sid = recorded_id(home)
    monkeypatch.setenv("COLUMNS", "200")
    out = run("list-sessions")
    over, header, rule, line, footer = out.splitlines()
    assert over.split() == ["cache", "cache"] and set(rule) == {"─"}
    assert header.split() == ["ID", "Created", "Duration", "Status", "exit", "Cost", "input", "write", "read",
                              "output", "net", "tools", "mcp", "fs", "errors",
                              "Command"]  # fmt: skip
    cells = line.split()
    assert cells[0] == f"{sid}*" and cells[4] == "stopped"
    assert cells[2].count(":") == 2 and cells[1].count("-") == 1  # MM-DD HH:MM:SS
    assert cells[5].startswith("$") and len(cells[5].split(".")[1]) == 4  # $x.xxxx
    (row,) = json.loads(run("list-sessions", "--json"))
    assert (
        row["total_input_tokens"] > 500 and row["total_cache_read_tokens"] == 0 and row["exit_code"] is None
    )
    assert cells[6:] == [f"{row['total_input_tokens']:,}", "0", "0", f"{row['total_output_tokens']:,}", "4", "2", "0",
                         "0", "0"]  # fmt: skip
    assert footer == "* = session.db on disk (queryable)"
    monkeypatch.setenv("COLUMNS", "80")
    narrow = run("list-sessions")
    assert all(len(x) <= 80 for x in narrow.splitlines()), narrow
    assert f"{sid}*" in narrow and "stopped" in narrow and cells[5] in narrow and "Command" in narrow
    (row,) = json.loads(
        run("list-sessions", "--json", "--with-model", "--with-tools", "--with-net", "--with-db")
    )
    assert (
        row["id"] == sid and row["total_tool_calls"] == 2 and row["has_db"] and row["total_model_calls"] == 4
    )
    assert "No sessions found" in run("list-sessions", "--with-mcp")
    assert "No sessions found" in run("list-sessions", "--min-cost", "1000")
    assert sid in run("list-sessions", "--min-cost", "0.0001")


def test_list_sessions_filters_order_and_durations(home):
    running = clone_session(home, days_ago(-0.01), status="running", suffix="aaaa")
    empty = clone_session(home, days_ago(2), empty=True, suffix="bbbb")
    vacuumed = clone_session(home, days_ago(3), suffix="cccc")
    culled = clone_session(home, days_ago(4), suffix="dddd")
    execute(home / "main.db", f"UPDATE sessions SET status = 'vacuumed' WHERE id = '{vacuumed}'",
            f"UPDATE sessions SET status = 'terminated' WHERE id = '{culled}'")  # fmt: skip
    (home / "sessions" / empty / "session.db").unlink()
    shutil.rmtree(home / "sessions" / culled)
    rows = json.loads(run("list-sessions", "--json"))
    # newest first; vacuumed (gzipped, queryable) listed, culled only with --all
    assert [r["id"] for r in rows] == [running, recorded_id(home), empty, vacuumed]
    assert culled not in run("list-sessions") and culled in run("list-sessions", "--all")
    out = run("list-sessions", "--all")
    assert f"{empty} " in out and f"{empty}*" not in out  # no database on disk: no star
    assert "running" in next(line for line in out.splitlines() if running in line)
    assert "3m00s" in next(line for line in out.splitlines() if vacuumed in line)
    assert [r["id"] for r in json.loads(run("list-sessions", "--json", "--with-db", "-n", "1"))] == [running]
    # a running session's totals are read live (main.db keeps zeros until it stops), as cost-report reads it
    live, recorded = (next(r for r in rows if r["id"] == sid) for sid in (running, recorded_id(home)))
    assert live["total_estimated_cost"] > 0 and live["total_requests"] > 0
    for column in ("total_requests", "total_input_tokens", "total_output_tokens", "total_estimated_cost",
                   "total_tool_calls", "total_model_calls"):  # fmt: skip
        assert live[column] == recorded[column], column
    report = json.loads(run("cost-report", "--json", "--by", "session"))
    assert running in report["totals"]["live_sessions"]
    costs = {r["key"]: r for r in report["rows"]}
    assert costs[running]["cost"] == pytest.approx(live["total_estimated_cost"]), costs[running]
    assert empty not in run("list-sessions", "--with-net")
    # --min-cost is a bind parameter: SQL in it is just a bad number
    assert "is not a valid float" in run("list-sessions", "--min-cost", "0 OR 1=1", code=2)


def test_list_sessions_says_how_many_it_left_out_and_n_0_lists_all(home):
    ids = [clone_session(home, days_ago(1 + i / 100), suffix=f"{i:04x}") for i in range(11)]
    out = run("list-sessions")
    assert "showing 10 of 12 sessions (-n 0 shows all)" in out and ids[-1] not in out
    everything = run("list-sessions", "-n", "0")
    assert all(i in everything for i in ids) and "showing" not in everything
    assert len(json.loads(run("list-sessions", "-n", "0", "--json"))) == 12
    assert "showing 1 of 12 sessions" in run("list-sessions", "-n", "1")


def test_list_sessions_shows_a_dead_running_session_as_crashed(home):
    """A `running` row whose process is gone (its pid is stored) is not running."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sid = clone_session(home, days_ago(-0.001), status="running", suffix="dead")
    execute(home / "main.db", f"UPDATE sessions SET pid = {dead.pid}, pid_started_at = 1 WHERE id = '{sid}'")
    alive = clone_session(home, days_ago(-0.002), status="running", suffix="a11e")
    execute(
        home / "main.db",
        f"UPDATE sessions SET pid = {os.getpid()}, pid_started_at = NULL WHERE id = '{alive}'",
    )
    rows = {r["id"]: r for r in json.loads(run("list-sessions", "--json"))}
    assert rows[sid]["status"] == "crashed" and rows[sid]["process_gone"]
    assert rows[alive]["status"] == "running" and not rows[alive]["process_gone"]
    out = run("list-sessions")
    assert "crashed" in next(line for line in out.splitlines() if sid in line)
    assert "1 session left running by a process that is gone: shown crashed" in out


def test_list_sessions_without_main_db(capsem_home):
    """Issue 25, point 8. As seen: an empty $CAPSEM_HOME made list-sessions exit 1 with "Error"."""
    out = run("list-sessions")
    assert out == (f"No sessions recorded yet in {capsem_home}: capsem run -- AGENT records one (capsem run "
                   "--emulator -- AGENT, or capsem demo, needs no key)\n")  # fmt: skip
    assert run("list-sessions", "--json") == "[]\n"


# --- query-session ------------------------------------------------------------------------------


def test_query_session_formats_params_and_gz(home):
    out = run("query-session", "SELECT provider, COUNT(*) AS n FROM model_calls WHERE provider = ? GROUP BY provider",
              "-p", "anthropic", "--format", "json")  # fmt: skip
    assert json.loads(out) == [{"provider": "anthropic", "n": 2}]
    csv_out = run("query-session", "SELECT tool_name FROM tool_calls ORDER BY id", "--format", "csv")
    assert csv_out.splitlines() == ["tool_name", "get_weather", "get_weather"]
    table = run("query-session", "SELECT model, randomblob(7) AS b, NULL AS nul FROM model_calls LIMIT 1")
    assert f"Session: {recorded_id(home)}" in table and "<blob 7 bytes>" in table and "NULL" in table
    assert json.loads(run("query-session", "VALUES (1, 1)", "--format", "json")) == [
        {"column1": 1, "column2": 1}
    ]
    assert json.loads(run("query-session", "SELECT 1 AS a, 2 AS a", "--format", "json")) == [
        {"a": 1, "a_2": 2}
    ]
    out = run("query-session", "SELECT id FROM net_events ORDER BY id", "--max-rows", "2", "--format", "csv")
    assert out.splitlines()[:3] == ["id", "1", "2"] and "stopped after 2 rows" in out
    sid = gzip_session(home)
    rows = json.loads(run("query-session", "SELECT COUNT(*) AS n FROM net_events", sid, "--format", "json"))
    assert rows == [{"n": 4}]


@pytest.mark.parametrize("sql", [
    "DELETE FROM model_calls", "INSERT INTO fs_events (timestamp, action, path) VALUES ('t', 'created', 'x')",
    "SELECT 1; DROP TABLE model_calls", "select 1 ; delete from model_calls", "ATTACH DATABASE 'x.db' AS x",
    "PRAGMA journal_mode=DELETE", "PRAGMA query_only = 0", "WITH x AS (SELECT 1) DELETE FROM model_calls",
    "UPDATE model_calls SET model = 'x'", "VACUUM", "  /* sneaky */ DROP TABLE model_calls",
])  # fmt: skip
def test_query_session_is_read_only(home, sql):
    before = session_db(home).read_bytes()
    out = run("query-session", sql, code=1)
    assert "only SELECT" in out or "one statement" in out or "readonly" in out, out
    assert session_db(home).read_bytes() == before
    assert sqlite3.connect(session_db(home)).execute("SELECT COUNT(*) FROM model_calls").fetchone()[0] == 4


def test_query_session_errors_are_clear(home):
    assert "no such table: nope" in run("query-session", "SELECT * FROM nope", code=1)
    assert "bindings" in run("query-session", "SELECT ? + ?", "-p", "1", code=1)
    assert "unclosed quote" in run("query-session", "SELECT 'abc", code=1)
    out = run("query-session", "SELECT 1", "20990101-000000-dead", code=1)
    assert "20990101-000000-dead" in out and "sessions" in out
    slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    assert "stopped after 0.2 s" in run("query-session", slow, "--timeout", "0.2", code=1)


# A child process runs one query-session and reports how much its peak RSS (VmHWM) grew.
_PEAK = """
import json, sys
from click.testing import CliRunner
from assembler.cli import cli

def hwm():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))

CliRunner().invoke(cli, ["query-session", "SELECT 1"])  # imports and first-use allocations
base = hwm()
result = CliRunner().invoke(cli, sys.argv[1:])
print(json.dumps({"code": result.exit_code, "output": result.output, "growth": hwm() - base}))
"""
TEN = "(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10) SELECT x FROM c)"


def peak_growth(home, *args: str) -> dict:
    env = {**os.environ, "CAPSEM_HOME": str(home), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _PEAK, *args], env=env, capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    return json.loads(done.stdout)


# (query, --timeout, error, bound on peak RSS growth in MiB): a value over 64 MiB, SQLite's heap
# over 256 MiB (ten 60 MB values in one row), rows kept over 256 MiB (60 MB of text each)
@pytest.mark.parametrize("sql,timeout,message,bound", [
    ("SELECT length(randomblob(900000000))", "0.5", "would exceed 64 MiB", 64),  # was 5 s and 911 MB
    (f"SELECT zeroblob(200000000) FROM {TEN}", "0.5", "would exceed 64 MiB", 64),  # was 2.2 GB
    ("SELECT " + ", ".join(["randomblob(60000000)"] * 10), "0.5", "needs more than 256 MiB of memory", 400),
    (f"SELECT hex(zeroblob(30000000)) FROM {TEN}", "60", "result exceeds 256 MiB (after 5 rows)", 600),
])  # fmt: skip
def test_query_session_bounds_one_statements_memory(home, sql, timeout, message, bound):
    report = peak_growth(home, "query-session", sql, "--timeout", timeout)
    assert report["code"] == 1 and message in report["output"], report
    assert report["growth"] < bound * 1024 * 1024, report


def test_query_session_heap_limit_is_restored(home):
    api = _heap_api()
    before = api[0](-1) if api else None
    with pytest.raises(QueryError, match="needs more than"):
        run_query(recorded_id(home), "SELECT " + ", ".join(["randomblob(60000000)"] * 10))
    assert run_query(recorded_id(home), "SELECT length(randomblob(1000))").rows == [(1000,)]
    if api:
        assert api[0](-1) == before


def test_query_session_without_sessions(capsem_home):
    assert "no session with a database" in run("query-session", "SELECT 1", code=1)


# --- inspect-session ----------------------------------------------------------------------------


def test_inspect_clean_bill(home):
    out = run("inspect-session", "--strict", "-n", "2")
    assert "no problems found" in out and "0 errors, 0 warnings, 0 info" in out
    assert "get_weather" in out and "Last 2 rows of model_calls" in out and "gpt-4.1" in out
    data = json.loads(run("inspect-session", "--json"))
    assert data["findings"] == [] and data["status"] == "stopped"
    assert data["counts"] == {"net_events": 4, "model_calls": 4, "tool_calls": 2, "tool_responses": 2,
                              "mcp_calls": 0, "fs_events": 0}  # fmt: skip
    assert data["tools"] == [
        {"tool_name": "get_weather", "origin": "native", "calls": 2, "results": 2, "errors": 0, "not_run": 0}
    ]


def test_inspect_vacuumed_session(home):
    sid = gzip_session(home)
    out = run("inspect-session", sid, "--strict")
    assert "no problems found" in out and "session.db.gz" in out


ERRORS = {
    "missing table": ("DROP TABLE fs_events", "table fs_events is missing"),
    "missing seed column": ("ALTER TABLE fs_events DROP COLUMN size", "fs_events lacks seed columns size"),
    "dangling reference": (
        "UPDATE tool_calls SET model_call_id = 999 WHERE id = 1",
        "1 tool_calls rows point at missing model_calls",
    ),
    "lost model call": ("DELETE FROM model_calls WHERE id = 3", "model-call flows have no model_calls row"),
    "bad usage json": ("UPDATE model_calls SET usage_details = 'nope' WHERE id = 2", "not JSON objects"),
    "usage not numbers": (
        'UPDATE model_calls SET usage_details = \'{"cache_read": "x"}\' WHERE id = 2',
        "not JSON objects",
    ),
    "http error": (
        "UPDATE model_calls SET status_code = 529, error_type = 'overloaded_error', "
        "error_message = 'Overloaded' WHERE id = 2",
        "1 model call failed: #2 anthropic/claude-sonnet-4-5 HTTP 529: overloaded_error: Overloaded",
    ),
    "failed request": (
        "INSERT INTO net_events (timestamp, domain, port, decision, method, path, error) VALUES "
        "('2026-01-01T00:00:00Z', 'api.anthropic.invalid', 443, 'error', 'CONNECT', '', "
        "'DNS lookup failed for api.anthropic.invalid: [Errno -2] Name or service not known')",
        "1 request failed: CONNECT api.anthropic.invalid:443: DNS lookup failed",
    ),
    "rollup mismatch": (
        "INSERT INTO fs_events (timestamp, action, path) VALUES ('t', 'created', 'x')",
        "total_file_events 0 != 1",
    ),
}
WARNINGS = {
    "orphan tool call": (
        "DELETE FROM tool_responses WHERE id = 1",
        "1/2 tool calls never got a result (get_weather)",
    ),
    "orphan tool response": ("UPDATE tool_responses SET call_id = 'nope' WHERE id = 1", "no model call made"),
    "duplicate call id": (
        "INSERT INTO tool_calls (model_call_id, call_index, call_id, tool_name) "
        "SELECT model_call_id, 9, call_id, tool_name FROM tool_calls WHERE id = 1",
        "more than one",
    ),
    "null model": ("UPDATE model_calls SET model = NULL WHERE id = 2", "1 model call without a model"),
    "null tokens": (
        "UPDATE model_calls SET input_tokens = NULL, output_tokens = NULL WHERE id = 2",
        "successful model call without token counts",
    ),
    "unpriced": ("UPDATE model_calls SET estimated_cost_usd = NULL WHERE id = 2", "no known price"),
    "cache above input": (
        "UPDATE model_calls SET usage_details = '{\"cache_read\": 99999}' WHERE id = 2",
        "do not add up",
    ),
    "reasoning above output": (
        "UPDATE model_calls SET usage_details = '{\"reasoning\": 99999}' WHERE id = 4",
        "do not add up",
    ),
    "truncated": ("UPDATE model_calls SET complete = 0 WHERE id = 2", "ended before their terminal event"),
    "parse errors": ("UPDATE model_calls SET parse_errors = 3 WHERE id = 2", "could not parse"),
    "decode failure": (
        "UPDATE net_events SET decode_error = 'gzip: bad' WHERE id = 1",
        "could not be decoded",
    ),
    "negative": ("UPDATE model_calls SET duration_ms = -5 WHERE id = 1", "negative"),
}
INFOS = {
    "tool error": ("UPDATE tool_responses SET is_error = 1 WHERE id = 1",
                   "1 tool result marked as errors: tool get_weather"),
    "estimated usage": ("UPDATE model_calls SET usage_details = '{\"estimated\": [\"output_tokens\"]}' WHERE id = 2",
                        "tokenizer-estimated"),
    "last call pending": ("INSERT INTO tool_calls (model_call_id, call_index, call_id, tool_name) "
                          "VALUES (4, 0, 'call_last', 'get_weather')", "the session ended there"),
}  # fmt: skip


@pytest.mark.parametrize("name", [*ERRORS, *WARNINGS, *INFOS])
def test_inspect_finds_each_defect(home, name):
    severity = "error" if name in ERRORS else "warning" if name in WARNINGS else "info"
    sql, expected = {**ERRORS, **WARNINGS, **INFOS}[name]
    execute(session_db(home), sql)
    if name == "last call pending":  # a legitimate session: main.db agrees with it
        with closing(open_main()) as main:
            rollup(main, recorded_id(home))
    out = run("inspect-session", "--strict", code=0 if severity == "info" else 1)
    assert expected in out, out
    findings = json.loads(run("inspect-session", "--json"))["findings"]
    assert any(f["severity"] == severity and expected in f["message"] for f in findings), findings
    assert run("inspect-session", code=0)  # without --strict a finding never fails the command


def test_inspect_rollup_totals_broken_in_main_db(home):
    sid = recorded_id(home)
    execute(home / "main.db", f"UPDATE sessions SET total_input_tokens = 1 WHERE id = '{sid}'",
            f"UPDATE ai_usage SET estimated_cost = 9 WHERE session_id = '{sid}' AND provider = 'openai'")  # fmt: skip
    out = run("inspect-session", "--strict", code=1)
    (actual,) = json.loads(
        run("query-session", "SELECT SUM(input_tokens) AS n FROM model_calls", "--format", "json")
    )
    assert (
        f"total_input_tokens 1 != {actual['n']}" in out
        and "ai_usage differs from session.db for openai/gpt-4.1" in out
    )


def test_inspect_missing_main_db_row(home):
    execute(home / "main.db", "DELETE FROM sessions")
    assert "no row in main.db" in run("inspect-session", recorded_id(home), "--strict", code=1)


def test_inspect_leftover_wal(home):
    leave_wal(session_db(home), "CREATE TABLE leftover (x)")  # no row changes: the ledger holds
    out = run("inspect-session", "--strict", code=1)
    assert "session.db-wal is left" in out and "not shut down cleanly" in out
    execute(home / "main.db", "UPDATE sessions SET status = 'crashed'")
    assert "the session crashed" in run("inspect-session", "--strict")


def test_inspect_running_session_is_not_judged_on_rollup(home):
    clone_session(home, days_ago(-0.001), status="running", suffix="beef")
    out = run("inspect-session", "--strict")  # the newest session: the running one
    assert "still running" in out and "20" in out


def test_inspect_truncated_file(home):
    db = session_db(home)
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    out = run("inspect-session", "--strict", code=1)
    assert "integrity: the database file is damaged" in out and "the tables cannot be read" in out


def test_inspect_corrupt_page(home):
    db = session_db(home)
    data = bytearray(db.read_bytes())
    data[4096 * 3 : 4096 * 3 + 64] = b"\xff" * 64  # damage a b-tree page
    db.write_bytes(bytes(data))
    out = run("inspect-session", "--strict", code=1)
    assert "error   integrity:" in out


def test_inspect_damaged_gz_is_a_clear_error(home):
    sid = gzip_session(home)
    gz = home / "sessions" / sid / "session.db.gz"
    gz.write_bytes(gz.read_bytes()[:100])
    out = run("inspect-session", sid, code=1)
    assert "cannot decompress" in out and str(gz) in out


def test_checks_are_pure_functions(home):
    """The checks run on any connection and return findings; no output, no exit."""
    execute(session_db(home), "DELETE FROM tool_responses WHERE id = 1")
    with open_session(recorded_id(home)) as conn:
        assert checks.check_integrity(conn) == []
        assert checks.check_schema(conn) == []
        (finding,) = checks.check_tool_lifecycle(conn)
        assert finding.severity == "warning"
        assert checks.check_rollup(conn, None) == [
            checks.Finding("warning", "rollup", "session has no row in main.db")
        ]
        assert checks.check_rollup(conn, {"status": "running"})[0].severity == "info"
        assert checks.check_rollup(conn, {"status": "stopped", "total_requests": 5})[0].severity == "error"


@pytest.mark.parametrize("command", ["list-sessions", "query-session", "inspect-session", "demo", "cost-report",
                                     "update-prices", "vacuum", "run"])  # fmt: skip
def test_every_command_has_help_with_examples(command):
    out = run(command, "--help")
    assert "Example" in out and f"capsem {command}" in out
