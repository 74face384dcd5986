"""list-sessions, query-session, inspect-session on a session recorded through real mitmdump."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3

import pytest
from click.testing import CliRunner

from assembler.cli import cli
from tests.cli.conftest import run, session_db


def test_list_sessions(home):
    out = run("list-sessions")
    sid = session_db(home).parent.name
    assert f"{sid}*" in out and "stopped" in out and "* = session.db on disk" in out
    (row,) = json.loads(run("list-sessions", "--json", "--with-model", "--with-tools"))
    assert row["id"] == sid and row["total_tool_calls"] == 2 and row["has_db"]
    assert "No sessions found" in run("list-sessions", "--with-mcp")
    assert "No sessions found" in run("list-sessions", "--min-cost", "1000")


def test_list_sessions_without_main_db(capsem_home):
    assert "no main.db" in run("list-sessions", code=1)


def test_query_session_formats_params_and_gz(home):
    out = run("query-session", "SELECT provider, COUNT(*) AS n FROM model_calls WHERE provider = ? GROUP BY provider",
              "-p", "anthropic", "--format", "json")  # fmt: skip
    assert json.loads(out) == [{"provider": "anthropic", "n": 2}]
    csv_out = run("query-session", "SELECT tool_name FROM tool_calls ORDER BY id", "--format", "csv")
    assert csv_out.splitlines() == ["tool_name", "get_weather", "get_weather"]
    db = session_db(home)
    with open(db, "rb") as src, gzip.open(db.with_name("session.db.gz"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    db.unlink()
    assert json.loads(
        run("query-session", "SELECT COUNT(*) AS n FROM net_events", db.parent.name, "--format", "json")
    )


@pytest.mark.parametrize("sql", ["DELETE FROM model_calls", "SELECT 1; DROP TABLE model_calls",
                                 "ATTACH DATABASE 'x.db' AS x", "PRAGMA journal_mode=DELETE",
                                 "WITH x AS (SELECT 1) DELETE FROM model_calls"])  # fmt: skip
def test_query_session_is_read_only(home, sql):
    out = run("query-session", sql, code=1)
    assert "allowed" in out or "failed" in out
    assert sqlite3.connect(session_db(home)).execute("SELECT COUNT(*) FROM model_calls").fetchone()[0] == 4


def test_inspect_clean_bill(home):
    out = run("inspect-session", "--strict")
    assert "no problems found" in out and "get_weather" in out
    findings = json.loads(run("inspect-session", "--json"))["findings"]
    assert findings == []


BREAKAGES = {
    "orphan tool call": ("DELETE FROM tool_responses WHERE id = 1", "never got a result"),
    "orphan tool response": ("UPDATE tool_responses SET call_id = 'nope' WHERE id = 1", "no model call made"),
    "dangling reference": ("UPDATE tool_calls SET model_call_id = 999 WHERE id = 1", "missing model_calls"),
    "duplicate call id": ("INSERT INTO tool_calls (model_call_id, call_index, call_id, tool_name) "
                          "SELECT model_call_id, 9, call_id, tool_name FROM tool_calls WHERE id = 1", "more than one"),
    "null model": ("UPDATE model_calls SET model = NULL WHERE id = 2", "without a model"),
    "null tokens": ("UPDATE model_calls SET input_tokens = NULL, output_tokens = NULL WHERE id = 2", "without token"),
    "unpriced": ("UPDATE model_calls SET estimated_cost_usd = NULL WHERE id = 2", "no known price"),
    "bad usage json": ("UPDATE model_calls SET usage_details = 'nope' WHERE id = 2", "not JSON"),
    "usage does not add up": ("UPDATE model_calls SET usage_details = '{\"cache_read\": 99999}' WHERE id = 2",
                              "do not add up"),
    "truncated": ("UPDATE model_calls SET complete = 0 WHERE id = 2", "terminal event"),
    "lost model call": ("DELETE FROM model_calls WHERE id = 3", "no model_calls row"),
    "decode failure": ("UPDATE net_events SET decode_error = 'gzip: bad' WHERE id = 1", "could not be decoded"),
    "rollup mismatch": ("INSERT INTO fs_events (timestamp, action, path) VALUES ('t', 'created', 'x')",
                        "totals differ"),
    "missing table": ("DROP TABLE fs_events", "fs_events is missing"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(BREAKAGES))
def test_inspect_finds_each_defect(home, name):
    sql, expected = BREAKAGES[name]
    conn = sqlite3.connect(session_db(home))
    conn.execute(sql)
    conn.commit()
    conn.close()
    out = run("inspect-session", "--strict", code=1)
    assert expected in out, out


def test_inspect_corrupt_file(home):
    db = session_db(home)
    data = bytearray(db.read_bytes())
    data[4096 : 4096 + 12] = b"\xff" * 12  # damage the header of a b-tree page
    db.write_bytes(bytes(data))
    out = CliRunner().invoke(cli, ["inspect-session", "--strict"]).output
    assert "integrity" in out or "could not run" in out or "malformed" in out


@pytest.mark.parametrize("command", ["list-sessions", "query-session", "inspect-session", "demo"])
def test_every_command_has_help_with_examples(command):
    out = run(command, "--help")
    assert "Example" in out and "capsem " in out
