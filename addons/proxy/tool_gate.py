"""Tool rules in the model's answer: its tool calls held until decided, before the agent sees them.

Runs only when the policy has tool rules (`Policy.has_tool_rules`); with none, no answer is held,
read or touched here (no stream function is set, no hook does more than that one check). On a
model call in a format capsem reads (`addons/toolhold/`), it picks one of three ways:

- an `identity`-encoded SSE answer (or Gemini JSON-array stream: `ArrayHold`; an NDJSON one,
  Ollama's: `LineHold`; Bedrock's AWS event stream: `FrameHold`), when no tool rule asks:
  streamed through `SseHold` (set as
  `flow.response.stream`, after capture's tap, so the recorder gets the upstream's bytes): every
  byte passes at once except a tool call's own, held until its arguments are complete and then
  released unchanged or replaced (`Policy.decide_tool` runs on the event loop, once per call);
- any other answer (JSON, a compressed stream, or any answer when a tool rule asks):
  read whole (`flow.response.stream = False`) and decided in `response`, which mitmproxy awaits:
  an `ask` waits there for a person (`Approvals.ask_tool`) without holding the event loop, and a
  rewritten body is re-encoded by mitmproxy with the answer's own content-encoding. mitmproxy's
  stream function is synchronous and nothing can be sent after the last awaited hook, so an
  answer that may have to wait for a person cannot stream (docs/guardrails.md);
- a Responses WebSocket (Codex): each server message is an event; a held call's messages are
  dropped and sent again (injected) once decided, or replaced; an `ask` is awaited in the
  `websocket_message` hook, which pauses only that socket.

Every decision goes on `FlowState.tool_decisions` for the recorder (`tool_calls.decision`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from mitmproxy import http

from addons.messages import ToolDecision
from addons.providers import is_event_stream, stream_framing
from addons.proxy.flows import FlowState
from addons.proxy.hooks import guarded
from addons.proxy.policy import ToolTarget, Verdict, agent_name, tool_arguments
from addons.toolhold import HeldCall, SseHold, calls_in, machine_for, rewrite_json
from addons.toolhold.openai_responses import CALLS, ResponsesHold, call_of
from addons.toolhold.registry import HOLDS, PROTOCOLS

if TYPE_CHECKING:
    from addons.proxy.capture import Capsem

logger = logging.getLogger("addons.proxy.capture")
REFUSING = ("denied", "asked", "timed_out")


def _framing(flow: http.HTTPFlow, state: FlowState) -> str | None:
    """The framing of a model answer (`addons/providers: stream_framing`)."""
    content_type = flow.response.headers.get("content-type") if flow.response is not None else None
    return stream_framing(state.route.protocol, content_type, state.head.path)  # type: ignore[union-attr]


class ToolGate:
    """Holds the tool calls of model answers for the policy's tool rules (after the guardrails)."""

    def __init__(self, capture: Capsem) -> None:
        self.capture = capture
        self.hook_failures = 0
        self._rules: tuple[object, bool, bool] = (None, False, False)
        """(the policy, whether it has tool rules, whether one asks), read once per policy."""

    def _tool_rules(self) -> tuple[bool, bool]:
        """Whether the policy has tool rules, and whether one of them asks (one look per policy)."""
        policy = self.capture.policy
        if self._rules[0] is not policy:
            asks = any(r.is_tool_rule and r.action == "ask" for r in policy.rules)
            self._rules = (policy, policy.has_tool_rules, asks)
        return self._rules[1], self._rules[2]

    # -- which answers -------------------------------------------------------------------------

    def _state(self, flow: http.HTTPFlow) -> FlowState | None:
        """The flow's state when its answer is one to hold (None for every flow with no tool rule)."""
        if not self._tool_rules()[0]:
            return None
        state = self.capture.flows.get(flow)
        if state is None or state.route is None or state.route.protocol not in PROTOCOLS:
            return None
        return state

    @guarded
    def responseheaders(self, flow: http.HTTPFlow) -> None:
        state, resp = self._state(flow), flow.response
        if state is None or resp is None or not 200 <= resp.status_code < 300 or flow.websocket is not None:
            return
        identity = resp.headers.get("content-encoding", "identity").strip().lower() in ("", "identity")
        sse = SseHold if is_event_stream(resp.headers.get("content-type")) else None
        hold = HOLDS.get(_framing(flow, state) or "", sse)
        if identity and not self._tool_rules()[1] and hold is not None:
            machine = machine_for(state.route.protocol, lambda call: self._refusing_rule(state, call))  # type: ignore[union-attr]
            state.tool_hold = hold(machine)  # type: ignore[arg-type]
            resp.stream = state.tool_hold
        else:
            state.tool_whole = True
            resp.stream = False

    # -- deciding --------------------------------------------------------------------------------

    def _verdict(self, state: FlowState, call: HeldCall) -> Verdict:
        session = self.capture.session
        process = self.capture.connections.process(state.head.conn)
        arguments = (
            tool_arguments(call.text) if call.text is not None else call.arguments
        )  # as the backtest reads them
        target = ToolTarget(call.name, arguments, agent_name(session.command if session else None),
                            process[0] if process else None)  # fmt: skip
        verdict = self.capture.policy.decide_tool(target)
        if verdict.decision == "warned":
            logger.warning(
                "capsem: policy rule %s warns: tool call %s (%s)", verdict.rule, call.name, call.call_id
            )
        return verdict

    def _refusing_rule(self, state: FlowState, call: HeldCall) -> str | None:
        """Decide a call of a streamed answer (no rule asks there): the denying rule, or None."""
        verdict = self._verdict(state, call)
        decision = "denied" if verdict.decision == "asked" else verdict.decision  # cannot wait here
        state.tool_decisions.append(ToolDecision(call.call_id, call.name, decision, verdict.rule))
        if decision == "denied":
            logger.warning(
                "capsem: policy rule %s denies tool call %s (%s)", verdict.rule, call.name, call.call_id
            )
            return verdict.rule or ""
        return None

    async def _asked(
        self, flow: http.HTTPFlow, state: FlowState, call: HeldCall, verdict: Verdict
    ) -> str | None:
        """Wait for a person's answer to an asked call: the refusing rule, or None when approved."""
        answer = await self.capture.approvals.ask_tool(flow, state, verdict.rule or "", call.name,
                                                       _arguments_text(call))  # fmt: skip
        approved = answer.decision == "approved"
        approval = state.approval.id if state.approval is not None else None
        state.tool_decisions.append(ToolDecision(call.call_id, call.name, "approved" if approved else
                                                 ("denied" if answer.decision == "denied" else "asked"),
                                                 verdict.rule, approval))  # fmt: skip
        return None if approved else verdict.rule or ""

    # -- whole answers ---------------------------------------------------------------------------

    @guarded
    def response(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        state = self._state(flow)
        if state is None or not state.tool_whole or flow.response is None:
            return None
        body = flow.response.get_content(strict=False)
        calls = calls_in(state.route.protocol, body, _framing(flow, state)) if body else []  # type: ignore[union-attr]
        if not calls:
            return None
        verdicts = [(call, self._verdict(state, call)) for call in calls]
        if any(v.decision == "asked" for _, v in verdicts):
            return self._decide_whole(flow, state, body, verdicts)  # mitmproxy awaits it for this flow alone
        refusing = {}
        for call, verdict in verdicts:
            state.tool_decisions.append(ToolDecision(call.call_id, call.name, verdict.decision, verdict.rule))
            if verdict.decision == "denied":
                refusing[call.call_id] = verdict.rule or ""
        self._rewrite(flow, state, body, refusing)  # type: ignore[arg-type]
        return None

    async def _decide_whole(self, flow: http.HTTPFlow, state: FlowState, body: bytes,
                            verdicts: list[tuple[HeldCall, Verdict]]) -> None:  # fmt: skip
        refusing: dict[str, str] = {}
        try:  # `guarded` does not reach into a coroutine: nothing raised here may reach mitmproxy
            for call, verdict in verdicts:
                if verdict.decision == "asked":
                    rule = await self._asked(flow, state, call, verdict)
                    if rule is not None:
                        refusing[call.call_id] = rule
                    continue
                state.tool_decisions.append(
                    ToolDecision(call.call_id, call.name, verdict.decision, verdict.rule)
                )
                if verdict.decision == "denied":
                    refusing[call.call_id] = verdict.rule or ""
            self._rewrite(flow, state, body, refusing)
        except Exception as exc:
            self._failed(flow, exc)

    def _failed(self, flow: http.HTTPFlow, exc: Exception) -> None:
        self.hook_failures += 1
        logger.warning("capsem: holding the tool calls of %s failed: %r; the answer passes unchanged", flow.id, exc,
                       exc_info=True)  # fmt: skip

    def _rewrite(self, flow: http.HTTPFlow, state: FlowState, body: bytes, refusing: dict[str, str]) -> None:
        """Give the agent the answer with the refused calls replaced; the record keeps the upstream's."""
        if not refusing or flow.response is None:
            return
        new = rewrite_json(
            state.route.protocol, body, lambda call: refusing.get(call.call_id), _framing(flow, state)
        )  # type: ignore[union-attr]
        if new is None:
            return
        state.upstream_body = flow.response.raw_content
        flow.response.content = new  # encoded again with the answer's content-encoding
        state.delivered_body = new

    # -- Responses over a WebSocket (Codex) ------------------------------------------------------

    @guarded
    def websocket_message(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        state = self.capture.flows.get(flow)
        if state is None or flow.websocket is None or not self._tool_rules()[0]:
            return None
        msg = flow.websocket.messages[-1]
        if msg.from_client or (msg.injected and released(state, msg.content)) or not msg.is_text:
            return None
        if state.tool_ws is None:
            state.tool_ws = ResponsesHold(
                lambda call: state.tool_ws_rulings.pop(call.call_id, None), sse=False
            )
        content = msg.content
        item = _done_call(content)
        if item is not None:
            call = call_of(item)
            verdict = self._verdict(state, call)
            if verdict.decision == "asked":
                return self._ws_asked(flow, state, msg, call, verdict)
            state.tool_decisions.append(ToolDecision(call.call_id, call.name, verdict.decision, verdict.rule))
            if verdict.decision == "denied":
                state.tool_ws_rulings[call.call_id] = verdict.rule or ""
        self._ws_feed(flow, state, msg)
        return None

    async def _ws_asked(
        self, flow: http.HTTPFlow, state: FlowState, msg: Any, call: HeldCall, verdict: Verdict
    ) -> None:
        try:
            rule = await self._asked(flow, state, call, verdict)
            if rule is not None:
                state.tool_ws_rulings[call.call_id] = rule
            self._ws_feed(flow, state, msg)
        except Exception as exc:
            self._failed(flow, exc)

    def _ws_feed(self, flow: http.HTTPFlow, state: FlowState, msg: Any) -> None:
        machine = state.tool_ws
        assert machine is not None
        try:
            out = machine.event(msg.content, msg.content)
        except Exception as exc:  # let what it held and this message through, as they came
            self._failed(flow, exc)
            out = [*machine.held] + (
                [] if machine.held and machine.held[-1] is msg.content else [msg.content]
            )
            machine.held, machine.call = [], None
        if out == [msg.content]:
            return  # passes as it came
        from mitmproxy import ctx

        msg.drop()  # held, or replaced: what the agent gets is sent again in order
        for content in out:
            state.tool_released.append(content)
            ctx.master.commands.call("inject.websocket", flow, True, content, True)


def released(state: FlowState, content: bytes, take: bool = False) -> bool:
    """Whether an injected message is one the tool gate sent (the model's own bytes, already
    recorded when they came, or a replacement): the budgets and the recorder skip it. `take`:
    the last hook to see it (capture) forgets it."""
    if not state.tool_released or state.tool_released[0] != content:
        return False
    if take:
        state.tool_released.popleft()
    return True


def _done_call(content: bytes) -> dict[str, Any] | None:
    """The complete item of a `response.output_item.done` for a tool call, else None."""
    if b'"response.output_item.done"' not in content or not any(k.encode() in content for k in CALLS):
        return None
    try:
        ev = json.loads(content)
    except ValueError:
        return None
    item = ev.get("item") if isinstance(ev, dict) and ev.get("type") == "response.output_item.done" else None
    return item if isinstance(item, dict) and item.get("type") in CALLS else None


def _arguments_text(call: HeldCall) -> str | None:
    return (
        json.dumps(call.arguments, ensure_ascii=False, sort_keys=True) if call.arguments is not None else None
    )
