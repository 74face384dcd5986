"""The neutral events every provider parser emits: one small vocabulary for all wire formats.

A provider module knows its wire format (which JSON field means what) and turns each SSE
event, NDJSON line or whole JSON body into these events; `addons.providers.collect` is the
one place that builds a `ResponseSummary` from them. A streamed response and the same answer
as one JSON body become the same events, so both give the same summary by construction.

Text and thinking arrive in *parts*: pieces with the same `part` key are concatenated as
sent, distinct non-empty parts are joined with the protocol's separator (see
`SummaryRules`). Tool calls are addressed by a `key` the provider chooses; a call's
position in the summary is the order of its first `ToolCallStart`.

The events are msgspec Structs rather than dataclasses: frozen and compared by value the
same way, but built several times faster, which counts at one or two events per delta.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from addons.records import Usage

__all__ = [
    "PARSE_ERROR",
    "UNKNOWN_EVENT",
    "Done",
    "Error",
    "LlmEvent",
    "Meta",
    "ParseError",
    "Stop",
    "SummaryRules",
    "TextDelta",
    "TextDone",
    "ThinkingDelta",
    "ThinkingDone",
    "ToolCallArguments",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "UnknownEvent",
    "UsageReport",
]


class _Event(msgspec.Struct, frozen=True, gc=False):
    """Base of the neutral events (immutable, never part of a reference cycle)."""


class Meta(_Event):
    """The response's id and model; for each, the first non-empty value wins."""

    message_id: str | None = None
    model: str | None = None


class TextDelta(_Event):
    """A piece of answer text, appended to its part (an empty piece changes nothing)."""

    text: str
    part: Any = None


class TextDone(_Event):
    """The whole text of a part: replaces what its pieces said when it differs (deltas may be lost)."""

    text: str
    part: Any = None


class ThinkingDelta(_Event):
    """A piece of thinking (reasoning) text, appended to its part."""

    text: str
    part: Any = None


class ThinkingDone(_Event):
    """The whole thinking text of a part (see `TextDone`)."""

    text: str
    part: Any = None


class ToolCallStart(_Event):
    """A tool call starts; for a key already started, fills in its id (if given) and name (if unset).

    An empty `call_id` is replaced at the end by ``<call_id_prefix>_<name>_<position>``.
    """

    key: Any
    call_id: str = ""
    name: str = ""


class ToolCallDelta(_Event):
    """A piece of a call's arguments (raw JSON text), appended."""

    key: Any
    arguments: str


class ToolCallArguments(_Event):
    """A call's whole arguments, replacing the pieces received so far."""

    key: Any
    arguments: str


class ToolCallEnd(_Event):
    """A call is closed: `complete` says whether its arguments are whole (calls never ended are not)."""

    key: Any
    complete: bool = True


class UsageReport(_Event):
    """The provider's usage object as received and its normalizer; the last report wins.

    `raw` may also be the `msgspec.Raw` JSON text of an object (a typed reader's): only the last
    report's is decoded, by the collector.

    Only the last one is normalized (at the end), so providers that repeat a running total on
    every chunk pay nothing for it.
    """

    raw: Any
    normalize: Callable[[Any], Usage]


class Stop(_Event):
    """The provider's stop (finish) reason; the last one wins."""

    reason: str


class Error(_Event):
    """An error: an error body, or an error event mid-stream (which leaves a stream incomplete)."""

    type: str | None
    message: str | None


class Done(_Event):
    """The response says it ended (a terminal event, a finish reason, a whole body).

    `final` means nothing after it belongs to the response: further wire events are ignored.
    """

    final: bool = True


class ParseError(_Event):
    """A wire event, line or field that could not be understood (skipped, counted)."""


class UnknownEvent(_Event):
    """A well-formed event of a type this parser does not know (skipped, counted)."""


PARSE_ERROR = ParseError()
UNKNOWN_EVENT = UnknownEvent()

LlmEvent = (
    Meta
    | TextDelta
    | TextDone
    | ThinkingDelta
    | ThinkingDone
    | ToolCallStart
    | ToolCallDelta
    | ToolCallArguments
    | ToolCallEnd
    | UsageReport
    | Stop
    | Error
    | Done
    | ParseError
    | UnknownEvent
)


class SummaryRules(msgspec.Struct, frozen=True):
    """What differs between protocols once their events are neutral."""

    call_id_prefix: str
    """Prefix of the ids given to tool calls that came without one (``anthropic``, ``gemini``...)."""
    part_sep: str = ""
    """Joins distinct text (and thinking) parts: "" for protocols that only ever send one part."""
