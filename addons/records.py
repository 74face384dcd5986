"""Normalized records that provider parsers produce and the recorder's builders turn into rows.

Parsers are pure: they take bytes and return these dataclasses, never flows. One request
gives a `RequestInfo`; one response (streamed or not) gives a `ResponseSummary`. The recorder
(`addons/recorder/build.py`) joins both with the flow's timing into `model_calls`, `tool_calls`
and `tool_responses` rows.

Usage follows the session.db contract (`model_calls` columns): `input_tokens` counts every input
token (cached ones included), `output_tokens` every billed output token (reasoning included), and
the breakdown plus the provider's raw usage object go to `Usage.details()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from addons.messages import CUT_MARGIN

ERROR_MESSAGE_BYTES = 2048
"""What `model_calls.error_message` keeps of a provider's error text: the recorder cuts a longer one
there, scrubbed across the cut (`cap_text`). A parser that bounds an error text it reads (a
plain-text error event, an error page) keeps `ERROR_TEXT_KEPT`: the cut and the margin past it."""
ERROR_TEXT_KEPT = ERROR_MESSAGE_BYTES + CUT_MARGIN


@dataclass
class ToolResult:
    """A tool result the agent sends back to the model (from the *request* of the next turn)."""

    call_id: str
    content: str
    """Text of the result: a string, or text blocks joined with newlines, or a placeholder
    such as ``[image]`` for non-text blocks."""
    is_error: bool = False
    tool_name: str | None = None


@dataclass
class ToolCall:
    """A tool call the model asked for, assembled from stream deltas or a JSON body."""

    index: int
    """Position of the call within the response (0-based, in output order)."""
    call_id: str
    name: str
    arguments: str = ""
    """Arguments as the raw JSON text the provider sent (concatenated deltas, unparsed)."""
    complete: bool = True
    """False when the stream ended before the call was closed (arguments may be invalid JSON)."""


@dataclass
class RequestInfo:
    """What a model-call request body tells us."""

    model: str | None = None
    stream: bool = False
    system_prompt: str | None = None
    messages_count: int = 0
    tools_count: int = 0
    """Number of tools *declared* in the request."""
    tool_results: list[ToolResult] = field(default_factory=list)
    """Only the results that are new in this request (the trailing ones), in order."""
    prompt_text: str = ""
    """All prompt text (system, messages, tool definitions) for token estimation."""
    error: str | None = None
    """Why the body could not be parsed, when it could not."""


@dataclass
class Usage:
    """Token usage normalized per the contract; `None` means the provider did not say."""

    input_tokens: int | None = None
    """All input tokens, cached reads and cache writes included."""
    output_tokens: int | None = None
    """All billed output tokens, reasoning included."""
    cache_read: int | None = None
    cache_write: int | None = None
    """All cache-write tokens (5-minute and 1-hour)."""
    cache_write_1h: int | None = None
    """Part of `cache_write` written with a 1-hour TTL (Anthropic)."""
    reasoning: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Other provider counters (server tool use, audio tokens, ...)."""
    raw: Any = None
    """The provider's own usage object exactly as received (last one for streams)."""
    estimated: list[str] = field(default_factory=list)
    """Names of the fields that were estimated with a tokenizer rather than reported."""

    def details(self) -> dict[str, Any]:
        """The `usage_details` JSON object: breakdown, extras, raw, estimation flags."""
        out: dict[str, Any] = {}
        for key in ("cache_read", "cache_write", "cache_write_1h", "reasoning"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        out.update(self.extra)
        if self.estimated:
            out["estimated"] = list(self.estimated)
        out["raw"] = self.raw
        return out


@dataclass
class ResponseSummary:
    """Everything one model response said, streamed or not."""

    message_id: str | None = None
    model: str | None = None
    text: str = ""
    thinking: str = ""
    stop_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    tool_calls: list[ToolCall] = field(default_factory=list)
    complete: bool = False
    """True when the terminal event (or a whole JSON body) was seen."""
    error_type: str | None = None
    """Provider error type (HTTP error body or mid-stream error event), e.g. ``overloaded_error``."""
    error_message: str | None = None
    """Cut to `ERROR_MESSAGE_BYTES` when stored."""
    content_started: bool = False
    """Set as soon as the first text, thinking or tool-call content arrives (time to first token)."""
    parse_errors: int = 0
    """Events or lines that could not be understood (skipped, counted)."""
    unknown_events: int = 0
