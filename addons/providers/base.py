"""The interface every provider protocol parser implements.

A protocol parser is pure: bytes or framed events in, records out. It never sees a flow and
never raises on bad input; problems are counted in `ResponseSummary.parse_errors` or
reported in `RequestInfo.error`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from addons.framing import SSEEvent
from addons.records import RequestInfo, ResponseSummary


class StreamInterpreter(Protocol):
    """Accumulates one streamed response from its framed events."""

    summary: ResponseSummary

    def event(self, ev: SSEEvent) -> None:
        """Consume one event; never raises."""

    def finish(self) -> ResponseSummary:
        """End of stream: close open tool calls, decide `complete`, return the summary."""


class ProtocolParser(Protocol):
    """One wire protocol (Anthropic Messages, OpenAI Chat Completions, ...)."""

    name: str
    """Protocol name stored in `model_calls.protocol`, e.g. ``anthropic``, ``openai_chat``."""

    def parse_request(self, body: bytes) -> RequestInfo:
        """Parse a (decoded) request body; never raises."""

    def parse_response(self, body: bytes, status: int) -> ResponseSummary:
        """Parse a whole (decoded) non-streamed response body, success or error; never raises."""

    def stream(self) -> StreamInterpreter:
        """A fresh interpreter for one streamed response."""


class GuardedParser:
    """A ProtocolParser built from three pure functions, with entry points that never raise.

    Subclasses set `name` and the class attributes `request_fn`, `response_fn`, `stream_cls`
    (use `staticmethod` for the functions); a bug in them becomes `RequestInfo.error` or a
    counted parse error instead of an exception reaching mitmproxy.
    """

    name: str
    request_fn: Callable[[bytes], RequestInfo]
    response_fn: Callable[[bytes, int], ResponseSummary]
    stream_cls: Callable[[], StreamInterpreter]

    def parse_request(self, body: bytes) -> RequestInfo:
        try:
            return self.request_fn(body)
        except Exception as exc:  # a bug must never reach mitmproxy
            return RequestInfo(error=f"request parser failed: {exc!r}")

    def parse_response(self, body: bytes, status: int) -> ResponseSummary:
        try:
            return self.response_fn(body, status)
        except Exception as exc:
            return ResponseSummary(parse_errors=1, error_message=f"response parser failed: {exc!r}")

    def stream(self) -> StreamInterpreter:
        return self.stream_cls()
