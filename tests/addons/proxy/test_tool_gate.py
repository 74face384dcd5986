"""`ToolGate` in-process: with no tool rule no answer is held, read or touched; with one, a
streamed answer's denied call is replaced on its way to the client while the record keeps the
model's answer, and the agent's beside it. End to end: tests/e2e/test_tool_hold.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from addons.proxy import tool_gate
from addons.proxy.policy import Policy
from capsem.settings import parse
from tests.addons.proxy.conftest import finish
from tests.addons.proxy.test_capture import model_flow
from tests.conftest import rows

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures"
WIRE = (FIXTURES / "anthropic" / "stream_thinking_tools.sse").read_bytes()
DENY_GREP = "policy:\n  rules:\n    - {name: no-grep, action: deny, tool: Grep}\n"


def opened(capsem, flow):
    response = flow.response
    flow.response = None
    capsem.requestheaders(flow)
    capsem.request(flow)
    flow.response = response
    capsem.responseheaders(flow)


def test_with_no_tool_rule_nothing_is_held_read_or_touched(capsem, capsem_home, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("an answer was read for tool rules that do not exist")

    monkeypatch.setattr(Policy, "decide_tool", never)
    monkeypatch.setattr(tool_gate, "machine_for", never)
    monkeypatch.setattr(tool_gate, "calls_in", never)
    flow = model_flow()
    opened(capsem, flow)
    state = capsem.flows.get(flow)
    assert state.tool_hold is None and not state.tool_whole
    assert type(flow.response.stream).__name__ == "ResponseTap"  # capture's tap alone
    for i in range(0, len(WIRE), 50):
        piece = WIRE[i : i + 50]
        assert flow.response.stream(piece) is piece  # the very same object, not a copy
    assert flow.response.stream(b"") == b""
    assert capsem.response(flow) is None
    db = finish(capsem, capsem_home)
    assert [r["decision_rule"] for r in rows(db, "SELECT decision_rule FROM tool_calls")] == [None, None]


@pytest.mark.parametrize("size", [1, 13, 4096])
def test_a_denied_call_is_replaced_on_the_way_and_both_answers_are_kept(capsem, capsem_home, size):
    capsem.configure_settings(parse(yaml.safe_load(DENY_GREP)))
    flow = model_flow()
    opened(capsem, flow)
    assert capsem.flows.get(flow).tool_hold is not None
    sent = [c for i in range(0, len(WIRE), size) for c in flow.response.stream(WIRE[i : i + size])]
    sent += flow.response.stream(b"")
    assert all(sent)  # never an empty chunk (it would end a chunked body)
    got = b"".join(sent)
    assert b'"name":"Grep"' not in got and b'"name":"Read"' in got and b"'no-grep'" in got
    capsem.response(flow)
    db = finish(capsem, capsem_home)
    decided = rows(db, "SELECT tool_name, decision, decision_rule FROM tool_calls ORDER BY id")
    assert decided == [{"tool_name": "Read", "decision": "allowed", "decision_rule": None},
                       {"tool_name": "Grep", "decision": "denied", "decision_rule": "no-grep"}]  # fmt: skip
    (net,) = rows(db, "SELECT bytes_received FROM net_events")
    assert net["bytes_received"] == len(WIRE)  # the model's answer, as it came
