"""The interface every provider protocol parser implements, and the guarded base they share.

A protocol parser is pure: bytes or framed events in, records out. It never sees a flow and
never raises on bad input; problems are counted in `ResponseSummary.parse_errors` or
reported in `RequestInfo.error`. A provider module supplies only wire knowledge: a request
parser, a function turning a whole body into neutral events, and a `WireReader` for
streams; `addons.providers.collect` builds every summary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from addons.framing import SSEEvent
from addons.providers.collect import Stream, WireReader, collect
from addons.providers.events import LlmEvent, SummaryRules
from addons.records import RequestInfo, ResponseSummary


class StreamInterpreter(Protocol):
    """Accumulates one streamed response from its framed events."""

    @property
    def summary(self) -> ResponseSummary:
        """The summary so far (`content_started` is live)."""

    def event(self, ev: SSEEvent) -> None:
        """Consume one event; never raises."""

    def feed(self, evs: list[SSEEvent]) -> None:
        """`event` for each of `evs`, in order."""

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
    """A ProtocolParser built from a provider's wire knowledge, with entry points that never raise.

    Subclasses set `name`, `rules` and (as `staticmethod`s or classes) `request_fn`,
    `body_fn` (whole body and status -> neutral events) and `wire_cls` (a fresh `WireReader`
    per stream). A bug in them becomes `RequestInfo.error` or a counted parse error instead
    of an exception reaching mitmproxy.
    """

    name: str
    rules: SummaryRules
    request_fn: Callable[[bytes], RequestInfo]
    body_fn: Callable[[bytes, int], Iterable[LlmEvent]]
    wire_cls: Callable[[], WireReader]

    def parse_request(self, body: bytes) -> RequestInfo:
        try:
            return self.request_fn(body)
        except Exception as exc:  # a bug must never reach mitmproxy
            return RequestInfo(error=f"request parser failed: {exc!r}")

    def parse_response(self, body: bytes, status: int) -> ResponseSummary:
        try:
            return self.read_response(body, status)
        except Exception as exc:
            return ResponseSummary(parse_errors=1, error_message=f"response parser failed: {exc!r}")

    def read_response(self, body: bytes, status: int) -> ResponseSummary:
        """`parse_response` without the guard (tests use it to see the bugs the guard would hide)."""
        return collect(self.body_fn(body, status), self.rules, body=True)

    def stream(self) -> Stream:
        return Stream(self.wire_cls(), self.rules)
