"""OpenAI Responses over a WebSocket (Codex CLI): turns out of messages, on the recorder thread.

The capture hooks only hand each message over (`WsMessage`) and, when the socket ends, the
flow (`FlowEnded` with `websocket=True`); the recorder feeds them to a `WebSocketTurns` per
socket (pure: messages in, finished turns out) and records each turn as a model call.

A client text message of type `response.create` carries a Responses request body (its fields
at top level, or under `response`). The server answers with the same JSON events as the SSE
stream. Each `response.create` … terminal event (`response.completed|incomplete|failed` or
`error`: `addons/budgets.py: ws_turn_ended`, which mitmdump's budgets use too) is ONE model
call, recorded through the same path as HTTP calls (`Recorder.ws_turn`). A turn still open
when the next `response.create` arrives or the socket ends is recorded as incomplete. A
turn's `status_code` is 200, or the `status` an error event carries (the upgrade's 101 is on
the flow's `net_events` row, whose `conn_type` is ``wss``/``ws``). Turns are written as soon
as they end, pointing at the upgrade flow's `net_events` row, whose id is minted when the first
message arrives and which is written when the socket ends (with the bytes of every message and
the trace of the last turn).
When a tool rule denied a call (`addons/proxy/tool_gate.py`), the agent did not get the model's
messages as they came: each `WsMessage` says which side saw it (`both`, `model`: dropped by the
tool gate, `agent`: sent by it). The turn's body is the model's messages; what the agent received
is kept beside it (`Turn.delivered_body`, the `delivered` body `capsem replay` answers with) when
it differs. The tool gate's last message (the rewritten terminal event) comes after the model's,
so such a turn ends when both sides have ended (`WebSocketTurns.waiting` until then).
A socket dropped without a close frame (code 1006) is an error of the flow only when a turn was
still open: Codex drops its socket that way when it exits, after its last turn completed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from addons.budgets import ws_turn_ended
from addons.framing import SSEEvent
from addons.messages import ABNORMAL_CLOSURE
from addons.providers._common import as_int, load_json_object
from addons.providers.openai_responses import OpenAIResponsesStream, parse_request_object
from addons.records import RequestInfo, ResponseSummary

__all__ = ["Turn", "WebSocketTurns", "close_error", "request_of"]

PROTOCOL = "openai_responses"

NORMAL_CLOSES = frozenset({1000, 1001, 1005})
"""Close codes that end a socket as it should: normal, going away, no status given."""


def close_error(code: int | None, reason: str | None, turn_open: bool) -> str | None:
    """The error a WebSocket's close makes of its flow, None for none; the one place it is decided.
    A drop without a close frame (1006) is an error only while a turn is open: Codex drops its
    socket that way when it exits, after its last turn completed."""
    if code is None or code in NORMAL_CLOSES or (code == ABNORMAL_CLOSURE and not turn_open):
        return None
    return f"websocket closed with code {code}" + (
        f": {reason}" if reason and code != ABNORMAL_CLOSURE else ""
    )


@dataclass
class Turn:
    """One finished (or abandoned) request/response pair of a WebSocket."""

    request: RequestInfo
    request_body: bytes
    """The client's `response.create` message as it crossed the proxy."""
    summary: ResponseSummary
    started: float
    ended: float
    first_content: float | None = None
    request_bytes: int = 0
    response_bytes: int = 0
    status: int = 200
    response_body: bytes = b""
    """The payloads of the server's messages of the turn, as they crossed the proxy, one after the other."""
    chunks: list[tuple[int, int]] = field(default_factory=list)
    """Each server message's end in `response_body` (with the newline after it) and its ms after the
    request (`response_chunks`)."""
    delivered_body: bytes | None = None
    """The messages the agent received, one a line, when they were not the model's (a tool call
    denied and replaced by the tool gate); None when it got the model's."""


def request_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The Responses request of a `response.create` message (top-level fields or `response`)."""
    inner = obj.get("response")
    if isinstance(inner, dict):
        return inner
    return {k: v for k, v in obj.items() if k != "type"}


@dataclass
class _Open:
    request: RequestInfo
    request_body: bytes
    started: float
    interp: OpenAIResponsesStream = field(default_factory=OpenAIResponsesStream)
    first_content: float | None = None
    response_bytes: int = 0
    status: int = 200
    last_at: float | None = None
    request_bytes: int = 0
    responses: list[bytes] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    delivered: list[bytes] = field(default_factory=list)
    """The server messages the agent received (`both` and `agent` sides)."""
    diverged: bool = False
    """The tool gate dropped a message of the model's: the agent's messages may differ."""
    delivered_ended: bool = False
    model_ended: float | None = None
    """When the model's terminal event came (the turn then waits for the agent's)."""


class WebSocketTurns:
    """Pure: the messages of one WebSocket in, finished turns out. Never raises on bad input."""

    def __init__(self) -> None:
        self.current: _Open | None = None
        self.messages = 0
        self.ignored = 0

    def message(
        self, from_client: bool, content: bytes, is_text: bool, at: float, side: str = "both"
    ) -> list[Turn]:
        self.messages += 1
        try:
            return self._message(from_client, content, at, side)
        except Exception:
            self.ignored += 1
            return []

    @property
    def waiting(self) -> bool:
        """The model's side of the open turn ended; the tool gate's messages to the agent are still
        to come (the turn is recorded, and its cost counted, when they have)."""
        return self.current is not None and self.current.model_ended is not None

    def close(self, at: float, error: str | None = None) -> list[Turn]:
        """The socket ended: an open turn is recorded as incomplete."""
        cut = not self.waiting
        turn = self._finish(at)
        if turn is not None and cut and turn.summary.error_message is None:
            turn.summary.error_message = error or "connection closed before the response ended"
        return [turn] if turn is not None else []

    def _message(self, from_client: bool, content: bytes, at: float, side: str) -> list[Turn]:
        if from_client:
            obj = load_json_object(content)
            if obj is None or obj.get("type") != "response.create":
                self.ignored += 1
                return []
            cut = not self.waiting
            done = self._finish(at)
            if done is not None and cut and done.summary.error_message is None:
                done.summary.error_message = "a new response.create arrived before the response ended"
            body = request_of(obj)
            request = parse_request_object(body)
            request.stream = True
            self.current = _Open(request, content, at, request_bytes=len(content))
            return [done] if done is not None else []
        turn = self.current
        if turn is None:
            self.ignored += 1
            return []
        ended = ws_turn_ended(content)  # the budgets in mitmdump decide it with the same function
        if side != "model":
            turn.delivered.append(content)
            turn.delivered_ended = turn.delivered_ended or ended
        if side == "agent":
            done = self._finish(at) if turn.model_ended is not None and turn.delivered_ended else None
            return [done] if done is not None else []
        turn.diverged = turn.diverged or side == "model"
        turn.response_bytes += len(content)
        turn.responses.append(content)
        turn.times.append(at)
        turn.last_at = at
        text = content.decode("utf-8", "replace")
        turn.interp.event(SSEEvent(None, text))
        if turn.first_content is None and turn.interp.summary.content_started:
            turn.first_content = at
        if ended:
            obj = load_json_object(content)
            status = as_int(obj.get("status")) if obj is not None and obj.get("type") == "error" else None
            if status is not None and 100 <= status <= 599:
                turn.status = status
            turn.model_ended = at
            if turn.diverged and not turn.delivered_ended:
                return []  # what the tool gate sends the agent instead is still to come
            done = self._finish(at)
            return [done] if done is not None else []
        return []

    def _finish(self, at: float) -> Turn | None:
        turn, self.current = self.current, None
        if turn is None:
            return None
        summary = turn.interp.finish()
        body, delivered = b"\n".join(turn.responses), b"\n".join(turn.delivered)  # NDJSON: one message a line
        return Turn(
            request=turn.request,
            request_body=turn.request_body,
            summary=summary,
            started=turn.started,
            ended=turn.model_ended if turn.model_ended is not None else at,
            first_content=turn.first_content,
            request_bytes=turn.request_bytes,
            response_bytes=turn.response_bytes,
            status=turn.status,
            response_body=body,
            chunks=_ends(turn.responses, turn.times, turn.started),
            delivered_body=delivered if turn.diverged and delivered != body else None,
        )


def _ends(messages: list[bytes], times: list[float], started: float) -> list[tuple[int, int]]:
    """(end with the newline after it, ms after `started`) of each message of a turn's body."""
    out, end = [], 0
    for n, (message, at) in enumerate(zip(messages, times, strict=True)):
        end += len(message) + (n < len(messages) - 1)
        out.append((end, max(0, round((at - started) * 1000))))
    return out
