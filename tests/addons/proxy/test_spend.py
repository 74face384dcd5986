"""The spend ledger: the recorder's side (this session's spend, reported and saved to main.db),
mitmdump's side (the view budgets read), the rollup, and the main.db migration."""

from __future__ import annotations

import json
import time

import pytest

from addons.budgets import today
from addons.proxy.spend import SETTLE_SECONDS, SpendView, ledger_rows
from addons.recorder.spend import SessionSpend, write_spend
from capsem.rollup import register_session, rollup
from capsem.settings import Budget
from capsem.store.rows import ModelCall
from capsem.store.schema import MAIN_MIGRATIONS, migrate, open_main_db, open_session_db
from tests.conftest import rows

NOW = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
DAY = NOW[:10]
FIRST = DAY[:8] + "01"
ON_DAY = 0.5 if FIRST == DAY else 0.0  # the month's first day's row counts in day budgets on the 1st


def call(n: int, cost: float | None, *, model: str = "claude-haiku-4-5", timestamp: str = NOW) -> ModelCall:
    return ModelCall(id=n, event_id=f"{n:012x}", timestamp=timestamp, provider="anthropic", method="POST",
                     path="/v1/messages", flow_id=f"f{n}", protocol="anthropic", host="api.anthropic.com",
                     model=model, estimated_cost_usd=cost)  # fmt: skip


def test_the_recorder_adds_up_reports_and_saves_this_sessions_spend(tmp_path):
    main_db = tmp_path / "main.db"
    open_main_db(main_db).close()
    spend = SessionSpend("s1")
    assert spend.report() is None  # nothing to say yet
    spend.add(call(1, 0.25))
    spend.add(call(2, 0.5))
    spend.add(call(3, None))  # unpriced: counted as a call, costs nothing
    spend.add(call(4, 1.0, model="claude-opus-4-1", timestamp="2026-01-31T23:59:59.000Z"))
    spend.counted("f1")
    spend.counted("ws#ws", 7)
    spend.counted("ws#ws", 9)
    report = json.loads(spend.report().removeprefix("spend "))
    assert report.pop("done") == [["f1", 0], ["ws#ws", 9]]
    assert report == {"totals": [
        [DAY, "anthropic", "claude-haiku-4-5", "api.anthropic.com", 0.75, 3],
        ["2026-01-31", "anthropic", "claude-opus-4-1", "api.anthropic.com", 1.0, 1],
    ]}  # fmt: skip
    assert spend.report() is None  # reported once
    spend.save(main_db)
    spend.add(call(5, 0.25))
    spend.save(main_db)  # replaces the session's rows: no increments to get wrong
    spend.close()
    saved = rows(main_db, "SELECT session_id, day, model, call_count, estimated_cost FROM spend ORDER BY day")
    assert saved == [
        {"session_id": "s1", "day": "2026-01-31", "model": "claude-opus-4-1", "call_count": 1, "estimated_cost": 1.0},
        {"session_id": "s1", "day": DAY, "model": "claude-haiku-4-5", "call_count": 4, "estimated_cost": 1.0},
    ]  # fmt: skip


def test_a_session_id_used_again_starts_from_what_its_session_db_holds(tmp_path):
    db = open_session_db(tmp_path / "session.db")
    db.execute("INSERT INTO model_calls (timestamp, provider, model, host, method, path, estimated_cost_usd) "
               "VALUES (?, 'openai', 'gpt-4.1', 'api.openai.com', 'POST', '/v1/responses', 2.5)", (NOW,))  # fmt: skip
    spend = SessionSpend("s1")
    spend.load(db)
    assert spend.rows() == [("s1", DAY, "openai", "gpt-4.1", "api.openai.com", 2.5)]


def test_a_failed_save_is_retried_at_the_next_commit(tmp_path, caplog):
    spend = SessionSpend("s1")
    spend.add(call(1, 0.5))
    missing = tmp_path / "main.db"  # not made yet: no spend table
    spend.save(missing)
    assert "updating the spend ledger" in caplog.text
    open_main_db(missing).close()
    spend.save(missing)
    spend.close()
    assert rows(missing, "SELECT estimated_cost FROM spend") == [{"estimated_cost": 0.5}]


@pytest.fixture
def main_db(tmp_path):
    path = tmp_path / "main.db"
    conn = open_main_db(path)
    write_spend(conn, "mine", [(DAY, "anthropic", "claude-haiku-4-5", "api.anthropic.com", 1, 100.0)])
    write_spend(conn, "other", [(DAY, "anthropic", "claude-opus-4-1", "api.anthropic.com", 2, 1.5),
                                 (FIRST, "openai", "gpt-4.1", "api.openai.com", 1, 0.5),
                                 ("2020-01-01", "openai", "gpt-4.1", "api.openai.com", 9, 99.0)])  # fmt: skip
    conn.close()
    return path


def test_the_view_counts_the_other_sessions_from_main_db_and_this_one_from_its_reports(main_db):
    budgets = [Budget("s", "session", 10.0), Budget("d", "day", 10.0), Budget("m", "month", 10.0),
               Budget("opus", "day", 10.0, model="claude-opus-*")]  # fmt: skip
    view = SpendView(budgets, "mine", main_db, interval=0.01)
    view.start()
    try:
        # main.db's rows of this session are not counted: the recorder's reports are newer
        assert [view.spent(b) for b in budgets] == [0.0, 1.5 + ON_DAY, 2.0, 1.5]
        view.on_report(
            json.dumps({"done": [], "totals": [[DAY, "anthropic", "claude-opus-4-1", "h", 0.25, 1]]})
        )
        assert [view.spent(b) for b in budgets] == [0.25, 1.75 + ON_DAY, 2.25, 1.75]
        conn = open_main_db(main_db)
        write_spend(
            conn, "third", [(DAY, "google", "gemini-2.5-pro", "generativelanguage.googleapis.com", 1, 3.0)]
        )
        conn.close()
        deadline = time.monotonic() + 10
        while view.spent(budgets[1]) != 4.75 + ON_DAY and time.monotonic() < deadline:  # background refresh
            time.sleep(0.01)
        assert view.spent(budgets[1]) == 4.75 + ON_DAY
    finally:
        view.stop()


def test_a_check_waits_for_the_cost_of_calls_that_just_ended(main_db, monkeypatch):
    view = SpendView([Budget("s", "session", 1.0)], "mine", main_db)
    assert view.settled()
    view.ended("f1")
    view.ended("f2")
    assert not view.settled()
    view.on_report(json.dumps({"done": [["f1", 0]], "totals": []}))
    assert not view.settled()
    view.on_report(json.dumps({"done": [["f2", 0]], "totals": []}))
    assert view.settled()
    # a WebSocket turn ended by the socket's 5th server message: counted once the recorder has
    # handled 5 of them (a report about earlier messages does not count)
    view.ended("ws#ws", 5)
    view.on_report(json.dumps({"done": [["ws#ws", 3]], "totals": []}))
    assert not view.settled()
    view.on_report(json.dumps({"done": [["ws#ws", 5]], "totals": []}))
    assert view.settled()
    assert view.confirmed()
    view.ended("lost")  # its cost never comes back (a stopped recorder): no use waiting past
    later = time.monotonic() + SETTLE_SECONDS + 0.1  # SETTLE_SECONDS, but never confirmed
    monkeypatch.setattr("addons.proxy.spend.time.monotonic", lambda: later)
    assert view.settled() and not view.confirmed()
    view.on_report(json.dumps({"done": [["lost", 0]], "totals": []}))  # the recorder answers again
    assert view.confirmed()


def test_the_spend_is_unconfirmed_from_a_recorder_death_to_the_restarted_ones_first_report(main_db):
    view = SpendView([Budget("s", "session", 1.0)], "mine", main_db)
    view.on_report(json.dumps({"done": [], "totals": [[DAY, "anthropic", "m", "h", 0.25, 1]]}))
    view.ended("handed-to-the-dead-one")
    view.recorder_down()
    assert not view.settled() and not view.confirmed()
    view.ended("after-the-death")  # its end goes to the restarted recorder, which reports it
    # the restarted recorder's first report: what session.db holds; the earlier flow is not waited for
    view.on_report(json.dumps({"done": [], "totals": [[DAY, "anthropic", "m", "h", 0.5, 2]]}))
    assert not view.confirmed()
    view.on_report(
        json.dumps({"done": [["after-the-death", 0]], "totals": [[DAY, "anthropic", "m", "h", 0.5, 2]]})
    )
    assert view.confirmed() and view.spent(view.budgets[0]) == 0.5


def test_ledger_rows_are_this_month_without_the_excluded_session(main_db):
    conn = open_main_db(main_db)
    found = ledger_rows(conn, since=DAY[:7] + "-01", exclude="mine")
    assert {r[0] for r in found} == {"other"} and all(r[1] >= DAY[:7] for r in found)


def test_the_rollup_writes_the_sessions_spend_rows(tmp_path, capsem_home):
    db = open_session_db(tmp_path / "session.db")
    for model, cost in (("gpt-4.1", 0.5), ("gpt-4.1", 0.25), ("gpt-unknown", None)):
        db.execute("INSERT INTO model_calls (timestamp, provider, model, host, method, path, estimated_cost_usd) "
                   "VALUES (?, 'openai', ?, 'api.openai.com', 'POST', '/v1/chat/completions', ?)",
                   (NOW, model, cost))  # fmt: skip
    db.close()
    main = open_main_db(tmp_path / "main.db")
    register_session(main, "s1", mode="mitmdump", command=None, created_at=NOW)
    write_spend(main, "s1", [(DAY, "openai", "stale", "h", 1, 9.0)])  # what a live recorder had saved
    rollup(main, "s1", tmp_path / "session.db")
    assert rows(
        tmp_path / "main.db", "SELECT model, call_count, estimated_cost FROM spend ORDER BY model"
    ) == [
        {"model": "gpt-4.1", "call_count": 2, "estimated_cost": 0.75},
        {"model": "gpt-unknown", "call_count": 1, "estimated_cost": 0.0},
    ]


def test_the_migration_fills_the_ledger_from_sessions_rolled_up_before_it(tmp_path):
    import sqlite3

    conn = sqlite3.connect(tmp_path / "main.db", isolation_level=None)
    migrate(conn, MAIN_MIGRATIONS[:2])
    conn.execute("INSERT INTO sessions (id, created_at) VALUES ('old', '2026-11-02T10:00:00.000Z')")
    conn.execute("INSERT INTO ai_usage VALUES ('old', 'anthropic', 'claude-opus-4-1', 3, 10, 20, 1.25, 900)")
    assert migrate(conn, MAIN_MIGRATIONS)[0] == "m003_spend"  # and the ones added after it
    assert conn.execute("SELECT * FROM spend").fetchall() == [
        ("old", "2026-11-02", "anthropic", "claude-opus-4-1", "", 3, 1.25)
    ]
    assert today() == DAY


def test_the_spend_ledger_is_insert_only(tmp_path, capsem_home):
    """Each save and the rollup add `spend_entries` rows for what changed; no row is changed or
    deleted, and `spend` shows each key's latest value (a key the rollup no longer finds is gone)."""
    db = open_session_db(tmp_path / "session.db")
    db.execute("INSERT INTO model_calls (timestamp, provider, model, host, method, path, estimated_cost_usd) "
               "VALUES (?, 'openai', 'gpt-4.1', 'api.openai.com', 'POST', '/v1/chat/completions', 0.5)", (NOW,))  # fmt: skip
    db.close()
    main = open_main_db(tmp_path / "main.db")
    register_session(main, "s1", mode="mitmdump", command=None, created_at=NOW)
    entries = "SELECT * FROM spend_entries ORDER BY id"
    write_spend(main, "s1", [(DAY, "openai", "gpt-4.1", "api.openai.com", 1, 0.25),
                             (DAY, "openai", "stale", "h", 1, 9.0)])  # fmt: skip
    first = main.execute(entries).fetchall()
    write_spend(main, "s1", [(DAY, "openai", "gpt-4.1", "api.openai.com", 1, 0.25),
                             (DAY, "openai", "stale", "h", 1, 9.0)])  # fmt: skip
    assert main.execute(entries).fetchall() == first  # nothing changed, nothing inserted
    rollup(main, "s1", tmp_path / "session.db")
    after = main.execute(entries).fetchall()
    assert after[: len(first)] == first and len(after) == len(first) + 2
    assert [tuple(r) for r in main.execute("SELECT model, call_count, estimated_cost FROM spend")] == [
        ("gpt-4.1", 1, 0.5)
    ]
