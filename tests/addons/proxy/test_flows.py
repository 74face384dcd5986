"""`Flows` in-process: the state each flow starts with, before the other addons read it."""

from __future__ import annotations

import json

from mitmproxy import http
from mitmproxy.test import tflow, tutils

from addons.messages import Route
from tests.addons.proxy.conftest import finish
from tests.conftest import rows


def post(host: str, path: bytes, body: dict, content_type: str = "application/json") -> http.HTTPFlow:
    req = tutils.treq(host=host, port=443, scheme="https", method=b"POST", path=path,
                      content=json.dumps(body).encode(), headers=http.Headers(content_type=content_type))  # fmt: skip
    return tflow.tflow(req=req, resp=False)


def test_the_route_comes_from_the_head_and_the_model_from_the_url(capsem):
    flow = post("bedrock-runtime.us-east-1.amazonaws.com", b"/model/anthropic.claude-x/invoke", {})
    capsem.requestheaders(flow)
    state = capsem.flows.get(flow)
    assert state.route == Route("bedrock", "anthropic", "anthropic.claude-x")
    assert state.head.host == "bedrock-runtime.us-east-1.amazonaws.com" and state.head.method == "POST"


def test_the_route_is_decided_on_the_canonical_host(capsem):
    """A trailing dot or upper case reaches the same provider: the call is a model call (recorded,
    budgeted) however its host is written; the head keeps the host as sent."""
    for host in ("API.Anthropic.com.", "api.anthropic.com.."):
        flow = post(host, b"/v1/messages", {})
        capsem.requestheaders(flow)
        state = capsem.flows.get(flow)
        assert state.route is not None and state.route.provider == "anthropic", host
        assert state.head.host == host


def test_an_unknown_path_is_sniffed_from_the_body(capsem):
    flow = post("gateway.example", b"/llm", {"model": "claude-x", "max_tokens": 9, "messages": []})
    capsem.requestheaders(flow)
    assert capsem.flows.get(flow).route is None
    capsem.request(flow)
    state = capsem.flows.get(flow)
    assert state.route is not None and state.route.protocol == "anthropic"
    assert state.request_body == flow.request.raw_content and not state.mcp


def test_a_json_rpc_post_is_an_mcp_call(capsem):
    flow = post("127.0.0.1", b"/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    capsem.requestheaders(flow)
    capsem.request(flow)
    state = capsem.flows.get(flow)
    assert state.route is None and state.mcp


def test_nothing_is_opened_without_a_session():
    from addons.proxy.capture import Capsem

    capture = Capsem()
    flow = post("api.anthropic.com", b"/v1/messages", {})
    capture.flows.requestheaders(flow)
    assert capture.flows.get(flow) is None


def test_non_model_endpoints_get_only_net_events(capsem, capsem_home):
    listed = tflow.tflow(
        req=tutils.treq(host="api.anthropic.com", method=b"GET", path=b"/v1/models"), resp=False
    )
    counted = post(
        "api.anthropic.com", b"/v1/messages/count_tokens", {"model": "claude-haiku-4-5", "messages": []}
    )
    for flow in (listed, counted):
        capsem.requestheaders(flow)
        capsem.request(flow)
        assert capsem.flows.get(flow).route is None
        flow.response = tutils.tresp(content=b'{"input_tokens": 3}')
        capsem.response(flow)
    db = finish(capsem, capsem_home)
    assert rows(db, "SELECT COUNT(*) AS n FROM model_calls")[0]["n"] == 0
    assert [r["path"] for r in rows(db, "SELECT path FROM net_events ORDER BY id")] == [
        "/v1/models",
        "/v1/messages/count_tokens",
    ]


def test_the_canonical_request_is_computed_once_from_every_name_the_request_carries(capsem):
    """The destination, each Host header, `:authority`, SNI and the server address: one `Name` each,
    canonical, on the flow's state beside the head, which keeps the path and query as sent."""
    req = tutils.treq(host="api.openai.com", port=443, scheme="https", method=b"GET",
                      path=b"//admin/./users;x=1?a=1?b",
                      headers=http.Headers([(b"Host", b"API.OpenAI.com."), (b"Host", b"0x7f000001:8080")]))  # fmt: skip
    req.authority = "x.PASTEBIN.com:443"
    flow = tflow.tflow(req=req, resp=False)
    flow.client_conn.sni = "ｓｎｉ.example"
    flow.server_conn.address = ("[::ffff:10.0.0.1]", 443)
    capsem.requestheaders(flow)
    state = capsem.flows.get(flow)
    assert (state.head.path, state.head.query) == ("//admin/./users;x=1", "a=1?b")
    assert state.head.canonical_path == state.request.path == "/admin/users"
    assert [n.host for n in state.request.names] == [
        "api.openai.com", "127.0.0.1", "x.pastebin.com", "sni.example", "10.0.0.1"
    ]  # fmt: skip
    assert (state.request.method, state.request.port) == ("GET", 443)
