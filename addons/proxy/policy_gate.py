"""The policy as an addon: its rules (`addons/proxy/policy.py`) applied to each flow before anything
goes upstream, after `Flows` and before the guardrails in the chain (`addons/capsem_addon.py`).

A rule that denies answers 403 (a JSON-RPC error for an MCP call) so nothing reaches the upstream;
one that warns logs a line; one that asks returns `Approvals.hold` (approvals.py), which mitmproxy
awaits for that flow alone until a person answers. The decision and the rule go into the flow's `FlowState` and from there
into its `net_events` row. MCP rules name servers by endpoint or by the name an `initialize`
answer gave: that name is learned here, on the event loop, before the client's next call.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from mitmproxy import http

from addons import mcp
from addons.proxy.flows import FlowState
from addons.proxy.hooks import guarded
from addons.proxy.policy import UNREADABLE, McpTarget

if TYPE_CHECKING:
    from addons.proxy.capture import Capsem

logger = logging.getLogger("addons.proxy.capture")


class PolicyGate:
    """Decides each flow by the policy's rules: on its headers, or on its body for MCP rules."""

    def __init__(self, capture: Capsem) -> None:
        self.capture = capture
        self.hook_failures = 0
        self.mcp_names: dict[str, str] = {}
        """MCP endpoint -> initialize name, learned on the event loop for the policy's MCP rules."""

    @guarded
    def requestheaders(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        state, policy = self.capture.flows.get(flow), self.capture.policy
        if (
            state is not None
            and policy.has_request_rules
            and (flow.request.stream or not policy.has_mcp_rules)
        ):
            return self._apply(
                flow, state, mcp.header_call(list(state.head.headers))
            )  # before any body byte goes up
        return None

    @guarded
    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        state = self.capture.flows.get(flow)
        if (
            state is None
            or not self.capture.policy.has_mcp_rules
            or flow.request.stream
            or flow.response is not None
        ):
            return None
        if state.mcp_unreadable:  # could hold any call: decided as one that matches every MCP rule
            return self._apply(flow, state, [], unreadable=True)
        calls = mcp.parse_request(state.mcp_body) if state.mcp and state.mcp_body else None
        return self._apply(flow, state, calls or [])

    @guarded
    def response(self, flow: http.HTTPFlow) -> None:
        if flow.websocket is None:  # a 101 upgrade is no MCP answer
            self._learn_mcp_name(flow)

    @guarded
    def error(self, flow: http.HTTPFlow) -> None:
        self._learn_mcp_name(flow)

    @guarded
    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self._learn_mcp_name(flow)

    def _apply(
        self, flow: http.HTTPFlow, state: FlowState, calls: list[mcp.McpRequest], *, unreadable: bool = False
    ) -> Awaitable[None] | None:
        """Decide the flow (first matching rule; a batch is judged by its strictest tools/call):
        record the decision, log a warning, answer 403 so nothing reaches the upstream, or hold
        it for a person (the coroutine returned, which mitmproxy awaits)."""
        head = state.head
        endpoint = _endpoint(state)
        names = (endpoint, self.mcp_names[endpoint]) if endpoint in self.mcp_names else (endpoint,)
        targets = [
            McpTarget(names, c.tool_name, _arguments(c))
            for c in calls
            if c.method == "tools/call" and c.tool_name
        ] or ([UNREADABLE] if unreadable else [])
        verdict = self.capture.policy.decide_request(state.request, targets)
        state.decision, state.matched_rule = verdict.decision, verdict.rule
        if verdict.decision == "warned":
            logger.warning("capsem: policy rule %s warns: %s %s:%s%s", verdict.rule, head.method, head.host,
                           head.port, head.path)  # fmt: skip
        elif verdict.decision == "denied":
            message = f"blocked by capsem policy rule {verdict.rule!r}"
            ids = [c.raw_id for c in calls if c.id is not None]
            body: dict[str, Any] = {"error": {"type": "policy_denied", "message": message}}
            if ids:  # an MCP client gets a JSON-RPC error it can show
                body = {"jsonrpc": "2.0", "id": ids[0], "error": {"code": -32001, "message": message}}
            flow.response = http.Response.make(
                403,
                json.dumps(body),
                {"content-type": "application/json", "x-capsem-policy": str(verdict.rule)},
            )
        elif verdict.decision == "asked":
            return self.capture.approvals.hold(flow, state, verdict, calls, names[-1])
        return None

    def _learn_mcp_name(self, flow: http.HTTPFlow) -> None:
        """An initialize answer names its server: learn it here, before the client's next call
        reaches a policy rule (by `mcp.learned_name`, the ledger's rule too)."""
        state = self.capture.flows.get(flow)
        if state is None or not state.mcp or not self.capture.policy.has_mcp_rules or flow.response is None:
            return
        requests = mcp.parse_request(state.mcp_body or b"")  # `initialize` may be spelled with escapes
        if not any(r.method == "initialize" for r in requests or []):
            return
        tap = state.response_tap
        body = bytes(tap.preview) if tap is not None else flow.response.get_content(strict=False)
        content_type = flow.response.headers.get("content-type")
        answers = {a.id: a for a in mcp.parse_response(body or b"", content_type)}
        name = mcp.learned_name(requests or [], answers)
        if name:
            self.mcp_names[_endpoint(state)] = name


def _endpoint(state: FlowState) -> str:
    """An MCP server's endpoint name, from the canonical request (the destination and path it means)."""
    return mcp.server_name(state.request.names[0].host, state.head.port, state.request.path)


def _arguments(call: mcp.McpRequest) -> dict[str, Any] | None:
    """A tools/call's `params.arguments` (None when its body did not carry them: a header-only call)."""
    arguments = call.params.get("arguments") if isinstance(call.params, dict) else None
    return arguments if isinstance(arguments, dict) else None
