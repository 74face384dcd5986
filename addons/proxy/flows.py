"""The hook side's state of each open flow, and the addon that opens it: first in the chain.

`Flows` runs before the other addons (`addons/capsem_addon.py`): at `requestheaders` it copies
the request head (its path exactly as sent), computes the canonical request once
(`addons/canonical.py`: every name the request carries, its canonical path) and decides the flow's
route on it (`addons/providers/__init__.py: detect`); at `request` it keeps the body, says whether
the flow is an MCP call (`addons/mcp/jsonrpc.py`: its decoded body parsed, decided here once for
the policy and the recorder) and sniffs the route of another POST to an unknown path. A JSON-RPC
body is MCP even on a model-call path; only a model-call path on a known provider's own host
(`api.anthropic.com/v1/messages`) is not parsed for it, since no MCP server answers there. The
addons after it (policy, guardrails, capture) read and complete the
same `FlowState`; `Capsem` hands it over as one `FlowEnded` and forgets it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mitmproxy import http

from addons.canonical import CanonicalRequest, split_target
from addons.mcp.jsonrpc import Kind, read_request
from addons.messages import Approval, RequestHead, ResponseHead, Route, Substitution, ToolDecision
from addons.providers import detect, provider_for_host
from addons.providers.sniff import sniff_route
from addons.proxy.hooks import addr, authority, guarded, header_fields
from addons.proxy.tap import RequestTap, ResponseTap

if TYPE_CHECKING:
    from addons.proxy.capture import Capsem


@dataclass(slots=True)
class FlowState:
    """The hook side's state of one open flow (never handed over: messages are built from it)."""

    head: RequestHead
    request: CanonicalRequest
    """What the request means, decided once at `requestheaders`: what every rule decides on."""
    route: Route | None
    decision: str = "allowed"
    matched_rule: str | None = None
    request_tap: RequestTap | None = None
    response_tap: ResponseTap | None = None
    response: ResponseHead | None = None
    mcp: bool = False
    mcp_body: bytes | None = None
    """The decoded body of an MCP request (what the policy reads its calls from)."""
    mcp_unreadable: bool = False
    """An MCP body that cannot be read whole: the policy takes it as any call."""
    request_body: bytes | None = None
    request_size: int = 0
    request_truncated: bool = False
    substitutions: tuple[Substitution, ...] = ()
    approval: Approval | None = None
    tool_decisions: list[ToolDecision] = field(default_factory=list)
    """What the tool rules decided about the tool calls of the answer (`Policy.decide_tool`), in
    the order they were decided; handed over on the flow's `FlowEnded`."""
    tool_hold: Any = None
    """The `SseHold` streaming the answer when tool rules hold its calls (`tool_gate.py`)."""
    tool_whole: bool = False
    """The answer is read whole and its calls decided in `response` (`tool_gate.py`)."""
    upstream_body: bytes | None = None
    """The upstream's answer when the agent was given another (a denied call replaced)."""
    delivered_body: bytes | None = None
    """What the agent was given instead of `upstream_body`."""
    tool_ws: Any = None
    """A Responses WebSocket's hold machine (`tool_gate.py`)."""
    tool_ws_rulings: dict[str, str] = field(default_factory=dict)
    """call_id -> the rule refusing it, decided before its last message is fed to `tool_ws`."""
    tool_released: deque[bytes] = field(default_factory=deque)
    """WebSocket messages the tool gate injected, not yet seen again by the hooks."""


class Flows:
    """Opens each flow's `FlowState` (`requestheaders`) and reads its request (`request`)."""

    def __init__(self, capture: Capsem) -> None:
        self.capture = capture
        self.open: dict[str, FlowState] = {}
        self.conns: dict[str, int] = {}
        """Client connection id -> how many of its flows are open."""
        self.hook_failures = 0

    def get(self, flow: http.HTTPFlow) -> FlowState | None:
        return self.open.get(flow.id)

    def close(self, key: str) -> FlowState:
        """Forget the open flow `key` (it is handed over)."""
        state = self.open.pop(key)
        conn = state.head.conn
        if (left := self.conns.get(conn, 1) - 1) > 0:
            self.conns[conn] = left
        else:
            self.conns.pop(conn, None)
        return state

    @guarded
    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if self.capture.outbox is None:
            return
        req = flow.request
        self.capture.connections.attempts.flow_started(flow.client_conn.id)
        path, query = split_target(req.path)  # `//admin` is a path, never a host
        headers = header_fields(req.headers.fields)
        canonical = CanonicalRequest.of(req.method, req.port, path, names(flow, headers))
        head = RequestHead(
            key=flow.id, conn=flow.client_conn.id, started=req.timestamp_start or time.time(),
            scheme=req.scheme, host=req.host, port=req.port, method=req.method, path=path,
            query=query, http_version=req.http_version, headers=headers,
            client_addr=addr(flow.client_conn.peername), canonical_path=canonical.path,
        )  # fmt: skip
        route = detect(canonical.names[0].host or req.host, canonical.path, req.method, req.port)
        if flow.id not in self.open:
            self.conns[head.conn] = self.conns.get(head.conn, 0) + 1
        self.open[flow.id] = FlowState(head, canonical, route)

    @guarded
    def request(self, flow: http.HTTPFlow) -> None:
        state = self.open.get(flow.id)
        if state is None:
            return
        collect_request(flow, state)
        head = state.head
        if not _model_api(state):
            kind, state.mcp_body = read_request(list(head.headers), head.method, state.request_body,
                                                self.capture.settings.capture.max_body_bytes,
                                                cut=state.request_truncated)  # fmt: skip
            state.mcp, state.mcp_unreadable = kind is not Kind.NOT_MCP, kind is Kind.UNREADABLE
        if state.mcp and not state.mcp_unreadable:
            state.route = None  # a JSON-RPC body is no model call, whatever its path or keys
        elif state.route is None and head.method == "POST":  # an unknown path: a model call's body?
            state.route = sniff_route(head.host, head.path, head.header("content-type"),
                                      head.header("content-encoding"), state.request_body, port=head.port)  # fmt: skip


def _model_api(state: FlowState) -> bool:
    """A model-call path on a known provider's own host (every name the request gives for it): no
    MCP server answers there. A model-call path elsewhere (any host may serve MCP) is parsed."""
    if state.route is None:
        return False
    return all(provider_for_host(name.host) is not None for name in state.request.names)


def names(flow: http.HTTPFlow, headers: tuple[tuple[str, str], ...]) -> list[str]:
    """Every name the request carries, the destination first: where mitmproxy connects (the
    absolute-form URI's host, else the CONNECT target or the transparent destination), each Host
    header (of `headers`, the request's, decoded), HTTP/2's `:authority`, the TLS SNI and the
    server connection's address. The request goes upstream under all of them (DNS, TLS, virtual
    hosting), so each is checked."""
    req = flow.request
    found = [req.host, *(value for name, value in headers if name.lower() == "host")]
    if raw := req.data.authority:
        found.append(authority(raw))
    if flow.client_conn.sni:
        found.append(flow.client_conn.sni)
    if flow.server_conn.address:
        found.append(flow.server_conn.address[0])
    return found


def collect_request(flow: http.HTTPFlow, state: FlowState) -> None:
    """Keep the request body (from the tap when it was streamed); only the first call does anything."""
    tap, state.request_tap = state.request_tap, None
    if tap is not None:
        state.request_body, state.request_size = bytes(tap.body), tap.bytes
        state.request_truncated = tap.bytes > len(tap.body)
    elif state.request_body is None and flow.request.raw_content is not None:
        state.request_body = flow.request.raw_content
        state.request_size = len(state.request_body)


def response_head(resp: http.Response) -> ResponseHead:
    return ResponseHead(resp.status_code, header_fields(resp.headers.fields), resp.timestamp_start)
