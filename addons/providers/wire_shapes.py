"""Typed shapes of the stream events that make most of a response, for each provider's fast path.

msgspec decodes an event into one of these Structs several times faster than into a dict: it
builds only the fields a reader uses and skips every other key in C. A reader decodes an event
into its shape first and falls back to its general path (the whole document decoded as a dict)
for anything else: an event of another type, an error, a value of a type the shape does not
allow (`msgspec.ValidationError`), JSON msgspec refuses. So a shape only says which fields exist;
fields whose values the readers check themselves are typed `Any` (absent and null are both None,
as `dict.get` gives), so the fast path reads exactly what the general path reads.

A usage object is kept as its raw JSON text (`msgspec.Raw`, empty when absent): the collector
decodes only the last report (`addons.providers.collect.Collector.finish`).

The Structs are `gc=False`: they hold decoded JSON only, which never makes a reference cycle.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "AnthropicDelta",
    "AnthropicDeltaEvent",
    "ChatChoice",
    "ChatChunk",
    "ChatDelta",
    "GeminiCandidate",
    "GeminiChunk",
    "GeminiContent",
    "GeminiPart",
    "ResponsesDeltaEvent",
    "decode_anthropic_delta",
    "decode_chat_chunk",
    "decode_gemini_chunk",
    "decode_responses_delta",
    "is_object",
]


def is_object(raw: msgspec.Raw) -> bool:
    """Whether raw JSON text (as msgspec keeps it: from the value's first byte) is an object."""
    return memoryview(raw)[:1] == b"{"


# -- Anthropic Messages: content_block_delta -------------------------------------------------


class AnthropicDelta(msgspec.Struct, gc=False):
    """The fields of a content_block_delta's `delta` the reader uses."""

    type: Any = None
    text: Any = None
    thinking: Any = None
    partial_json: Any = None


class AnthropicDeltaEvent(msgspec.Struct, gc=False):
    """Any stream event read as a content_block_delta (the reader checks `type`)."""

    type: Any = None
    index: Any = None
    delta: AnthropicDelta | None = None


decode_anthropic_delta = msgspec.json.Decoder(AnthropicDeltaEvent).decode


# -- OpenAI Chat Completions: chat.completion.chunk ------------------------------------------


class ChatDelta(msgspec.Struct, gc=False):
    """The fields of a choice's `delta` the reader uses."""

    content: Any = None
    reasoning_content: Any = None
    reasoning: Any = None
    refusal: Any = None
    tool_calls: Any = None


class ChatChoice(msgspec.Struct, gc=False):
    index: Any = None
    delta: ChatDelta | None = None
    finish_reason: Any = None


class ChatChunk(msgspec.Struct, gc=False):
    """A chunk; `error` is UNSET when absent (its presence alone sends an event the general way)."""

    id: Any = None
    model: Any = None
    object: Any = None
    error: Any = msgspec.UNSET
    usage: msgspec.Raw = msgspec.Raw()
    choices: list[ChatChoice] | None = None


decode_chat_chunk = msgspec.json.Decoder(ChatChunk).decode


# -- OpenAI Responses: text, reasoning and tool argument deltas ------------------------------


class ResponsesDeltaEvent(msgspec.Struct, gc=False):
    """Any stream event read as a text, reasoning or tool argument delta (the reader checks `type`)."""

    type: Any = None
    item_id: Any = None
    output_index: Any = None
    content_index: Any = None
    summary_index: Any = None
    delta: Any = None


decode_responses_delta = msgspec.json.Decoder(ResponsesDeltaEvent).decode


# -- Gemini: GenerateContentResponse ---------------------------------------------------------


class GeminiPart(msgspec.Struct, gc=False):
    """The fields of a part the reader uses."""

    text: Any = None
    thought: Any = None
    functionCall: Any = None


class GeminiContent(msgspec.Struct, gc=False):
    parts: list[GeminiPart] | None = None


class GeminiCandidate(msgspec.Struct, gc=False):
    content: GeminiContent | None = None
    finishReason: Any = None


class GeminiChunk(msgspec.Struct, gc=False):
    """A chunk; an error or a Code Assist envelope (`response`) sends it the general way."""

    candidates: list[GeminiCandidate] | None = None
    usageMetadata: msgspec.Raw = msgspec.Raw()
    responseId: Any = None
    modelVersion: Any = None
    error: Any = None
    response: Any = None


decode_gemini_chunk = msgspec.json.Decoder(GeminiChunk).decode
