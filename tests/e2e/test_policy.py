"""Network policy through a real mitmdump and real SDKs (the rules themselves, in-process:
tests/addons/proxy/test_policy_gate.py): rules from $CAPSEM_HOME/config.yaml allow, warn or deny;
a denied request gets the proxy's 403 and never reaches the upstream; every row says why."""

from __future__ import annotations

import gzip
import json

import anthropic
import httpx
import openai
import pytest

from capsem.mitm import MitmdumpError
from tests.cli.conftest import run
from tests.conftest import only_session, rows
from tests.e2e.test_capture_sdk import claude, gpt, model_exchanges

HI = [{"role": "user", "content": "hi"}]


def write_policy(capsem_home, rules: str) -> None:
    capsem_home.mkdir(parents=True, exist_ok=True)
    (capsem_home / "config.yaml").write_text("policy:\n  rules:\n" + rules)


def test_host_rules_deny_and_warn(mitmdump, emu, capsem_home):
    write_policy(
        capsem_home,
        "    - {name: no-openai, action: deny, host: '*.openai.com'}\n"
        "    - {name: watch-claude, action: warn, host: api.anthropic.com, path: '/v1/messages'}\n",
    )
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    answer = claude(proxy).messages.create(model="claude-haiku-4-5", max_tokens=50, messages=HI)
    with pytest.raises(openai.PermissionDeniedError, match="no-openai") as denied:
        gpt(proxy).chat.completions.create(model="gpt-4o-mini", messages=HI)
    assert denied.value.response.headers["x-capsem-policy"] == "no-openai"
    assert answer.content
    assert [e["path"] for e in model_exchanges(emu)] == ["/v1/messages"]  # OpenAI never saw its call
    assert proxy.stop() == 0
    db = only_session(capsem_home)
    nets = rows(
        db, "SELECT domain, decision, matched_rule, status_code, provider FROM net_events ORDER BY id"
    )
    assert nets == [
        {"domain": "api.anthropic.com", "decision": "warned", "matched_rule": "watch-claude", "status_code": 200,
         "provider": "anthropic"},
        {"domain": "api.openai.com", "decision": "denied", "matched_rule": "no-openai", "status_code": 403,
         "provider": "openai"},
    ]  # fmt: skip
    (call,) = rows(db, "SELECT provider, output_tokens FROM model_calls")  # the denied call was never made
    assert call["provider"] == "anthropic" and call["output_tokens"] == answer.usage.output_tokens
    assert "policy rule watch-claude warns: POST api.anthropic.com:443/v1/messages" in proxy.log()
    (session,) = json.loads(run("list-sessions", "--json"))
    assert (session["denied_requests"], session["total_requests"]) == (1, 2)


def test_a_streamed_request_body_is_refused_before_it_is_sent(mitmdump, emu, capsem_home):
    """mitmproxy cannot answer a request whose body it streams (stream_large_bodies): the decision is
    made on its headers and the connection is closed; the upstream sees nothing."""
    write_policy(
        capsem_home,
        "    - {name: no-local, action: deny, host: 127.0.0.1, path: '/v1/messages'}\n"
        "    - {name: mcp-rule, action: deny, mcp_tool: 'x'}\n",  # an MCP rule: bodies are usually awaited
    )
    proxy = mitmdump(args=["--set", "stream_large_bodies=1"])
    client = anthropic.Anthropic(api_key="sk-ant-x", base_url=emu.http_url, max_retries=0,
                                 http_client=httpx.Client(proxy=proxy.url, timeout=30))  # fmt: skip
    with pytest.raises(anthropic.APIConnectionError) as refused:
        client.messages.create(model="claude-haiku-4-5", max_tokens=50, messages=HI)
    assert not isinstance(refused.value, anthropic.APITimeoutError)  # closed at once, not left hanging
    # a 2026-07-28 MCP client names the tool in headers: an MCP rule can decide before the body
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "arguments": {}}}
    with httpx.Client(proxy=proxy.url, timeout=30) as http, pytest.raises(httpx.TransportError):
        http.post(f"{emu.http_url}/mcp", json=call, headers={"mcp-method": "tools/call", "mcp-name": "x"})
    assert emu.exchanges() == []
    assert proxy.stop() == 0
    nets = rows(
        only_session(capsem_home), "SELECT decision, matched_rule, status_code, error FROM net_events"
    )
    assert nets == [
        {"decision": "denied", "matched_rule": "no-local", "status_code": None,
         "error": "denied by capsem policy rule 'no-local': connection closed"},
        {"decision": "denied", "matched_rule": "mcp-rule", "status_code": None,
         "error": "denied by capsem policy rule 'mcp-rule': connection closed"},
    ]  # fmt: skip
    assert "NotImplementedError" not in proxy.log()


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (
            "    - {action: block, host: x}\n",
            "policy.rules[1].action must be allow, warn, deny or ask, got 'block'",
        ),
        ("    - {action: deny}\n", "policy.rules[1] must name something to match"),
        (
            "    - {action: deny, hostname: x}\n",
            "policy.rules[1].hostname is not a rule field (did you mean host?)",
        ),
    ],
)
def test_an_invalid_policy_stops_mitmdump_with_a_clear_error(mitmdump, capsem_home, rules, message):
    write_policy(capsem_home, rules)
    with pytest.raises(MitmdumpError) as failed:
        mitmdump()
    assert message in str(failed.value)


def test_an_mcp_rule_reads_a_compressed_body(mitmdump, emu, capsem_home):
    write_policy(capsem_home, "    - {name: no-deletes, action: deny, mcp_tool: 'delete_*'}\n")
    proxy = mitmdump()
    call = {
        "jsonrpc": "2.0",
        "id": "c-7",
        "method": "tools/call",
        "params": {"name": "delete_all", "arguments": {}},
    }
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    with httpx.Client(proxy=proxy.url, timeout=30) as http:
        denied = http.post(
            f"{emu.http_url}/mcp", content=gzip.compress(json.dumps(call).encode()), headers=headers
        )
    assert denied.status_code == 403 and denied.headers["x-capsem-policy"] == "no-deletes"
    assert denied.json() == {"jsonrpc": "2.0", "id": "c-7",
                             "error": {"code": -32001, "message": "blocked by capsem policy rule 'no-deletes'"}}  # fmt: skip
    assert emu.exchanges() == []
    assert proxy.stop() == 0
    (row,) = rows(only_session(capsem_home), "SELECT * FROM mcp_calls")
    assert (row["method"], row["tool_name"], row["request_id"]) == ("tools/call", "delete_all", "c-7")
    assert (row["decision"], row["matched_rule"], row["status_code"], row["is_error"]) == (
        "denied",
        "no-deletes",
        403,
        1,
    )
    assert row["error_message"] == "-32001: blocked by capsem policy rule 'no-deletes'"
