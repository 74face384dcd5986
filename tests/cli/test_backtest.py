"""The backtest's evaluation (assembler/backtest.py), pure: recorded requests and model calls in,
findings and budget refusals out. Recorded sessions through the CLI: tests/cli/test_policy_test.py."""

from __future__ import annotations

import pytest
import yaml

from addons.proxy.policy import Policy
from assembler.backtest import McpCall, ModelCall, Request, Session, evaluate
from assembler.backtest_cli import FAIL_ON, PHRASES, Tried, as_data, show
from capsem.settings import parse


def settings(text: str):
    return parse(yaml.safe_load(text))


def request(
    n: int, host: str = "api.example.com", path: str = "/v1/x", calls: tuple[McpCall, ...] = ()
) -> Request:
    return Request(n, f"2026-11-0{1 + n % 3}T10:00:0{n % 10}Z", host, 443, path, "POST", "agent", 7, "allowed",
                   calls)  # fmt: skip


def model_call(n: int, net: int, day: str, cost: float, model: str = "claude-haiku-4-5") -> ModelCall:
    return ModelCall(n, net, f"{day}T10:00:{n:02d}Z", "anthropic", model, "api.anthropic.com", cost)


def test_each_request_is_decided_by_the_proxy_rules_and_a_batch_by_its_strictest_call():
    policy = Policy.from_settings(settings("""
policy:
  rules:
    - {name: no-rm, action: deny, mcp_args: {command: "rm *"}}
    - {name: watch, action: warn, host: api.example.com}
"""))  # fmt: skip
    server = ("127.0.0.1:9/mcp", "shell")
    ls, rm = McpCall(1, server, "sh", {"command": "ls"}), McpCall(2, server, "sh", {"command": "rm -r x"})
    session = Session("s1", (request(1), request(2, host="other.test"), request(3, host="127.0.0.1", calls=(ls, rm)),
                             request(4, host="127.0.0.1", calls=(ls,))))  # fmt: skip
    report = evaluate(policy, (), [session])
    got = [(f.request.id, f.rule, f.decision, f.call.id if f.call else None) for f in report.findings]
    assert got == [(1, "watch", "warned", None), (3, "no-rm", "denied", 2)]
    assert (report.requests, report.mcp_calls, report.decisions()) == (4, 3, {"warned", "denied"})


def test_recorded_requests_are_decided_on_their_canonical_form_as_the_proxy_decides():
    """The path as recorded (as sent), the host and the recorded Host header: canonical, as in mitmdump."""
    policy = Policy.from_settings(settings("""
policy:
  rules:
    - {name: no-admin, action: deny, path: "/admin/*"}
    - {name: no-paste, action: deny, host: "*.pastebin.com"}
    - {name: no-local, action: deny, host: 127.0.0.0/8}
"""))  # fmt: skip
    host_header = Request(5, "2026-11-01T10:00:05Z", "api.example.com", 443, "/v1/x", "GET", None, None,
                          "allowed", (), ("X.PASTEBIN.COM.",))  # fmt: skip
    session = Session("s1", (request(1, path="//admin/users"), request(2, path="/%61dmin;x/users"),
                             request(3, host="x.pastebin.com."), request(4, host="0x7f000001"), host_header,
                             request(6, path="/%2561dmin/users")))  # fmt: skip
    got = [(f.request.id, f.rule) for f in evaluate(policy, (), [session]).findings]
    assert got == [(1, "no-admin"), (2, "no-admin"), (3, "no-paste"), (4, "no-local"), (5, "no-paste")]


def test_budgets_refuse_in_start_order_across_sessions_by_scope_and_count_what_is_sent():
    """A day budget counts every session of its day; a call the policy denies spends nothing; a
    refused call spends nothing; the first refusal and the spend saved are reported."""
    config = settings("""
policy: {rules: [{name: no-y, action: deny, path: /y}]}
budgets:
  daily: {scope: day, limit_usd: 0.25, warn_at: 0.5}
  per-session: {scope: session, limit_usd: 1.0, model: "claude-opus-*"}
""")  # fmt: skip
    a = Session("a", (request(1), request(2, path="/y"), request(3)),
                (model_call(1, 1, "2026-11-01", 0.10), model_call(2, 2, "2026-11-01", 5.0),
                 model_call(3, 3, "2026-11-01", 0.10)))  # fmt: skip
    b = Session("b", (request(1), request(2)),
                (model_call(1, 1, "2026-11-01", 0.10), model_call(2, 2, "2026-11-02", 0.10)))  # fmt: skip
    report = evaluate(Policy.from_settings(config), config.budgets.entries, [a, b])
    daily, per_session = report.budgets
    # in start order: a1 and b1 (10:00:01) spend 0.20; a2 is denied by the policy (its 5.0 never
    # spent); a3 comes at 0.20, past the warn fraction (0.125): warned; b2 is the next day
    assert [(r.session, r.call.id) for r in daily.refused] == []
    assert daily.warned == 1 and daily.first_warned is not None
    assert (daily.first_warned.session, daily.first_warned.call.id) == ("a", 3)
    assert daily.first_warned.spent == pytest.approx(0.2)
    c = Session("c", (request(1),), (model_call(5, 1, "2026-11-01", 0.5),))  # starts after b1 on day 1
    report = evaluate(Policy.from_settings(config), config.budgets.entries, [a, b, c])
    daily = report.budgets[0]
    assert [(r.session, r.call.id, round(r.spent, 2)) for r in daily.refused] == [("c", 5, 0.3)]
    assert daily.saved == pytest.approx(0.5) and per_session.refused == []


def test_a_session_budget_starts_over_in_each_session():
    config = settings("budgets: {s: {scope: session, limit_usd: 1}}")
    sessions = [Session(name, (), (model_call(1, None, "2026-11-01", 2.0), model_call(2, None, "2026-11-01", 2.0)))
                for name in ("a", "b")]  # fmt: skip
    (outcome,) = evaluate(Policy(), config.budgets.entries, sessions).budgets
    assert [(r.session, r.call.id, r.spent) for r in outcome.refused] == [("a", 2, 2.0), ("b", 2, 2.0)]
    assert outcome.saved == 4.0


@pytest.mark.parametrize(
    ("action", "decision", "phrase"),
    [("ask", "asked", "would have asked for"), ("deny", "denied", "would have denied")],
)
def test_every_decision_a_rule_takes_is_reported_as_it_is(action, decision, phrase, capsys, monkeypatch):
    """Decisions are not a fixed list: an `ask` rule's `asked` is a finding, shown, and --fail-on-able."""
    policy = Policy.from_settings(
        settings(f"policy: {{rules: [{{name: ask-first, action: {action}, host: ask.test}}]}}")
    )
    report = evaluate(policy, (), [Session("s", (request(1, host="ask.test"), request(2)))])
    assert [(f.request.id, f.decision) for f in report.findings] == [(1, decision)]
    assert report.decisions() & set(FAIL_ON.values()) == {decision}
    assert as_data(Tried("f.yaml", 1, 0, 0, 0), report)["rules"] == [
        {"rule": "ask-first", "decision": decision, "requests": 1, "sessions": {"s": 1}}]  # fmt: skip
    monkeypatch.setenv("COLUMNS", "80")
    show(Tried("f.yaml", 1, 0, 0, 0), report)
    assert f"ask-first {phrase} 1 request in 1 session" in capsys.readouterr().out
    assert PHRASES.get("asked") == "asked for"


def test_rules_that_decided_nothing_are_named_whatever_their_kind():
    """A rule shadowed by an earlier one decided nothing; an `allow` that decided something did."""
    from assembler.backtest import ToolCall

    policy = Policy.from_settings(settings("""
policy:
  rules:
    - {name: ok-example, action: allow, host: api.example.com}
    - {name: shadowed, action: deny, host: "*.example.com"}
    - {name: no-rm, action: deny, mcp_args: {command: "rm *"}}
    - {name: mcp-unused, action: warn, mcp_tool: delete_*}
    - {name: bash-rm, action: deny, tool: Bash, tool_args: {command: {shell: rm}}}
    - {name: tool-unused, action: ask, tool: Write}
"""))  # fmt: skip
    rm = McpCall(1, ("127.0.0.1:9/mcp",), "sh", {"command": "rm -r x"})
    bash = ToolCall(1, 1, "2026-11-01T10:00:00Z", "toolu_1", "Bash", {"command": "rm -rf x"}, "claude", "node",
                    "allowed")  # fmt: skip
    report = evaluate(policy, (), [Session("s", (request(1), request(2, host="127.0.0.1", calls=(rm,))),
                                           tool_calls=(bash,))])  # fmt: skip
    assert [(u.rule, u.kind) for u in report.unmatched] == [("shadowed", "request"), ("mcp-unused", "mcp"),
                                                           ("tool-unused", "tool")]  # fmt: skip
    assert [(f.rule, f.decision, f.call.call_id) for f in report.tool_findings] == [
        ("bash-rm", "denied", "toolu_1")
    ]
    assert report.decisions() == {"denied"}
