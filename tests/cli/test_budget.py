"""`capsem budget` over main.db's spend ledger, and what `inspect-session` says about budgets and
brokered credentials."""

from __future__ import annotations

import json

from addons.budgets import today
from addons.recorder.spend import write_spend
from assembler.inspect import Finding, check_budgets, check_credentials
from capsem.rollup import register_session
from capsem.store.schema import open_main_db, open_session_db
from tests.cli.conftest import run

CONFIG = """budgets:
  daily: {scope: day, limit_usd: 5}
  opus-month: {scope: month, limit_usd: 200, model: "claude-opus-*", warn_at: 0.5}
  one-run: {scope: session, limit_usd: 1, provider: anthropic}
"""


def ledger(home, session_id: str, created: str, rows: list[tuple]) -> None:
    main = open_main_db(home / "main.db")
    register_session(main, session_id, mode="run", command=None, created_at=created)
    write_spend(main, session_id, rows)
    main.close()


def test_each_budget_shows_its_spend_limit_and_state(capsem_home):
    capsem_home.mkdir(parents=True)
    (capsem_home / "config.yaml").write_text(CONFIG)
    day = today()
    first = day[:8] + "01"
    ledger(
        capsem_home,
        "20260101-000000-aaaa",
        "2026-01-01T00:00:00.000Z",
        [("2026-01-01", "anthropic", "claude-opus-4-1", "api.anthropic.com", 9, 900.0)],
    )  # another month
    ledger(capsem_home, "20261101-000000-bbbb", f"{first}T00:00:00.000Z",
           [(first, "anthropic", "claude-opus-4-1", "api.anthropic.com", 10, 100.0)])  # fmt: skip
    ledger(capsem_home, "20261123-000000-cccc", f"{day}T09:00:00.000Z",
           [(day, "openai", "gpt-4.1", "api.openai.com", 3, 4.5), (day, "anthropic", "claude-haiku-4-5",
            "api.anthropic.com", 1, 0.25)])  # fmt: skip
    states = {s["name"]: s for s in json.loads(run("budget", "--json"))}
    on_first = 100.0 if first == day else 0.0
    assert states["daily"] == {"name": "daily", "scope": "day", "period": day, "matches": "all",
                               "spent_usd": 4.75 + on_first, "limit_usd": 5.0, "warn_at": 0.8,
                               "state": "denied" if on_first else "warned"}  # fmt: skip
    assert (states["opus-month"]["spent_usd"], states["opus-month"]["state"]) == (100.0, "warned")
    assert states["one-run"]["period"] == "20261123-000000-cccc"  # the newest session
    assert (states["one-run"]["spent_usd"], states["one-run"]["state"]) == (0.25, "ok")
    older = {s["name"]: s for s in json.loads(run("budget", "--json", "--session", "20260101-000000-aaaa"))}
    assert older["one-run"]["spent_usd"] == 900.0 and older["one-run"]["state"] == "denied"
    by_prefix = {s["name"]: s for s in json.loads(run("budget", "--json", "--session", "20260101"))}
    assert by_prefix["one-run"]["period"] == "20260101-000000-aaaa" and by_prefix == older
    assert "no session '20251231' in main.db" in run("budget", "--session", "20251231", code=1)
    assert "2 sessions start with '20261'" in run("budget", "--session", "20261", code=1)
    table = run("budget")
    assert "daily" in table and "opus-month" in table and "claude-opus-*" in table and "$200.00" in table
    assert "warn: calls go through" in table


def test_without_budgets_or_main_db_it_says_what_to_do(capsem_home):
    assert "no budgets configured (add a budgets: section to" in run("budget")
    capsem_home.mkdir(parents=True)
    (capsem_home / "config.yaml").write_text(CONFIG)
    assert [s["spent_usd"] for s in json.loads(run("budget", "--json"))] == [0, 0, 0]  # nothing recorded yet
    (capsem_home / "config.yaml").write_text("budgets:\n  x: {scope: week, limit_usd: 1}\n")
    assert "budgets.x.scope must be session, day, month or team, got 'week'" in run("budget", code=1)


def test_inspect_reports_budget_events_and_refused_placeholders(tmp_path):
    db = open_session_db(tmp_path / "session.db")
    for decision, rule in [("allowed", None), ("warned", "budget:daily"), ("warned", "watch, budget:daily"),
                           ("denied", "budget:daily"), ("denied", "budget:daily"), ("denied", "no-paste")]:  # fmt: skip
        db.execute("INSERT INTO net_events (timestamp, domain, decision, matched_rule) VALUES ('t', 'h', ?, ?)",
                   (decision, rule))  # fmt: skip
    for credential, host, outcome, reason in [
        ("anthropic", "api.anthropic.com", "substituted", None),
        ("anthropic", "api.anthropic.com", "substituted", None),
        (
            "anthropic",
            "evil.example",
            "refused",
            "evil.example is not a host of this credential (api.anthropic.com)",
        ),
    ]:
        db.execute("INSERT INTO substitution_events (timestamp, credential, host, location, outcome, reason) "
                   "VALUES ('t', ?, ?, 'header x-api-key', ?, ?)", (credential, host, outcome, reason))  # fmt: skip
    assert check_budgets(db) == [
        Finding("info", "budgets", "budget daily: 2 model calls went through at its warn level"),
        Finding("warning", "budgets", "budget daily refused 2 model calls (answered by capsem, never sent)"),
    ]
    assert check_credentials(db) == [
        Finding("info", "credentials", "credential anthropic: the real key went to api.anthropic.com in 2 requests"),
        Finding("warning", "credentials", "credential anthropic: 1 placeholder not replaced "
                                          "(evil.example is not a host of this credential (api.anthropic.com))"),
    ]  # fmt: skip
