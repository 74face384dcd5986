"""Anthropic Messages API (`POST /v1/messages`): requests, JSON bodies and SSE streams.

Protocol quirks handled:

- `system` is a string or a list of text blocks (joined with newlines).
- Agents resend the whole history every turn, so only the `tool_result` blocks in the user
  messages after the last assistant message are new results; their tool names come from the
  `tool_use` blocks of that assistant message.
- Stream events are dispatched on the JSON `type` (the `event:` name when `type` is absent);
  Anthropic pads JSON with trailing spaces and formats `ping`/`error` differently, which the
  JSON parser does not care about. Pings are skipped, unknown event types are counted.
- `message_start.usage.output_tokens` is a placeholder, and `message_delta.usage` is
  cumulative: fields are assigned over the `message_start` usage, never added. Output tokens
  are only trusted once a `message_delta` reported them.
- Whole-at-start blocks: `redacted_thinking` (recorded as a ``[redacted thinking]`` line),
  server tool results (ignored), `tool_use` whose `input` is given whole in
  `content_block_start`. Tool arguments are the raw `partial_json` text concatenated; a call
  that streamed only "" gets "{}". A tool block never stopped (max_tokens inside a call)
  stays `complete=False`.
- A mid-stream `error` event (HTTP status still 200) leaves the stream incomplete.

Text rule (the same for bodies and streams, so both give identical text): consecutive text
blocks are concatenated as-is ("") because citations split one sentence into several blocks;
text separated by any other block (a tool call, a search result, thinking) starts on a new line.
Each thinking block (a redacted one included) starts on a new line: non-empty thinking blocks
are joined with "\\n".

Over 400 lines on purpose: one protocol's wire knowledge (requests, stream events, whole bodies,
errors, server tools) in one file, as for every provider.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import msgspec

from addons.framing import SSEEvent
from addons.providers._common import (
    as_int,
    as_str,
    body_object,
    content_text,
    decode_json,
    dumps_compact,
    error_fields,
    last_assistant,
    load_json,
    request_object,
)
from addons.providers.base import GuardedParser
from addons.providers.collect import Collector
from addons.providers.events import (
    PARSE_ERROR,
    UNKNOWN_EVENT,
    Done,
    Error,
    LlmEvent,
    Meta,
    Stop,
    SummaryRules,
    TextDelta,
    ThinkingDelta,
    ToolCallArguments,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageReport,
)
from addons.providers.wire_shapes import decode_anthropic_delta
from addons.records import ERROR_TEXT_KEPT, RequestInfo, ToolResult, Usage

__all__ = ["REDACTED_THINKING", "RULES", "AnthropicEvents", "AnthropicMessages", "body_events",
           "usage_from_anthropic"]  # fmt: skip

RULES = SummaryRules(call_id_prefix="anthropic", part_sep="\n")

REDACTED_THINKING = "[redacted thinking]"
_TOOL_BLOCKS = ("tool_use", "server_tool_use", "mcp_tool_use")  # tuples: JSON values may be unhashable
_IGNORED_DELTAS = ("signature_delta", "citations_delta")


def usage_from_anthropic(raw: Any, *, output_reported: bool = True) -> Usage:
    """Normalize an Anthropic `usage` object (the one place that knows its semantics).

    Args:
        raw: the provider's usage object, kept verbatim in `Usage.raw`.
        output_reported: False while only `message_start` spoke, whose `output_tokens` is a
            placeholder: `output_tokens` then stays None.
    """
    if not isinstance(raw, dict):
        return Usage(raw=raw)
    base = as_int(raw.get("input_tokens"))
    cache_read = as_int(raw.get("cache_read_input_tokens"))
    cache_write = as_int(raw.get("cache_creation_input_tokens"))
    creation = raw.get("cache_creation")
    write_1h = None
    if isinstance(creation, dict):
        write_1h = as_int(creation.get("ephemeral_1h_input_tokens"))
        if cache_write is None:
            parts = [as_int(creation.get("ephemeral_5m_input_tokens")), write_1h]
            known = [p for p in parts if p is not None]
            cache_write = sum(known) if known else None
    inputs = [n for n in (base, cache_read, cache_write) if n is not None]
    details = raw.get("output_tokens_details")
    extra: dict[str, Any] = {}
    server = raw.get("server_tool_use")
    if isinstance(server, dict):
        for key, value in server.items():
            count = as_int(value)
            if count is not None:
                extra[str(key)] = count
    tier = as_str(raw.get("service_tier"))
    if tier:
        extra["service_tier"] = tier
    return Usage(
        input_tokens=sum(inputs) if inputs else None,
        output_tokens=as_int(raw.get("output_tokens")) if output_reported else None,
        cache_read=cache_read,
        cache_write=cache_write,
        cache_write_1h=write_1h,
        reasoning=as_int(details.get("thinking_tokens")) if isinstance(details, dict) else None,
        extra=extra,
        raw=raw,
    )


# -- requests -------------------------------------------------------------------------------


def _system_text(system: Any) -> str | None:
    if system is None or isinstance(system, str):
        return system
    return content_text(system, placeholders=False) or None


def _message_text(content: Any) -> str:
    """All the text of one message (for token estimation), tool inputs and results included."""
    if not isinstance(content, list):
        return content_text(content, placeholders=False)
    parts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            parts.append(block["thinking"])
        elif kind in _TOOL_BLOCKS:
            parts.append(f"{block.get('name') or ''} {dumps_compact(block.get('input'))}")
        elif kind == "tool_result":
            parts.append(content_text(block.get("content"), placeholders=False))
    return "\n".join(p for p in parts if p)


def _trailing_results(messages: list[Any]) -> list[ToolResult]:
    """The `tool_result` blocks of the user messages after the last assistant message."""
    last = last_assistant(messages)
    names: dict[str, str] = {}
    if last >= 0 and isinstance(messages[last].get("content"), list):
        for block in messages[last]["content"]:
            if isinstance(block, dict) and as_str(block.get("id")) and as_str(block.get("name")):
                names[block["id"]] = block["name"]
    results: list[ToolResult] = []
    for msg in messages[last + 1 :]:
        if not (isinstance(msg, dict) and msg.get("role") == "user" and isinstance(msg.get("content"), list)):
            continue
        for block in msg["content"]:
            if not (isinstance(block, dict) and block.get("type") == "tool_result"):
                continue
            call_id = block.get("tool_use_id") if isinstance(block.get("tool_use_id"), str) else ""
            results.append(
                ToolResult(
                    call_id=call_id,
                    content=content_text(block.get("content")),
                    is_error=block.get("is_error") is True,
                    tool_name=names.get(call_id),
                )
            )
    return results


def _parse_request(body: bytes) -> RequestInfo:
    obj, info = request_object(body)
    if obj is None:
        return info
    info.model = as_str(obj.get("model"))
    info.stream = obj.get("stream") is True
    info.system_prompt = _system_text(obj.get("system"))
    messages = obj.get("messages") if isinstance(obj.get("messages"), list) else []
    tools = obj.get("tools") if isinstance(obj.get("tools"), list) else []
    info.messages_count = len(messages)
    info.tools_count = len(tools)
    info.tool_results = _trailing_results(messages)
    parts = [info.system_prompt or ""]
    parts += [_message_text(m.get("content")) for m in messages if isinstance(m, dict)]
    parts.append(dumps_compact(tools) if tools else "")
    info.prompt_text = "\n".join(p for p in parts if p)
    return info


# -- responses ------------------------------------------------------------------------------

_PLACEHOLDER_OUTPUT = partial(usage_from_anthropic, output_reported=False)
_PARSE_ERROR = (PARSE_ERROR,)
_UNKNOWN = (UNKNOWN_EVENT,)


class _Block:
    """A content block of the response; for a tool call, its key and the state of its arguments."""

    __slots__ = ("call", "closed", "filled", "from_start")

    def __init__(self, call: int | None = None, given: str | None = None) -> None:
        self.call = call
        """Key of the tool call, None for other blocks."""
        self.from_start = given is not None
        """The arguments so far are the `input` given whole at the start (replaced by any delta)."""
        self.filled = bool(given)
        """Some non-empty argument text arrived (else the arguments are "{}")."""
        self.closed = False


class AnthropicEvents:
    """Reads one Anthropic stream (SSE, or Bedrock event-stream frames) into neutral events.

    `block_start` and `close_block` also read the content blocks of a whole body, so that a
    body and a stream share one reading of blocks (and give the same summary).
    """

    NATIVE_KIND = 1
    """The compiled framer reads this protocol's text deltas itself (`capsem.native`)."""

    def __init__(self) -> None:
        self._blocks: dict[int, _Block] = {}
        self._calls = 0
        self._text_part = 0  # any block but text starts a new text part
        self._thinking_part = 0  # each thinking block is a part
        self._last_thinking: int | None = None
        self._raw_usage: dict[str, Any] | None = None
        self._output_reported = False

    def native_run(self, collector: Collector, texts: list[str]) -> None:
        """A run of non-empty text deltas the compiled framer read: the part the next text delta
        belongs to (what `events` gives a `TextDelta`)."""
        collector.add_texts(texts, self._text_part)

    def events(self, ev: SSEEvent) -> Sequence[LlmEvent]:
        try:
            obj = decode_anthropic_delta(ev.data)
        except msgspec.DecodeError:  # not a delta event's shape (or not JSON)
            return self.general(ev)
        delta = obj.delta
        if obj.type != "content_block_delta" or delta is None:
            return self.general(ev)
        kind = delta.type
        if kind == "text_delta":  # most events: straight there
            text = delta.text
            return (TextDelta(text, self._text_part),) if type(text) is str and text else ()
        return self._delta(
            obj.index, kind, delta.thinking if kind == "thinking_delta" else delta.partial_json
        )

    def general(self, ev: SSEEvent) -> Sequence[LlmEvent]:
        """Any event: the whole document decoded, dispatched on its `type` (`events` reads the
        content_block_delta events, most of a stream, into `AnthropicDeltaEvent` first)."""
        try:
            obj = decode_json(ev.data)
        except Exception:  # msgspec refuses it: load_json decides
            obj = load_json(ev.data)
        if type(obj) is not dict:
            out: list[LlmEvent] = []
            if ev.event == "error":  # a proxy's plain-text error event still ends the answer
                out.append(Error("error", ev.data.strip()[:ERROR_TEXT_KEPT] or None))
            if ev.event != "ping" and ev.data.strip() != "[DONE]":
                out.append(PARSE_ERROR)
            return out
        kind = obj.get("type")
        if kind == "content_block_delta":  # most events: straight there
            return self._block_delta(obj)
        handler = _HANDLERS.get(kind if isinstance(kind, str) else ev.event or "")
        return _UNKNOWN if handler is None else handler(self, obj)

    def end(self) -> Sequence[LlmEvent]:
        return ()  # tool calls never stopped simply stay incomplete

    # -- content blocks (streams and bodies) ----------------------------------------------

    def block_start(self, index: int, block: dict[str, Any]) -> list[LlmEvent]:
        """A content block starts (replacing any block at the same index, left incomplete)."""
        kind = block.get("type")
        if kind != "text":
            self._text_part += 1
        state = _Block()
        out: list[LlmEvent] = []
        if kind == "text":
            text = block.get("text")
            if isinstance(text, str) and text:
                out.append(TextDelta(text, self._text_part))
        elif kind == "thinking":
            out += self._thinking(index, block.get("thinking"))
        elif kind == "redacted_thinking":
            out += self._thinking(index, REDACTED_THINKING)
        elif kind in _TOOL_BLOCKS:
            key, self._calls = self._calls, self._calls + 1
            name = block.get("name")
            out.append(
                ToolCallStart(key, as_str(block.get("id")) or "", name if isinstance(name, str) else "")
            )
            given = block.get("input")
            arguments = dumps_compact(given) if given else None
            if arguments is not None:
                out.append(ToolCallDelta(key, arguments))
            state = _Block(key, arguments)
        self._blocks[index] = state
        return out

    def close_block(self, index: int) -> Sequence[LlmEvent]:
        """A block stops: a tool call in it is whole (and "{}" when it streamed nothing)."""
        block = self._blocks.get(index)
        if block is None or block.call is None or block.closed:
            return ()
        block.closed = True
        if block.filled:
            return (ToolCallEnd(block.call),)
        return ToolCallArguments(block.call, "{}"), ToolCallEnd(block.call)

    def _thinking(self, index: int, text: Any) -> Sequence[LlmEvent]:
        if not (isinstance(text, str) and text):
            return ()
        if index != self._last_thinking:
            self._thinking_part += 1
            self._last_thinking = index
        return (ThinkingDelta(text, self._thinking_part),)

    # -- stream events --------------------------------------------------------------------

    @staticmethod
    def _index(obj: dict[str, Any]) -> int:
        index = as_int(obj.get("index"))
        return index if index is not None else -1

    def _block_delta(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        delta = obj.get("delta")
        if type(delta) is not dict:
            return _PARSE_ERROR
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            return (TextDelta(text, self._text_part),) if type(text) is str and text else ()
        field = "thinking" if kind == "thinking_delta" else "partial_json"
        return self._delta(obj.get("index"), kind, delta.get(field))

    def _delta(self, index: Any, kind: Any, value: Any) -> Sequence[LlmEvent]:
        """A content_block_delta other than text: `value` is its `thinking` for a thinking_delta,
        its `partial_json` for anything else; `index` as sent."""
        index = as_int(index)
        index = index if index is not None else -1
        if kind == "thinking_delta":
            return self._thinking(index, value)
        if kind == "input_json_delta":
            block = self._blocks.get(index)
            piece = value
            if block is None or block.call is None or not isinstance(piece, str):
                return _PARSE_ERROR
            if block.closed or not piece:
                return ()
            block.filled = True
            if block.from_start:
                block.from_start = False
                return (ToolCallArguments(block.call, piece),)
            return (ToolCallDelta(block.call, piece),)
        return () if kind in _IGNORED_DELTAS else _UNKNOWN

    def _block_start(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        block = obj.get("content_block")
        if not isinstance(block, dict):
            return _PARSE_ERROR
        return self.block_start(self._index(obj), block)

    def _block_stop(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        return self.close_block(self._index(obj))

    def _message_start(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        message = obj.get("message")
        if not isinstance(message, dict):
            return _PARSE_ERROR
        out: list[LlmEvent] = [Meta(as_str(message.get("id")), as_str(message.get("model")))]
        if isinstance(message.get("usage"), dict):
            self._raw_usage = dict(message["usage"])
            out.append(self._usage())
        return out

    def _message_delta(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        out: list[LlmEvent] = []
        delta = obj.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
            out.append(Stop(delta["stop_reason"]))
        usage = obj.get("usage")
        if isinstance(usage, dict):  # cumulative: assigned over message_start's, never added
            merged = self._raw_usage if self._raw_usage is not None else {}
            merged.update((k, v) for k, v in usage.items() if v is not None)
            self._raw_usage = merged
            if as_int(usage.get("output_tokens")) is not None:
                self._output_reported = True
            out.append(self._usage())
        return out

    def _usage(self) -> UsageReport:
        normalize = usage_from_anthropic if self._output_reported else _PLACEHOLDER_OUTPUT
        return UsageReport(dict(self._raw_usage or {}), normalize)

    def _message_stop(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        return (Done(),)

    def _ping(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        return ()

    def _error(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        kind, message = error_fields(obj) or (None, None)
        return (Error(kind or "error", message),)


_HANDLERS: dict[str, Callable[[AnthropicEvents, dict[str, Any]], Sequence[LlmEvent]]] = {
    "message_start": AnthropicEvents._message_start,
    "content_block_start": AnthropicEvents._block_start,
    "content_block_delta": AnthropicEvents._block_delta,
    "content_block_stop": AnthropicEvents._block_stop,
    "message_delta": AnthropicEvents._message_delta,
    "message_stop": AnthropicEvents._message_stop,
    "ping": AnthropicEvents._ping,
    "error": AnthropicEvents._error,
}


def body_events(body: bytes, status: int) -> Iterator[LlmEvent]:
    """The neutral events of a whole Messages body (its blocks read as a stream reads them)."""
    obj, events = body_object(body, status, listing="content")
    yield from events
    if obj is None:
        return
    blocks = AnthropicEvents()
    for i, block in enumerate(obj["content"]):
        if isinstance(block, dict):
            yield from blocks.block_start(i, block)
            yield from blocks.close_block(i)
    stop = as_str(obj.get("stop_reason"))
    if stop is not None:
        yield Stop(stop)
    if "usage" in obj:
        yield UsageReport(obj["usage"], usage_from_anthropic)
    yield Done()


class AnthropicMessages(GuardedParser):
    """ProtocolParser for the Anthropic Messages API."""

    name = "anthropic"
    rules = RULES
    request_fn = staticmethod(_parse_request)
    body_fn = staticmethod(body_events)
    wire_cls = AnthropicEvents
