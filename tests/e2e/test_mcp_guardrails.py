"""MCP rules decide on what a request means, through a real mitmdump (issue 33, parts 2 and 3).

Each body below is a `tools/call` written the way an attacker (or an SDK) may write it: its
`jsonrpc` key after 2 KB of arguments, escaped, beside `model`/`messages` keys on a model-call
path, or gzipped as `text/plain`. Each escaped every MCP rule (`mcp_tool`, `mcp_args`, `ask`)
and left no `mcp_calls` row when MCP was sniffed from the body's first bytes. Each must now be
denied or held, never reach the upstream, and be recorded; the `{shell: ...}` and `{any: ...}`
matchers must refuse the rewritten commands; and `capsem policy test` must decide the recorded
session as the proxy did."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest

from tests.cli.conftest import run
from tests.conftest import only_session, rows
from tests.shared_proxy import SharedProxy

POLICY = """policy:
  ask_timeout_s: 0.3
  rules:
    - {name: no-delete, action: deny, mcp_tool: 'delete_*'}
    - {name: no-rm, action: deny, mcp_args: {command: {shell: 'rm -rf'}}}
    - {name: no-metadata, action: deny, mcp_args: {'*': {any: '*169.254.169.254*'}}}
    - {name: ask-deploy, action: ask, mcp_tool: deploy}
"""
PAD = "x" * 3000  # pushes `jsonrpc` past the first 2 KB


def late_key(call: dict) -> tuple[str, bytes, dict]:
    """The TypeScript SDK's key order with large arguments: `jsonrpc` last."""
    body = {"method": "tools/call", "params": {**call["params"], "_meta": {"pad": PAD}}, "id": call["id"],
            "jsonrpc": "2.0"}  # fmt: skip
    return "/mcp", json.dumps(body).encode(), {"content-type": "application/json"}


def escaped(call: dict) -> tuple[str, bytes, dict]:
    text = json.dumps(call).replace('"jsonrpc"', '"\\u006asonrpc"').replace('"tools/call"', '"tools\\/call"')
    return "/mcp", text.encode(), {"content-type": "application/json"}


def model_keys(call: dict) -> tuple[str, bytes, dict]:
    """Extra `model`/`messages` keys, POSTed to a model-call path on a host that is no provider's."""
    body = {
        **call,
        "model": "claude-haiku-4-5",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    }
    return "/v1/messages", json.dumps(body).encode(), {"content-type": "application/json"}


def gzipped_text(call: dict) -> tuple[str, bytes, dict]:
    return (
        "/mcp",
        gzip.compress(json.dumps(call).encode()),
        {"content-type": "text/plain", "content-encoding": "gzip"},
    )


FORMS = [late_key, escaped, model_keys, gzipped_text]
RM_SPELLINGS = [
    "sudo -u root rm -r -f /",
    ["/bin/rm", "-fr", "/"],  # argv
    {"script": {"steps": ["echo ok", "bash -c 'rm -Rf ~'"]}},  # nested
    "echo x;\t/bin/rm --recursive --force /",
]


def tools_call(n: int, tool: str, arguments: dict) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


def test_every_bypass_is_decided_recorded_and_backtested(mitmdump, emu, capsem_home):
    capsem_home.mkdir(parents=True, exist_ok=True)
    (capsem_home / "config.yaml").write_text(POLICY)
    proxy = mitmdump()
    expected: dict[int, tuple[str, str, str | None]] = {}  # id -> (tool, decision, rule)
    allowed_ids = []
    n = 0
    with httpx.Client(proxy=proxy.url, timeout=30) as http:
        for i, form in enumerate(FORMS):
            calls = [
                ("delete_all", {}, "denied", "no-delete"),
                ("run_shell", {"command": RM_SPELLINGS[i]}, "denied", "no-rm"),
                ("fetch", {"opts": {"urls": ["https://ok", "http://169.254.169.254/latest"]}}, "denied", "no-metadata"),
                ("deploy", {}, "asked", "ask-deploy"),  # nobody answers in time
                ("run_shell", {"command": "echo rm -rf / && ls -la"}, "allowed", None),  # echo's words are text
            ]  # fmt: skip
            for tool, arguments, decision, rule in calls:
                n += 1
                path, body, headers = form(tools_call(n, tool, arguments))
                answer = http.post(f"{emu.http_url}{path}", content=body, headers=headers)
                expected[n] = (tool, decision, rule)
                if decision == "allowed":
                    allowed_ids.append(n)
                    continue
                # refused (403) or held and then answered as not approved, as a JSON-RPC error
                assert answer.status_code == (200 if rule == "ask-deploy" else 403), (form.__name__, tool)
                assert answer.json()["id"] == n and rule in answer.json()["error"]["message"]
    # only the allowed calls reached the upstream
    assert sorted(json.loads(e["request_body"])["id"] for e in emu.exchanges()) == allowed_ids
    assert proxy.stop() == 0
    db = only_session(capsem_home)
    recorded = rows(db, "SELECT request_id, tool_name, decision, matched_rule, net_event_id FROM mcp_calls "
                        "WHERE method = 'tools/call'")  # fmt: skip
    assert {
        int(r["request_id"]): (r["tool_name"], "allowed" if r["decision"] == "error" else r["decision"],
                               r["matched_rule"])
        for r in recorded
    } == expected  # fmt: skip
    assert not rows(db, "SELECT id FROM model_calls")  # none of them was taken for a model call
    approvals = rows(db, "SELECT rule, decision FROM approvals")
    assert approvals == [{"rule": "ask-deploy", "decision": "timed_out"}] * len(FORMS)
    # the backtest decides the recorded session with the same code: the same calls, the same rules
    data = json.loads(run("policy", "test", "--json"))
    by_net = {r["net_event_id"]: int(r["request_id"]) for r in recorded}
    found = {
        by_net[f["net_event_id"]]: (f["mcp"]["tool"], f["decision"], f["rule"]) for f in data["findings"]
    }
    assert found == {
        n: (tool, decision, rule) for n, (tool, decision, rule) in expected.items() if rule is not None
    }


@pytest.fixture(scope="module")
def without_rules(emulator, tmp_path_factory) -> SharedProxy:
    """One mitmdump with no rule at all, one scenario per form, then stopped."""
    shared = SharedProxy(emulator, tmp_path_factory.mktemp("mcp-no-rules"), upstream=False)
    try:
        for form in FORMS:
            shared.run(form.__name__, lambda proxy, f=form: post_call(proxy, emulator, f))
    finally:
        shared.stop()
    return shared


def post_call(proxy, emu, form) -> None:
    path, body, headers = form(tools_call(7, "read_note", {"name": "x"}))
    with httpx.Client(proxy=proxy.url, timeout=30) as http:
        http.post(f"{emu.http_url}{path}", content=body, headers=headers)


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__)
def test_an_mcp_call_in_any_form_is_recorded_without_rules(without_rules, form):
    """No rule at all: the call still gets its `mcp_calls` row (the recorder takes mitmdump's word)."""
    assert without_rules.code == 0
    s = without_rules.scenarios[form.__name__]
    (row,) = rows(without_rules.db,
                  f"SELECT method, tool_name, request_id FROM mcp_calls WHERE net_event_id IN ({s.ids()})")  # fmt: skip
    assert row == {"method": "tools/call", "tool_name": "read_note", "request_id": "7"}


def test_a_tool_rule_of_the_first_version_refuses_every_form(mitmdump, emu, capsem_home):
    """Rules written as before (`mcp_tool`, an `mcp_args` glob): every form is refused."""
    capsem_home.mkdir(parents=True, exist_ok=True)
    (capsem_home / "config.yaml").write_text(
        "policy:\n  rules:\n    - {name: no-delete, action: deny, mcp_tool: 'delete_*'}\n"
        "    - {name: no-etc, action: deny, mcp_args: {path: '/etc/*'}}\n"
    )
    proxy = mitmdump()
    with httpx.Client(proxy=proxy.url, timeout=30) as http:
        for n, form in enumerate(FORMS):
            for tool, arguments, rule in (
                ("delete_all", {}, "no-delete"),
                ("write", {"path": "/etc/x"}, "no-etc"),
            ):
                path, body, headers = form(tools_call(n, tool, arguments))
                answer = http.post(f"{emu.http_url}{path}", content=body, headers=headers)
                assert (answer.status_code, answer.headers.get("x-capsem-policy")) == (403, rule), (
                    form.__name__
                )
    assert emu.exchanges() == []
    assert proxy.stop() == 0
