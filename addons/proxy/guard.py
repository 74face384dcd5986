"""The guardrails as an addon: brokered credentials and spend budgets applied in the hooks, after
the policy and before capture in the chain (`addons/capsem_addon.py`).

What is decided lives in `addons/proxy/guardrails.py` (`Guardrails`: the broker, the budgets and
the spend view); this addon says when. At `requestheaders` the real keys replace their
placeholders and a model call whose body streams up is checked on its headers; at `request` every
other model call is checked, after `await`ing the cost of calls that have just ended (mitmproxy
awaits what a hook returns: the event loop never blocks). A `response.create` on a WebSocket is a
model call too. A call let through holds its reservation (its most expensive outcome) until its
cost is counted. When a flow ends (a WebSocket turn: when the server ends it), the budgets learn
that its cost is on its way, before the capture addon hands it to the recorder.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from mitmproxy import http
from mitmproxy.websocket import WebSocketMessage

from addons.budgets import Verdict, strictest
from addons.providers import websocket_route
from addons.proxy.flows import FlowState
from addons.proxy.hooks import guarded
from addons.proxy.tool_gate import released

if TYPE_CHECKING:
    from addons.proxy.capture import Capsem

logger = logging.getLogger("addons.proxy.capture")


class Guard:
    """Brokered credentials and budgets, in the hooks (the decisions: `capture.guard`)."""

    def __init__(self, capture: Capsem) -> None:
        self.capture = capture
        self.hook_failures = 0

    @guarded
    def requestheaders(self, flow: http.HTTPFlow) -> Any:
        state, guard = self.capture.flows.get(flow), self.capture.guard
        if state is None:
            return
        if guard.broker:  # the flow's head keeps the placeholders; the upstream gets the keys
            state.substitutions = guard.substitute(flow)
        if flow.request.stream and flow.response is None and guard.checks(state.route):
            if not guard.settled():  # the prices are still loading, or a call just ended
                return self._when_settled("requestheaders", lambda: self._apply_budget(flow, state))
            return self._apply_budget(flow, state)  # the body goes up as it comes: decide on the headers
        return None

    @guarded
    def request(self, flow: http.HTTPFlow) -> Any:
        state, guard = self.capture.flows.get(flow), self.capture.guard
        if state is None or flow.request.stream or flow.response is not None or not guard.checks(state.route):
            return None
        if not guard.settled():  # a call just ended: wait for its cost (mitmproxy awaits this)

            def check() -> Any:
                return self._apply_budget(flow, state) if flow.response is None else None

            return self._when_settled("request", check)
        return self._apply_budget(flow, state)

    async def _when_settled(self, hook: str, check: Callable[[], Any]) -> None:
        """`check` once the cost of every call that has ended is counted (or given up on)."""
        await self._after(self.capture.guard.settle(), hook, check)

    async def _after(self, first: Awaitable[Any], hook: str, check: Callable[[], Any]) -> None:
        """`check` once `first` is done (and what `check` returns to await, if anything)."""
        try:
            await first
            if (more := check()) is not None:
                await more
        except Exception as exc:  # as `guarded` does for the other hooks
            self.hook_failures += 1
            logger.warning("capsem: %s hook failed: %r", hook, exc, exc_info=True)

    def _apply_budget(self, flow: http.HTTPFlow, state: FlowState, lease: bool = True) -> Any:
        """Check a model call against the budgets: record a warning, or answer it in the
        provider's error shape so that nothing reaches the upstream. When only this session's
        lease of a team budget is too small, returns what to await (a larger lease, then the
        check again) instead."""
        assert state.route is not None
        head, guard, route = state.head, self.capture.guard, state.route
        tokens = guard.tokens_of(flow, route)
        model = route.model or tokens.model
        host = state.request.names[0].host or head.host  # canonical: `api.openai.com.` is api.openai.com
        worst = guard.worst(route, model, host, tokens)
        verdict = guard.verdict(
            route, model, host, f"{head.method} {head.host}{head.path} ({flow.id})", worst, lease_first=lease
        )
        if lease and (more := guard.lease_wanted(verdict, worst)) is not None:
            return self._after(more, "request", lambda: self._apply_budget(flow, state, lease=False))
        record(state, verdict)
        guard.reserve(flow.id, route, host, verdict, worst)
        if verdict.decision == "denied":
            status, body, headers = guard.refusal(state.route, verdict)
            flow.response = http.Response.make(status, body, headers)

    # -- websockets (Responses over WebSocket: Codex CLI) ----------------------------------------

    @guarded
    def websocket_message(self, flow: http.HTTPFlow) -> Any:
        guard = self.capture.guard
        if self.capture.flows.get(flow) is None or flow.websocket is None or guard.view is None:
            return None
        msg = flow.websocket.messages[-1]
        if not msg.from_client:
            state = self.capture.flows.get(flow)
            if state is not None and msg.injected and released(state, msg.content):
                return None  # the tool gate's copy of a message counted when it came
            guard.ws_message(flow.id, msg.content, msg.injected)
        elif guard.ws_turn(msg.content)[0]:
            if not guard.settled():  # the previous turn just ended: wait for its cost (mitmproxy awaits this)
                return self._when_settled("websocket_message", lambda: self._budget_ws_turn(flow, msg))
            self._budget_ws_turn(flow, msg)
        return None

    def _budget_ws_turn(self, flow: http.HTTPFlow, msg: WebSocketMessage) -> None:
        """A `response.create` on a WebSocket is a model call: the budgets decide it like an HTTP
        one; a denied one is dropped and answered with an `error` event (recorded as its turn)."""
        state, guard = self.capture.flows.get(flow), self.capture.guard
        if state is None:
            return
        host = state.request.names[0].host or state.head.host
        route, tokens = websocket_route(host), guard.ws_bound(msg.content)
        worst = guard.worst(route, tokens.model, host, tokens)
        verdict = guard.verdict(route, tokens.model, host, f"WebSocket turn on {host}{state.head.path} ({flow.id})",
                                worst)  # fmt: skip
        record(state, verdict)
        guard.ws_reserve(flow.id, route, host, verdict, worst)
        if verdict.decision == "denied":
            from mitmproxy import ctx

            msg.drop()
            ctx.master.commands.call("inject.websocket", flow, True, guard.ws_refusal(verdict), True)

    # -- the end of a flow: its cost is on its way ------------------------------------------------

    @guarded
    def response(self, flow: http.HTTPFlow) -> None:
        if flow.websocket is None:  # a 101 upgrade: the flow ends at websocket_end
            self._ended(flow)

    @guarded
    def error(self, flow: http.HTTPFlow) -> None:
        self._ended(flow)

    @guarded
    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self._ended(flow)

    def _ended(self, flow: http.HTTPFlow) -> None:
        state, recorder = self.capture.flows.get(flow), self.capture.recorder
        if state is not None:
            counted = recorder is not None and recorder.exit_reason is None
            self.capture.guard.ended(state.route, flow.id, state.decision, counted)


def record(state: FlowState, verdict: Verdict) -> None:
    """A budget's verdict on the flow's decision and matched_rule (the strictest decides)."""
    if verdict.decision == "allowed" or (state.decision == "denied" and verdict.decision != "denied"):
        return
    if verdict.decision == "denied" or state.decision == "allowed":
        state.matched_rule = verdict.rule
    elif verdict.rule not in (state.matched_rule or "").split(", "):  # warned by a policy rule and a budget
        state.matched_rule = f"{state.matched_rule}, {verdict.rule}"
    state.decision = strictest(state.decision, verdict.decision)
