"""Budgets (pure): which calls a budget counts, its spend in its scope, the verdict, the refusal.

(The `budgets:` settings and their error lines are tested in tests/core/test_settings.py; the
hooks in tests/addons/proxy/test_guard.py; the real SDKs against the refusal in tests/e2e.)"""

from __future__ import annotations

import json

import pytest

from addons.budgets import ALLOWED, decide, matches, model_of, refusal, spent, strictest, today, usd
from capsem.settings import Budget

DAY = "2026-11-23"
ROWS = [
    ("s1", DAY, "anthropic", "claude-opus-4-1", "api.anthropic.com", 1.0),
    ("s1", DAY, "openai", "gpt-4.1", "api.openai.com", 0.5),
    ("s2", DAY, "anthropic", "claude-haiku-4-5", "api.anthropic.com", 0.25),
    ("s2", "2026-11-02", "anthropic", "claude-opus-4-1", "api.anthropic.com", 4.0),
    ("s3", "2026-10-31", "anthropic", "claude-opus-4-1", "api.anthropic.com", 100.0),  # last month
    ("s2", DAY, "bedrock", "", "bedrock-runtime.us-east-1.amazonaws.com", 2.0),  # model unknown
]


def budget(scope="day", limit=10.0, **fields) -> Budget:
    return Budget(name=fields.pop("name", "b"), scope=scope, limit_usd=limit, **fields)


@pytest.mark.parametrize(
    ("fields", "call", "expected"),
    [
        ({}, ("anthropic", None, "api.anthropic.com"), True),
        ({"provider": "Anthropic"}, ("anthropic", "x", "h"), True),
        ({"provider": "anthropic"}, ("openai", "x", "h"), False),
        ({"model": "claude-opus-*"}, ("anthropic", "claude-opus-4-1", "h"), True),
        ({"model": "claude-opus-*"}, ("anthropic", "claude-haiku-4-5", "h"), False),
        ({"model": "claude-opus-*"}, ("anthropic", None, "h"), False),  # an unknown model matches no glob
        ({"host": "*.anthropic.com"}, ("anthropic", None, "API.Anthropic.com"), True),
        ({"host": "*.anthropic.com"}, ("anthropic", None, "gateway.corp"), False),
        ({"provider": "openai", "model": "gpt-*", "host": "api.openai.com"}, ("openai", "gpt-4.1", "api.openai.com"),
         True),
    ],
)  # fmt: skip
def test_a_budget_counts_the_calls_its_globs_match(fields, call, expected):
    assert matches(budget(**fields), *call) is expected


def test_spend_is_counted_in_the_scope_of_the_budget():
    assert spent(budget("session"), ROWS, day=DAY, session_id="s1") == 1.5
    assert spent(budget("day"), ROWS, day=DAY, session_id=None) == 3.75
    assert spent(budget("month"), ROWS, day=DAY, session_id=None) == 7.75  # not October's 100
    assert spent(budget("month", model="claude-opus-*"), ROWS, day=DAY, session_id=None) == 5.0
    assert spent(budget("day", provider="bedrock"), ROWS, day=DAY, session_id=None) == 2.0
    assert spent(budget("day", host="api.openai.com"), ROWS, day=DAY, session_id=None) == 0.5


def test_the_strictest_budget_decides_and_the_first_declared_among_equals():
    spend = {"a": 1.0, "b": 9.0, "c": 10.0, "d": 10.0}
    budgets = [budget(name=n, limit=10.0) for n in "abcd"]
    verdict = decide(budgets, "anthropic", "m", "h", lambda b: spend[b.name])
    assert (verdict.decision, verdict.budget.name, verdict.spent, verdict.rule) == (
        "denied",
        "c",
        10.0,
        "budget:c",
    )
    assert decide(budgets[:2], "anthropic", "m", "h", lambda b: spend[b.name]).budget.name == "b"  # warned
    assert decide(budgets[:1], "anthropic", "m", "h", lambda b: spend[b.name]) is ALLOWED


def test_an_unconfirmed_spend_is_never_assumed_zero():
    strict, lenient = (
        budget(name="strict", limit=1.0),
        budget(name="lenient", limit=1.0, on_unconfirmed="allow"),
    )
    spent = {"strict": 0.5, "lenient": 0.5}.__getitem__

    def verdict(budgets, **spend):
        return decide(
            budgets, "anthropic", "m", "h", lambda b: spend.get(b.name, spent(b.name)), confirmed=False
        )

    denied = verdict([lenient, strict])
    assert (denied.decision, denied.budget.name, denied.rule) == (
        "denied",
        "strict",
        "budget:strict (unconfirmed)",
    )
    assert denied.message.startswith(
        "capsem cannot confirm this budget's spend: its recorder is not answering"
    )
    assert "$0.5000 of its $1.00 limit per day is counted so far" in denied.message
    let_through = verdict([lenient])
    assert (let_through.decision, let_through.rule) == ("warned", "budget:lenient (unconfirmed)")
    assert "goes through unchecked (budgets.lenient.on_unconfirmed: allow)" in let_through.message
    spent_already = verdict([lenient], lenient=1.0)  # over the limit: spent, confirmed or not
    assert (spent_already.decision, spent_already.unconfirmed) == ("denied", False)
    assert decide([strict], "anthropic", "m", "h", lambda b: 0.5).decision == "allowed"  # confirmed


@pytest.mark.parametrize(
    ("spend", "warn_at", "decision"),
    [(7.99, 0.8, "allowed"), (8.0, 0.8, "warned"), (9.99, 0.8, "warned"), (10.0, 0.8, "denied"),
     (12.0, 0.8, "denied"), (9.99, None, "allowed"), (10.0, None, "denied"), (9.99, 1.0, "allowed")],
)  # fmt: skip
def test_warned_from_the_warn_fraction_denied_at_the_limit(spend, warn_at, decision):
    assert decide([budget(limit=10.0, warn_at=warn_at)], "p", None, "h", lambda _: spend).decision == decision


def test_a_zero_limit_refuses_every_call_it_matches_and_others_go_through():
    blocked = [budget(limit=0.0, provider="openai")]
    assert decide(blocked, "openai", "gpt-4.1", "api.openai.com", lambda _: 0.0).decision == "denied"
    assert decide(blocked, "anthropic", "claude", "api.anthropic.com", lambda _: 0.0) is ALLOWED


def test_the_message_names_the_budget_its_limit_and_the_spend():
    denied = decide([budget("day", 5.0, name="daily")], "p", None, "h", lambda _: 5.0123)
    assert denied.message == (
        "capsem budget 'daily' is spent: $5.01 used today (UTC) of its $5.00 limit per day; this call was not "
        "sent to the provider. Raise budgets.daily.limit_usd in the capsem config, or wait for the next day (UTC)"
    )
    warned = decide([budget("month", 200.0, name="m")], "p", None, "h", lambda _: 170.0)
    assert (
        warned.message
        == "capsem budget 'm' is at 85%: $170.00 used this month (UTC) of its $200.00 limit per month"
    )
    assert "start a new session" in decide([budget("session", 0.01)], "p", None, "h", lambda _: 0.02).message


@pytest.mark.parametrize(
    ("protocol", "provider", "shape"),
    [
        ("anthropic", "anthropic", lambda b, m: b == {"type": "error", "error": {"type": "billing_error", "message": m}}),
        ("anthropic", "vertex", lambda b, m: b["error"]["message"] == m),
        ("anthropic", "bedrock", lambda b, m: b == {"message": m}),
        ("openai_chat", "openai", lambda b, m: b["error"]["message"] == m and b["error"]["code"] == "budget_exceeded"),
        ("openai_responses", "openai", lambda b, m: b["error"]["type"] == "budget_exceeded"),
        ("openai_chat", "openrouter", lambda b, m: b["error"]["message"] == m),
        ("gemini", "google", lambda b, m: b == {"error": {"code": 402, "message": m, "status": "FAILED_PRECONDITION"}}),
        ("ollama", "ollama", lambda b, m: b == {"error": m}),
    ],
)  # fmt: skip
def test_the_refusal_is_in_the_error_shape_of_the_api_with_a_status_sdks_do_not_retry(
    protocol, provider, shape
):
    verdict = decide([budget(limit=1.0, name="daily")], provider, None, "h", lambda _: 2.0)
    status, body, headers = refusal(protocol, provider, verdict)
    assert status == 402  # not 429, not 5xx: the SDKs retry those
    assert headers == {
        "content-type": "application/json",
        "x-should-retry": "false",
        "x-capsem-policy": "budget:daily",
    }
    assert shape(json.loads(body), verdict.message)


@pytest.mark.parametrize(
    ("body", "model"),
    [
        (b'{"max_tokens": 5, "messages": [{"role": "user", "content": "{\\"model\\": \\"x\\"}"}], '
         b'"model": "claude-opus-4-1"}', "claude-opus-4-1"),
        (b'{"model": "gpt-4.1", "input": "hi"}', "gpt-4.1"),
        (b'{"contents": []}', None),
        (b"[1, 2]", None),
        (b"not json", None),
        (b'{"model": 5}', None),
        (b"", None),
        (None, None),
    ],
)  # fmt: skip
def test_the_model_is_read_from_the_top_level_of_the_body(body, model):
    assert model_of(body) == model


def test_helpers():
    assert (usd(5), usd(1234.5), usd(0), usd(0.0123), usd(0.000002)) == ("$5.00", "$1,234.50", "$0.00", "$0.0123",
                                                                          "$0.000002")  # fmt: skip
    assert (
        today(0) == "1970-01-01"
        and today(1795392000 - 1) == "2026-11-22"
        and today(1795392000) == "2026-11-23"
    )
    assert strictest("allowed", "warned") == "warned" and strictest("denied", "warned") == "denied"
