"""Bad input gets a clear answer: query typos, unknown tables, short and swapped session ids, a
damaged database for inspect-session and bundle create, and a bundled $CAPSEM_HOME."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from assembler.cli import cli
from tests.cli.conftest import clone_session, days_ago, recorded_id, run, session_db


def test_a_typo_gets_sqlites_own_message(home):
    assert 'query failed: near "SELEC": syntax error' in run(
        "query-session", "SELEC * FROM model_calls", code=1
    )
    assert "empty query" in run("query-session", "  ", code=1)
    assert "only SELECT" in run("query-session", "DELETE FROM model_calls", code=1)  # valid, refused


def test_no_such_table_lists_the_tables(home):
    out = run("query-session", "SELECT * FROM model_call", code=1)
    assert "no such table: model_call (tables: " in out and "model_calls" in out and "net_events" in out
    assert "_capsem_migrations" not in out


def test_schema_command(home, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = run("schema")
    assert "model_calls: id, timestamp, provider, model" in out and all(
        len(x) <= 80 for x in out.splitlines()
    )
    one = run("schema", "tool_calls")
    assert one.splitlines()[0] == "tool_calls:" and "  call_id" in one and "TEXT" in one
    assert "no such table: nope (tables: " in run("schema", "nope", code=1)
    assert "tool_calls:" in run("schema", "tool_calls", recorded_id(home)[:15])


def test_session_ids_by_unique_prefix_and_in_either_order(home):
    sid = recorded_id(home)
    sql = "SELECT COUNT(*) AS n FROM model_calls"
    assert json.loads(run("query-session", sql, sid[:13], "--format", "json")) == [{"n": 4}]
    assert json.loads(run("query-session", sid, sql, "--format", "json")) == [{"n": 4}]  # swapped
    other = clone_session(home, days_ago(1), suffix="0abc")
    out = run("query-session", sql, "2", code=1)
    assert "matches 2 sessions" in out and sid in out and other in out and "give more of the id" in out
    assert "no session.db" in run("query-session", sql, "19990101", code=1)


def test_rows_and_sessions_are_counted_in_words(home):
    result = CliRunner().invoke(cli, ["query-session", "SELECT 1"], catch_exceptions=False)
    assert "(1 row)" in result.output


def damage(home) -> None:
    db = session_db(home)
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])


def test_inspect_of_a_damaged_database_fails_without_strict(home):
    damage(home)
    out = run("inspect-session", code=1)
    assert "the database file is damaged" in out


def test_bundle_of_a_damaged_session_fails_and_writes_nothing(home, tmp_path):
    damage(home)
    target = tmp_path / "b.db"
    out = run("bundle", "create", "--capsem-session", recorded_id(home), "-o", str(target), code=1)
    assert "cannot be read" in out and "nothing written" in out and not target.exists()


def test_bundling_capsem_home_warns_once_and_not_about_capsems_own_files(home, tmp_path):
    sid = recorded_id(home)
    (home / "sessions" / sid / "mitmdump.log").write_text(
        "[10:00:00.000] HTTP(S) proxy listening at 127.0.0.1:1.\n"
    )
    (home / "mitmproxy").mkdir()
    (home / "mitmproxy" / "mitmproxy-ca.pem").write_text("-----BEGIN PRIVATE KEY-----\nx\n")
    (home / "retention.lock").write_text("")
    (home / "notes.bin").write_bytes(b"\x00\x01not data")
    result = CliRunner().invoke(cli, ["bundle", "create", str(home), "-o", str(tmp_path / "b.db")],
                                catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [x for x in result.output.splitlines() if "notes.bin" in x]
    assert len(lines) == 2 and lines[0].split()[:3] == ["unknown", "0", "records"]  # the source, then
    assert lines[1].startswith("warning: notes.bin: not recognised")  # its warning, once
    assert "mitmdump.log" not in result.output and "mitmproxy-ca" not in result.output
    assert "retention.lock" not in result.output and "1 session," in result.output


@pytest.mark.parametrize("width", [80, 200])
def test_query_and_inspect_read_well_at_both_widths(home, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    for args in (["inspect-session", "-n", "3"], ["query-session", "SELECT * FROM model_calls LIMIT 2"],
                 ["cost-report", "--by", "model"]):  # fmt: skip
        out = run(*args)
        assert all(len(line) <= width for line in out.splitlines()), (args, out)
        assert "…" not in out  # nothing cut with an ellipsis
