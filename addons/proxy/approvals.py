"""`ask`: a request a policy rule holds until a person answers (or `policy.ask_timeout_s` passes).

`PolicyGate` (policy_gate.py) hands a flow whose verdict is `asked` to `Approvals.hold`, a
coroutine mitmproxy awaits for that flow alone: every other flow goes on meanwhile. The answer
comes from the approvals channel (`approval_channel.py`: `capsem approve|deny ID`, the banner
of `capsem view`), from an earlier `--always` answer (decided by `rule`), from the timeout or from
shutdown. Approved, the request goes upstream unchanged; otherwise the proxy answers it in its
provider's error shape (a JSON-RPC error for MCP) naming the rule. The answer travels to the
recorder on the flow's `FlowEnded` (`approval`) and becomes a row of session.db `approvals`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from mitmproxy import http

from addons import mcp
from addons.messages import Approval, Route
from addons.proxy.flows import FlowState
from addons.proxy.policy import Verdict
from capsem.approval_wire import Listed

if TYPE_CHECKING:
    from addons.proxy.approval_channel import ApprovalChannel
    from addons.proxy.capture import Capsem
    from capsem.redact import Scrubber

logger = logging.getLogger("addons.proxy.capture")
STATUS = 403


@dataclass(frozen=True, slots=True)
class Answer:
    decision: str
    """approved | denied | timed_out"""
    by: str
    """cli | view | rule | timeout | shutdown | error (capsem could not hold it)"""
    reason: str | None = None
    always: bool = False


@dataclass(slots=True)
class Waiting:
    """One held request, as `capsem approvals` lists it."""

    id: str
    flow_id: str
    rule: str
    method: str
    host: str
    port: int
    path: str
    asked_at: float
    mcp_server: str | None = None
    tool: str | None = None
    arguments: str | None = None
    process: tuple[str | None, int | None] | None = None
    answer: asyncio.Future[Answer] | None = field(default=None, repr=False)

    @property
    def always_key(self) -> tuple[str, ...]:
        """What an `--always` answer covers: the same rule on the same MCP server and tool, or
        on the same method, host, port and path (whatever the arguments or the body)."""
        if self.tool is not None:
            return (self.rule, "mcp", self.mcp_server or "", self.tool)
        return (self.rule, "http", self.method, self.host.lower(), str(self.port), self.path)

    def listed(self, scrub: Any, now: float) -> dict[str, Any]:
        """The JSON the channel lists (path and arguments scrubbed by the one scrubber)."""
        name, pid = self.process or (None, None)
        return asdict(Listed(
            id=self.id, rule=self.rule, method=self.method, host=self.host, port=self.port, path=scrub(self.path),
            waiting_s=round(max(0.0, now - self.asked_at), 1), asked_at=self.asked_at, mcp_server=self.mcp_server,
            tool=self.tool, arguments=scrub(self.arguments) if self.arguments else None, process_name=name, pid=pid,
        ))  # fmt: skip


class Approvals:
    """The requests waiting for a person, and the answers given `--always` for this session."""

    def __init__(self, capture: Capsem) -> None:
        self.capture = capture
        self.waiting: dict[str, Waiting] = {}
        self.always: dict[tuple[str, ...], Answer] = {}
        self.channel: ApprovalChannel | None = None
        self.scrubber: Scrubber | None = None
        """Made at the first listing (the proxy's start does not pay for it)."""
        self.hook_failures = 0

    # -- holding a flow ------------------------------------------------------------------------

    async def hold(self, flow: http.HTTPFlow, state: FlowState, verdict: Verdict,
                   calls: list[mcp.McpRequest], mcp_server: str | None) -> None:  # fmt: skip
        """Wait for the answer to `flow` (mitmproxy awaits this for the flow alone); deny it unless
        approved. A failure here denies the request: the rule asked for a person's yes."""
        call = next((c for c in calls if c.method == "tools/call" and c.tool_name), None)
        head = state.head
        waiting = Waiting(
            id=secrets.token_hex(3), flow_id=flow.id, rule=verdict.rule or "", method=head.method,
            host=head.host, port=head.port, path=head.path, asked_at=time.time(),
            mcp_server=mcp_server if call else None, tool=call.tool_name if call else None,
            arguments=_arguments(call), process=self.capture.connections.process(head.conn),
        )  # fmt: skip
        try:
            answer = await self.wait(waiting, self.capture.policy.ask_timeout_s)
        except Exception as exc:  # as `guarded` does for the other hooks
            self.hook_failures += 1
            logger.warning("capsem: holding %s failed: %r", flow.id, exc, exc_info=True)
            answer = Answer("denied", "error", f"capsem could not hold the request: {exc!r}")
        if answer.reason:  # a person's words, an exception's text: the agent reads it, session.db keeps it
            answer = replace(answer, reason=self._scrubber().scrub(answer.reason))
        state.approval = record_of(waiting, answer)
        if answer.decision != "approved":
            refuse(flow, state.route, calls, verdict.rule or "", answer)

    async def ask_tool(self, flow: http.HTTPFlow, state: FlowState, rule: str, tool: str,
                       arguments: str | None) -> Answer:  # fmt: skip
        """Wait for the answer to a tool call of `flow`'s answer that an `ask` tool rule holds
        (`tool_gate.py`; mitmproxy awaits it for that flow alone). Recorded as the flow's approval
        (the last one, when several calls of one answer are asked). A failure is a refusal."""
        head = state.head
        waiting = Waiting(
            id=secrets.token_hex(3), flow_id=flow.id, rule=rule, method=head.method, host=head.host,
            port=head.port, path=head.path, asked_at=time.time(), tool=tool, arguments=arguments,
            process=self.capture.connections.process(head.conn),
        )  # fmt: skip
        try:
            answer = await self.wait(waiting, self.capture.policy.ask_timeout_s)
        except Exception as exc:
            self.hook_failures += 1
            logger.warning("capsem: holding a tool call of %s failed: %r", flow.id, exc, exc_info=True)
            answer = Answer("denied", "error", f"capsem could not hold the tool call: {exc!r}")
        if answer.reason:
            answer = replace(answer, reason=self._scrubber().scrub(answer.reason))
        state.approval = record_of(waiting, answer)
        return answer

    async def wait(self, waiting: Waiting, timeout: float) -> Answer:
        """The answer: an `--always` one at once, else a person's, else `timed_out` after `timeout`."""
        remembered = self.always.get(waiting.always_key)
        if remembered is not None:
            return Answer(remembered.decision, "rule", remembered.reason)
        waiting.answer = asyncio.get_running_loop().create_future()
        self._open_channel()  # first: a request that cannot be answered is never listed
        self.waiting[waiting.id] = waiting
        # no path or arguments in the log: either may hold a secret (`capsem approvals` shows them scrubbed)
        logger.warning("capsem: policy rule %s asks: %s %s:%s%s waits as %s (capsem approve|deny %s)",
                       waiting.rule, waiting.method, waiting.host, waiting.port,
                       f" tool {waiting.tool}" if waiting.tool else "", waiting.id, waiting.id)  # fmt: skip
        try:
            return await asyncio.wait_for(asyncio.shield(waiting.answer), timeout)
        except TimeoutError:
            return Answer("timed_out", "timeout", f"no answer within {timeout:g} s")
        finally:
            self.waiting.pop(waiting.id, None)

    # -- answering -----------------------------------------------------------------------------

    def decide(self, approval_id: str, approve: bool, by: str, reason: str | None = None,
               always: bool = False) -> str | None:  # fmt: skip
        """Answer a waiting request (on the event loop). Returns an error message, or None."""
        waiting = self.waiting.get(approval_id)
        if waiting is None or waiting.answer is None or waiting.answer.done():
            return f"no request waits as {approval_id!r} (answered, timed out or never asked)"
        answer = Answer("approved" if approve else "denied", by, reason or None, always)
        if always:
            self.always[waiting.always_key] = answer
        waiting.answer.set_result(answer)
        return None

    def listing(self) -> list[dict[str, Any]]:
        scrub = self._scrubber().scrub
        now = time.time()
        return [w.listed(scrub, now) for w in sorted(self.waiting.values(), key=lambda w: w.asked_at)]

    def stop(self) -> None:
        """Shutdown: every waiting request is denied (recorded at once, before its flow is ended)."""
        for waiting in list(self.waiting.values()):
            answer = Answer("denied", "shutdown", "capsem stopped")
            state = self.capture.flows.open.get(waiting.flow_id)
            if state is not None:
                state.approval = record_of(waiting, answer)
            if waiting.answer is not None and not waiting.answer.done():
                waiting.answer.set_result(answer)
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    def _open_channel(self) -> None:
        """The channel opens at the first request held (a session that never asks opens no port)."""
        session = self.capture.session
        if self.channel is None and session is not None:
            from addons.proxy.approval_channel import ApprovalChannel

            self.channel = ApprovalChannel.open(self, session.db_path.parent)

    def _scrubber(self) -> Scrubber:
        if self.scrubber is None:
            from capsem.redact import scrubber_for

            self.scrubber = scrubber_for(self.capture.settings.capture)
        return self.scrubber


def _arguments(call: mcp.McpRequest | None) -> str | None:
    if call is None or not isinstance(call.params, dict) or call.params.get("arguments") is None:
        return None
    return json.dumps(call.params["arguments"], ensure_ascii=False, sort_keys=True)


def record_of(waiting: Waiting, answer: Answer) -> Approval:
    """What the recorder writes into `approvals` for a held request."""
    return Approval(
        id=waiting.id, rule=waiting.rule, asked_at=waiting.asked_at, decided_at=time.time(),
        decision=answer.decision, decided_by=answer.by, reason=answer.reason, always=answer.always,
        mcp_server=waiting.mcp_server, tool=waiting.tool, arguments=waiting.arguments,
    )  # fmt: skip


def refuse(
    flow: http.HTTPFlow, route: Route | None, calls: list[mcp.McpRequest], rule: str, answer: Answer
) -> None:
    """Answer a request that was not approved, in its API's error shape, naming the rule."""
    why = {"denied": f"denied by {answer.by}", "timed_out": "no one answered in time"}.get(
        answer.decision, "denied"
    )
    message = f"capsem policy rule {rule!r} asked a person: {why}" + (
        f" ({answer.reason})" if answer.reason else ""
    )
    ids = [c.raw_id for c in calls if c.id is not None]
    status, body = STATUS, error_body(route, message, answer.decision)
    if ids:  # a JSON-RPC error in a 200: the MCP client shows it for this call and keeps its session
        status, body = 200, {"jsonrpc": "2.0", "id": ids[0], "error": {"code": -32001, "message": message}}
    headers = {"content-type": "application/json", "x-capsem-policy": rule, "x-should-retry": "false"}
    flow.response = http.Response.make(status, json.dumps(body), headers)


def error_body(route: Route | None, message: str, code: str) -> dict[str, Any]:
    """A 403 body in the shape the provider's SDK reads (the generic policy shape otherwise)."""
    protocol, provider = (route.protocol, route.provider) if route is not None else ("", "")
    if provider == "bedrock":
        return {"message": message}
    if protocol == "anthropic":
        return {"type": "error", "error": {"type": "permission_error", "message": message}}
    if protocol == "gemini":
        return {"error": {"code": STATUS, "message": message, "status": "PERMISSION_DENIED"}}
    if protocol == "ollama":
        return {"error": message}
    if route is not None:  # OpenAI Chat Completions and Responses, and everything OpenAI-compatible
        return {"error": {"message": message, "type": "policy_denied", "param": None, "code": code}}
    return {"error": {"type": "policy_denied", "message": message}}
