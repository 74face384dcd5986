"""`capsem policy test` on a session recorded through real mitmdump (tests/cli/conftest.py: an
anthropic and an openai tool loop against the emulator): findings per rule and session, budget
refusals, --json, --fail-on, and clear errors. The agreement with live decisions is
tests/e2e/test_policy_backtest.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import recorded_id, run, session_db
from tests.conftest import rows

POLICY = """
policy:
  rules:
    - {name: no-openai, action: deny, host: api.openai.com}
    - {name: watch-claude, action: warn, host: api.anthropic.com, path: /v1/messages}
budgets:
  tiny: {scope: session, limit_usd: 0.0000001}
"""


def policy_file(tmp_path: Path, text: str = POLICY) -> Path:
    path = tmp_path / "strict.yaml"
    path.write_text(text)
    return path


def test_findings_per_rule_and_session_and_the_budget_that_would_have_refused(home, tmp_path):
    data = json.loads(run("policy", "test", str(policy_file(tmp_path)), "--json"))
    session = recorded_id(home)
    nets = rows(session_db(home), "SELECT id, domain, path, method FROM net_events ORDER BY id")
    calls = rows(session_db(home), "SELECT id, estimated_cost_usd AS cost FROM model_calls ORDER BY id")
    assert data["sessions"] == {"tested": [session], "skipped": 0, "missing": 0}
    assert data["totals"] == {"requests": len(nets), "mcp_calls": 0, "model_calls": len(calls)}
    expected = {("no-openai", "denied", n["id"]) for n in nets if n["domain"] == "api.openai.com"}
    expected |= {("watch-claude", "warned", n["id"]) for n in nets if n["domain"] == "api.anthropic.com"}
    assert {(f["rule"], f["decision"], f["net_event_id"]) for f in data["findings"]} == expected
    by_rule = {r["rule"]: r for r in data["rules"]}
    assert by_rule["no-openai"]["sessions"] == {session: 2} and by_rule["no-openai"]["decision"] == "denied"
    # the budget: the openai calls are denied by the policy (never made, never spent); the first
    # anthropic call spends past the tiny limit, so the second is refused
    (budget,) = data["budgets"]
    openai_calls = {n["id"] for n in nets if n["domain"] == "api.openai.com"}
    ordered = rows(session_db(home), "SELECT id, net_event_id, estimated_cost_usd AS cost FROM model_calls "
                                     "ORDER BY timestamp, id")  # fmt: skip
    sent = [c for c in ordered if c["net_event_id"] not in openai_calls]
    assert sent[0]["cost"] > 0
    assert budget["first_refused"]["model_call_id"] == sent[1]["id"]
    assert budget["first_refused"]["spent_usd"] == pytest.approx(sent[0]["cost"])
    assert budget["refused_calls"] == len(sent) - 1
    assert budget["saved_usd"] == pytest.approx(sum(c["cost"] for c in sent[1:]))


def test_the_text_report_reads_at_80_columns(home, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = run("policy", "test", str(policy_file(tmp_path)))
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "no-openai would have denied 2 requests in 1 session, e.g.:" in text
    assert "POST api.openai.com:443/v1/chat/completions" in text
    assert "budget tiny (session, $0.0000001) would have refused 1 model call in 1" in text
    assert "watch-claude would have warned about 2 requests in 1 session" in text


def test_fail_on_exits_3_only_for_the_decisions_named(home, tmp_path):
    file = str(policy_file(tmp_path))
    run("policy", "test", file, "--fail-on", "deny", code=3)
    run("policy", "test", file, "--fail-on", "ask")  # nothing would have been asked for
    allow = policy_file(tmp_path, "policy: {rules: [{action: warn, host: nowhere.test}]}")
    run("policy", "test", str(allow), "--fail-on", "deny", "--fail-on", "warn")


def test_the_current_config_is_the_default_and_a_session_can_be_named(home, tmp_path):
    (home / "config.yaml").write_text(POLICY)
    prefix = recorded_id(home)[:15]
    data = json.loads(run("policy", "test", prefix, "--json"))
    assert data["file"] == "current config" and data["sessions"]["tested"] == [recorded_id(home)]
    assert {f["rule"] for f in data["findings"]} == {"no-openai", "watch-claude"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("policy: {rules: [{action: block, host: x}]}", "policy.rules[1].action must be allow, warn or deny"),
        ("policy: {rules: [{action: deny, mcp_args: {command: {regex: '('}}}]}",
         "policy.rules[1].mcp_args.command.regex is not a valid regular expression"),
        ("policy: [", "invalid YAML at line 1"),
        ("capture: {}\n", "has no policy rules and no budgets: nothing to test"),
    ],
)  # fmt: skip
def test_a_bad_file_is_one_clear_line(home, tmp_path, text, message):
    out = run("policy", "test", str(policy_file(tmp_path, text)), code=1)
    assert message in out and len(out.strip().splitlines()) == 1


def test_unknown_session_missing_file_and_empty_home_are_clear_errors(home, tmp_path):
    file = str(policy_file(tmp_path))
    assert "no session.db or session.db.gz for session 'nope'" in run("policy", "test", file, "nope", code=1)
    assert "missing.yaml: no such file" in run("policy", "test", str(tmp_path / "missing.yaml"), code=1)
    assert "no session recorded since 2999-01-01" in run(
        "policy", "test", file, "--since", "2999-01-01", code=1
    )
    assert "is not a day" in run("policy", "test", file, "--since", "soon", code=2)


def test_no_main_db_is_a_clear_error(capsem_home, tmp_path):
    out = run("policy", "test", str(policy_file(tmp_path)), code=1)
    assert "no main.db at" in out and "nothing to test" in out
