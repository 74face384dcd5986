"""`PolicyGate` in-process (taddons/tflow, the recorder on a thread): what the policy's rules do to a
flow and to its `net_events` row. Through a real mitmdump and real SDKs: tests/e2e/test_policy.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from mitmproxy import http
from mitmproxy.test import tflow, tutils

from addons.proxy.capture import Capsem
from addons.proxy.policy_gate import PolicyGate
from addons.recorder.thread import RecorderThread
from tests.addons.proxy.conftest import Chain, finish, started
from tests.conftest import rows


@contextmanager
def policy(home, rules: str) -> Iterator[Chain]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("policy:\n  rules:\n" + rules)
    with started(Capsem(recorder=RecorderThread)) as addon:
        yield addon


def through(addon: Chain, flow: http.HTTPFlow) -> http.HTTPFlow:
    """The hooks of a request; the upstream's answer (a 200) unless capsem answered it."""
    addon.requestheaders(flow)
    addon.request(flow)
    if flow.response is None:
        flow.response = tutils.tresp()
    addon.response(flow)
    return flow


def nets(addon: Chain, home) -> list[dict]:
    return rows(
        finish(addon, home), "SELECT method, decision, matched_rule, status_code FROM net_events ORDER BY id"
    )


def test_a_host_rule_denies_with_403_and_a_warn_rule_only_records(capsem_home):
    rules = "    - {name: no-x, action: deny, host: '*.x.test'}\n    - {name: watch, action: warn, host: y.test}\n"
    with policy(capsem_home, rules) as addon:
        denied = through(addon, tflow.tflow(req=tutils.treq(host="api.x.test"), resp=False))
        warned = through(addon, tflow.tflow(req=tutils.treq(host="y.test"), resp=False))
        assert denied.response.status_code == 403 and denied.response.headers["x-capsem-policy"] == "no-x"
        assert json.loads(denied.response.content)["error"]["type"] == "policy_denied"
        assert warned.response.status_code == 200
        assert nets(addon, capsem_home) == [
            {"method": "GET", "decision": "denied", "matched_rule": "no-x", "status_code": 403},
            {"method": "GET", "decision": "warned", "matched_rule": "watch", "status_code": 200},
        ]


def test_method_port_and_path_must_all_match(capsem_home):
    rules = ("    - {name: no-model-list, action: deny, method: get, port: 8080, path: '/v1/models*'}\n"
             "    - {name: other-port, action: deny, port: 8081}\n")  # fmt: skip
    with policy(capsem_home, rules) as addon:
        for method in (b"GET", b"POST"):
            req = tutils.treq(host="127.0.0.1", port=8080, method=method, path=b"/v1/models")
            through(addon, tflow.tflow(req=req, resp=False))
        assert nets(addon, capsem_home) == [
            {"method": "GET", "decision": "denied", "matched_rule": "no-model-list", "status_code": 403},
            {"method": "POST", "decision": "allowed", "matched_rule": None, "status_code": 200},
        ]


def test_no_rules_change_nothing(capsem):
    flow = through(capsem, tflow.tflow(req=tutils.treq(host="api.x.test"), resp=False))
    assert flow.response.status_code == 200 and "x-capsem-policy" not in flow.response.headers


def mcp_flow(message: dict) -> http.HTTPFlow:
    req = tutils.treq(host="127.0.0.1", port=9000, method=b"POST", path=b"/mcp", content=json.dumps(message).encode(),
                      headers=http.Headers(content_type="application/json"))  # fmt: skip
    return tflow.tflow(req=req, resp=False)


def test_an_mcp_rule_denies_a_tool_by_the_name_its_server_gave(capsem_home):
    """The `initialize` answer names the server; the next `tools/call` to it meets the rule by that
    name and gets a JSON-RPC error with the call's id."""
    with policy(capsem_home, "    - {name: no-rm, action: deny, mcp_server: files, mcp_tool: rm}\n") as addon:
        init = mcp_flow({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
        addon.requestheaders(init)
        addon.request(init)
        answer = {"jsonrpc": "2.0", "id": 0, "result": {"serverInfo": {"name": "files", "version": "1"}}}
        init.response = tutils.tresp(content=json.dumps(answer).encode(),
                                     headers=http.Headers(content_type="application/json"))  # fmt: skip
        addon.response(init)
        call = through(addon, mcp_flow({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                        "params": {"name": "rm", "arguments": {}}}))  # fmt: skip
        assert call.response.status_code == 403
        error = {"code": -32001, "message": "blocked by capsem policy rule 'no-rm'"}
        assert json.loads(call.response.content) == {"jsonrpc": "2.0", "id": 7, "error": error}
        assert [n["decision"] for n in nets(addon, capsem_home)] == ["allowed", "denied"]


def test_the_policy_and_the_ledger_learn_server_names_by_one_rule(capsem_home):
    """`mcp.learned_name` on both sides: a `serverInfo` that answers no `initialize` of the exchange
    names nothing (the policy used to learn it), the answer to an `initialize` does, in mitmdump's
    policy and in the recorder's `mcp_calls.server_name` alike."""
    with policy(capsem_home, "    - {name: no-rm, action: deny, mcp_server: files, mcp_tool: rm}\n") as addon:
        gate = next(one for one in addon.addon.chain if isinstance(one, PolicyGate))
        learned = []
        for asked, answered, name in ((1, 2, "stray"), (3, 3, "files")):
            flow = mcp_flow({"jsonrpc": "2.0", "id": asked, "method": "initialize", "params": {}})
            addon.requestheaders(flow)
            addon.request(flow)
            answer = {
                "jsonrpc": "2.0",
                "id": answered,
                "result": {"serverInfo": {"name": name, "version": "1"}},
            }
            flow.response = tutils.tresp(content=json.dumps(answer).encode(),
                                         headers=http.Headers(content_type="application/json"))  # fmt: skip
            addon.response(flow)
            learned.append(dict(gate.mcp_names))
        assert learned == [{}, {"127.0.0.1:9000/mcp": "files"}]
        through(
            addon, mcp_flow({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "ls"}})
        )
        db = finish(addon, capsem_home)
    servers = rows(db, "SELECT method, server_name FROM mcp_calls ORDER BY id")
    assert servers == [{"method": "initialize", "server_name": "127.0.0.1:9000/mcp"},
                       {"method": "initialize", "server_name": "files"},
                       {"method": "tools/call", "server_name": "files"}]  # fmt: skip


def test_an_argument_rule_decides_on_the_tools_call_arguments(capsem_home):
    """`mcp_args` reads the JSON-RPC body: the same tool is let through or refused by its arguments,
    and a batch is refused when one of its calls is."""
    rules = "    - {name: no-rm-rf, action: deny, mcp_tool: shell, mcp_args: {command: 'rm -rf *'}}\n"

    def call(n: int, command: str) -> dict:
        return {"jsonrpc": "2.0", "id": n, "method": "tools/call",
                "params": {"name": "shell", "arguments": {"command": command}}}  # fmt: skip

    with policy(capsem_home, rules) as addon:
        ok = through(addon, mcp_flow(call(1, "ls -la")))
        denied = through(addon, mcp_flow(call(2, "rm -rf /")))
        batch = through(addon, mcp_flow([call(3, "ls"), call(4, "rm -rf ~")]))  # type: ignore[arg-type]
        assert ok.response.status_code == 200
        assert denied.response.status_code == 403 and denied.response.headers["x-capsem-policy"] == "no-rm-rf"
        assert json.loads(denied.response.content)["id"] == 2
        assert batch.response.status_code == 403
        assert [(n["decision"], n["matched_rule"]) for n in nets(addon, capsem_home)] == [
            ("allowed", None), ("denied", "no-rm-rf"), ("denied", "no-rm-rf")]  # fmt: skip
