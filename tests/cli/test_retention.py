"""`capsem vacuum`: compress finished sessions, cull by age, count and disk; readers keep working."""

from __future__ import annotations

import gzip
import json
import sys
import time
from datetime import UTC, datetime

import pytest

from assembler.retention import RetentionPolicy, plan_age, plan_count, plan_disk
from capsem.settings import SettingsError, parse
from tests.cli.conftest import clone_session, days_ago, leave_wal, main_rows, recorded_id, run


def files(home, session_id) -> set[str]:
    folder = home / "sessions" / session_id
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def configure(home, **retention) -> None:
    lines = "\n".join(f"  {k}: {'null' if v is None else v}" for k, v in retention.items())
    (home / "config.yaml").write_text(f"retention:\n{lines}\n")


def test_vacuum_compresses_culls_by_age_and_keeps_readers_working(home):
    sid = recorded_id(home)
    old = clone_session(home, days_ago(45), suffix="0001")
    crashed = clone_session(home, days_ago(2), status="crashed", suffix="0002")
    running = clone_session(home, days_ago(-0.01), status="running", suffix="0003")
    before = main_rows(home)

    out = run("vacuum", "--dry-run")
    lines = {
        s: next((line for line in out.splitlines() if s in line), "") for s in (sid, old, crashed, running)
    }
    assert "would cull" in lines[old] and "older than 30 days" in lines[old]
    assert "would vacuum" in lines[sid] and "would vacuum" in lines[crashed] and lines[running] == ""
    assert main_rows(home) == before and files(home, sid) >= {"session.db"} and files(home, old)

    out = run("vacuum")
    assert "vacuumed 2, culled 1" in out and "1 running session left alone" in out
    rows = main_rows(home)
    assert rows[old]["status"] == "culled" and not (home / "sessions" / old).exists()
    for s in (sid, crashed):
        assert rows[s]["status"] == "vacuumed" and rows[s]["vacuumed_at"]
        assert files(home, s) == {"session.db.gz"}
        assert (
            rows[s]["compressed_size_bytes"] == (home / "sessions" / s / "session.db.gz").stat().st_size > 0
        )
        assert rows[s]["total_model_calls"] == 4  # the rollup survives
    assert rows[running]["status"] == "running" and files(home, running) == {"session.db"}

    # every reader opens the gzipped sessions transparently
    listed = run("list-sessions", "--all")
    assert f"{sid}*" in listed and f"{crashed}*" in listed and f"{old} " in listed and "culled" in listed
    default = run("list-sessions")  # vacuumed sessions are queryable: listed; culled ones only with --all
    assert f"{sid}*" in default and f"{crashed}*" in default and old not in default
    assert "no problems found" in run("inspect-session", sid, "--strict")
    assert json.loads(
        run("query-session", "SELECT COUNT(*) AS n FROM model_calls", crashed, "--format", "json")
    ) == [{"n": 4}]
    report = json.loads(run("cost-report", "--by", "session", "--json"))
    assert {r["key"] for r in report["rows"]} == {sid, old, crashed, running}  # culled history still counts
    # the archive is one self-contained database (journal mode DELETE, no WAL needed)
    raw = gzip.decompress((home / "sessions" / sid / "session.db.gz").read_bytes())
    assert raw[:16] == b"SQLite format 3\x00" and raw[18:20] == b"\x01\x01"

    assert "nothing to do" in run("vacuum")  # idempotent


def test_vacuum_checkpoints_a_crashed_sessions_wal(home):
    crashed = clone_session(home, days_ago(1), status="crashed", suffix="00aa")
    db = home / "sessions" / crashed / "session.db"
    leave_wal(db, "INSERT INTO fs_events (timestamp, action, path) VALUES ('t', 'created', 'late.txt')")
    run("vacuum")
    assert files(home, crashed) == {"session.db.gz"}
    out = json.loads(run("query-session", "SELECT path FROM fs_events", crashed, "--format", "json"))
    assert out == [{"path": "late.txt"}]


def test_vacuum_rolls_up_a_session_that_never_was(home):
    crashed = clone_session(home, days_ago(1), status="crashed", rolled_up=False, suffix="00bb")
    assert main_rows(home)[crashed]["total_model_calls"] == 0
    run("vacuum")
    row = main_rows(home)[crashed]
    assert row["status"] == "vacuumed" and row["total_model_calls"] == 4 and row["rolled_up_at"]
    assert "no problems found" in run("inspect-session", crashed, "--strict")


def test_count_cap_culls_empty_sessions_first_and_protects_content(home):
    configure(home, max_sessions=3, min_content_keep=2, retention_days=0, max_disk_gb=0)
    sid = recorded_id(home)
    content_old = clone_session(home, days_ago(5), suffix="0c01")
    content_mid = clone_session(home, days_ago(4), suffix="0c02")
    empty_new = clone_session(home, days_ago(1), empty=True, suffix="0e01")
    empty_old = clone_session(home, days_ago(6), empty=True, suffix="0e02")
    running = clone_session(home, days_ago(-0.01), status="running", suffix="0r01")
    run("vacuum")
    status = {k: v["status"] for k, v in main_rows(home).items()}
    # 6 sessions, cap 3: both empty ones, then the oldest with content; running never
    assert {k for k, v in status.items() if v == "culled"} == {empty_old, empty_new, content_old}
    assert status[running] == "running" and status[sid] == status[content_mid] == "vacuumed"
    assert not (home / "sessions" / content_old).exists() and (home / "sessions" / content_mid).exists()


def test_disk_cap_culls_oldest_until_it_fits_and_never_running(home):
    sid = recorded_id(home)
    older = clone_session(home, days_ago(3), suffix="0d01")
    old = clone_session(home, days_ago(2), suffix="0d02")
    running = clone_session(home, days_ago(-0.01), status="running", suffix="0d03")
    configure(
        home, max_disk_gb="0.000000001", retention_days=None, max_sessions=None
    )  # ~1 byte: nothing fits
    out = run("vacuum")
    rows = main_rows(home)
    assert {rows[s]["status"] for s in (older, old)} == {"culled"} and "above 1e-09 GB" in out
    assert rows[sid]["status"] == "vacuumed"  # less than a day old: never culled
    assert rows[running]["status"] == "running" and files(home, running) == {"session.db"}


def test_bad_retention_settings_are_a_clear_error(home):
    configure(home, max_sessions=-1)
    assert run("vacuum", code=1) == (f"Error: {home / 'config.yaml'}: retention.max_sessions must be a whole number "
                                     "of sessions (0 or null: no limit), got -1\n")  # fmt: skip
    configure(home, retention_days="soon")
    assert "retention.retention_days must be a number of days >= 0 (0 or null: no limit), got 'soon'" in run(
        "vacuum", code=1)  # fmt: skip


def test_vacuum_without_main_db(capsem_home):
    assert "no main.db" in run("vacuum", code=1)


def test_vacuum_reports_a_damaged_session_and_goes_on(home):
    bad = clone_session(home, days_ago(1), suffix="0bad")
    db = home / "sessions" / bad / "session.db"
    db.write_bytes(db.read_bytes()[:5000])
    out = run("vacuum", code=1)
    assert f"{bad}: cannot vacuum" in out and str(db) in out
    rows = main_rows(home)
    assert rows[bad]["status"] == "stopped" and files(home, bad) == {"session.db"}  # left as it was
    assert rows[recorded_id(home)]["status"] == "vacuumed"


# --- the planning rules, as pure functions -------------------------------------------------------


def row(session_id: str, day: int, status: str = "stopped", content: bool = True) -> dict:
    return {"id": session_id, "created_at": f"2026-01-{day:02d}T10:00:00Z", "status": status,
            "total_requests": int(content), "total_input_tokens": 0, "total_output_tokens": 0,
            "total_tool_calls": 0, "total_mcp_calls": 0, "total_file_events": 0}  # fmt: skip


def test_plans():
    rows = [row("a", 1), row("b", 2, content=False), row("c", 3, "vacuumed"), row("d", 4, "running"),
            row("e", 5, "terminated"), row("f", 6), row("g", 7, content=False)]  # fmt: skip
    now = datetime(2026, 1, 8, tzinfo=UTC)
    assert [i for i, _ in plan_age(rows, RetentionPolicy(retention_days=4.5), now)] == ["a", "b", "c"]
    assert plan_age(rows, RetentionPolicy(retention_days=None), now) == []
    policy = RetentionPolicy(max_sessions=3, min_content_keep=2)
    assert [i for i, _ in plan_count(rows, policy)] == [
        "b",
        "g",
        "a",
    ]  # 6 alive: empties, then oldest content
    assert [i for i, _ in plan_count(rows, RetentionPolicy(max_sessions=1, min_content_keep=2))] == [
        "b",
        "g",
        "a",
    ]
    assert plan_count(rows, RetentionPolicy(max_sessions=0)) == []
    sizes = {"a": 400, "b": 100, "c": 300, "d": 5000, "f": 200, "g": 100}
    cap = 5800 / 1024**3
    assert [i for i, _ in plan_disk(rows, sizes, RetentionPolicy(max_disk_gb=cap))] == ["b", "g", "a"]


def test_policy_from_settings():
    assert RetentionPolicy.from_settings() == RetentionPolicy.from_settings(parse({})) == RetentionPolicy()
    assert RetentionPolicy.from_settings(
        parse({"retention": {"max_sessions": 0, "max_disk_gb": 0.5}})
    ) == RetentionPolicy(max_sessions=None, max_disk_gb=0.5)
    with pytest.raises(SettingsError, match=r"retention\.max_sessions must be a whole number"):
        parse({"retention": {"max_sessions": 2.5}})


def test_vacuum_help_names_the_settings():
    out = run("vacuum", "--help")
    assert "retention_days" in out and "max_disk_gb" in out and "capsem vacuum --dry-run" in out


def test_gz_and_plain_reader_agree(home):
    before = run("query-session", "SELECT id, model, input_tokens FROM model_calls", "--format", "json")
    run("vacuum")
    after = run(
        "query-session",
        "SELECT id, model, input_tokens FROM model_calls",
        recorded_id(home),
        "--format",
        "json",
    )
    assert before == after and files(home, recorded_id(home)) == {"session.db.gz"}


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def test_capsem_run_applies_retention_to_old_sessions_only(home):
    """As Capsem does at start-up, but beside the agent (never inside the proxy): culls by age,
    compresses sessions finished over a day ago, and leaves recent sessions (and the new one) as
    plain files."""
    from assembler.run import run_agent

    recent = recorded_id(home)
    yesterday = clone_session(home, days_ago(2), suffix="0001")
    ancient = clone_session(home, days_ago(45), suffix="0002")
    result = run_agent([sys.executable, "-c", "pass"])
    rows = main_rows(home)
    assert rows[yesterday]["status"] == "vacuumed" and rows[ancient]["status"] == "culled"
    assert files(home, yesterday) == {"session.db.gz"} and not (home / "sessions" / ancient).exists()
    assert rows[recent]["status"] == "stopped" and "session.db" in files(home, recent)
    assert rows[result.session_id]["status"] == "stopped" and "session.db" in files(home, result.session_id)
    from assembler.retention import summary_line

    assert summary_line(result.retention) == (
        f"retention: culled 1 session (1 older than 30 days: {ancient}), compressed 1 finished over a day ago; "
        "capsem list-sessions --all lists them, capsem keep ID spares a session"
    )


def test_capsem_run_says_what_retention_culled_even_when_quiet(home):
    """Issue 25, point 1: as seen, one `capsem run` deleted 14 session databases without a word."""
    ancient = clone_session(home, days_ago(45), suffix="0002")
    out = run("run", "-q", "--", sys.executable, "-c", "pass")
    assert f"retention: culled 1 session (1 older than 30 days: {ancient})" in " ".join(out.split())


def test_mitmdump_alone_never_deletes_or_compresses(home, mitmdump):
    old = clone_session(home, days_ago(45), suffix="0001")
    mitmdump().stop()
    assert main_rows(home)[old]["status"] == "stopped" and "session.db" in files(home, old)


def test_start_up_retention_can_be_switched_off(home):
    from assembler.run import run_agent

    configure(home, auto="false", retention_days=1)
    old = clone_session(home, days_ago(3), suffix="0001")
    run_agent([sys.executable, "-c", "pass"])
    assert main_rows(home)[old]["status"] == "stopped" and "session.db.gz" not in files(home, old)


# --- issue 25, point 1: retention says what it culled, marks it culled, spares young and kept ones ---


def test_retention_says_what_it_culled_and_spares_young_and_kept_sessions(home):
    """As seen: `max_sessions: 5` and one run deleted 14 session databases without a word, and they
    read `terminated`. Now each cull has a status `culled` and a reason, the run's summary line and
    `vacuum` say what went and why, and sessions less than a day old or marked `keep` stay."""
    from assembler.retention import auto_retention, summary_line

    configure(home, max_sessions=5, min_content_keep=0, retention_days=30, max_disk_gb=0)
    recent = recorded_id(home)  # today
    young = [clone_session(home, days_ago(0.5), suffix=f"0y{i:02d}") for i in range(3)]
    old = [clone_session(home, days_ago(2 + i), suffix=f"0o{i:02d}") for i in range(14)]
    ancient = clone_session(home, days_ago(40), suffix="0a00")
    assert "kept (retention never culls it)" in run("keep", old[-1][:-2])  # a unique start of the id
    assert "stopped kept" in next(x for x in run("list-sessions", "-n", "0").splitlines() if old[-1] in x)
    assert "no session 'nope'" in run("keep", "nope", code=1)

    dry = run("vacuum", "--dry-run")
    assert "would cull" in dry and "more than 5 sessions (max_sessions)" in dry
    assert (
        "older than 30 days (retention_days)" in dry
        and "4 less than a day old" in dry
        and "1 marked to keep" in dry
    )

    report = auto_retention()
    assert report is not None
    rows = main_rows(home)
    culled = {k for k, v in rows.items() if v["status"] == "culled"}
    assert culled == set(old[:-1]) | {ancient}  # 19 sessions, cap 5: all culls allowed, no more
    assert (
        rows[ancient]["culled_reason"] == "older than 30 days (retention_days)" and rows[ancient]["culled_at"]
    )
    assert rows[old[0]]["culled_reason"] == "more than 5 sessions (max_sessions)"
    for s in [recent, *young, old[-1]]:
        assert rows[s]["status"] != "culled" and (home / "sessions" / s).is_dir()
    line = summary_line(report)
    assert line is not None and line.startswith(
        "retention: culled 14 sessions (1 older than 30 days, 13 more than 5"
    )
    assert "capsem keep ID" in line
    listed = run("list-sessions", "--all", "-n", "0")
    assert "culled" in next(x for x in listed.splitlines() if ancient in x)
    assert "culled by retention: older than 30 days" in run("inspect-session", ancient, code=1)
    assert "retention may cull it again" in run("keep", "--undo", old[-1])
    assert "already culled" in run("keep", ancient, code=1)
    from starlette.testclient import TestClient

    from assembler.view.app import create_app

    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        listing = client.get("/?all=1&limit=0").text
    assert 'title="culled: older than 30 days (retention_days)"' in listing


def test_dry_run_predicts_the_compressed_size(home):
    """As seen: `vacuum --dry-run` predicted `5.1 MB -> ~5.1 MB` where the result was 364 KB."""
    import re

    clone_session(home, days_ago(3), suffix="0001")
    dry = run("vacuum", "--dry-run").splitlines()[-1]
    real = run("vacuum").splitlines()[-1]
    before, guess = re.search(r"sessions/ (\S+ \S+) -> ~(\S+ \S+)", dry).groups()
    after = re.search(r"-> (\S+ \S+)", real).group(1)

    def kb(text: str) -> float:
        n, unit = text.split()
        return float(n) * {"B": 1 / 1024, "KB": 1, "MB": 1024, "GB": 1024**2}[unit]

    assert kb(guess) < kb(before) / 2 and 0.5 < kb(guess) / kb(after) < 2
