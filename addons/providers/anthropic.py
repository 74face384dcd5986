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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from addons.framing import SSEEvent
from addons.providers._common import (
    as_int,
    as_str,
    content_text,
    dumps_compact,
    error_fields,
    load_json,
    request_object,
    response_object,
)
from addons.providers.base import GuardedParser
from addons.records import RequestInfo, ResponseSummary, ToolCall, ToolResult, Usage

__all__ = ["REDACTED_THINKING", "AnthropicMessages", "AnthropicStream", "usage_from_anthropic"]

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


class _Content:
    """Collects text, thinking and tool calls with the one joining rule.

    Pieces go to lists (appending to a string attribute copies it every time, which is
    quadratic on long answers); `flush()` writes the joined text into the summary.
    """

    __slots__ = ("_gap", "_last_thinking", "_text", "_thinking", "summary")

    def __init__(self, summary: ResponseSummary) -> None:
        self.summary = summary
        self._last_thinking: int | None = None
        self._gap = False
        self._text: list[str] = []
        self._thinking: list[str] = []

    def block(self, kind: Any) -> None:
        """A content block of `kind` starts: anything but text separates text runs."""
        if kind != "text":
            self._gap = True

    def text(self, text: Any) -> None:
        if isinstance(text, str) and text:
            if self._gap and self._text:
                self._text.append("\n")
            self._gap = False
            self._text.append(text)
            self.summary.content_started = True

    def thinking(self, block: int, text: Any) -> None:
        if not (isinstance(text, str) and text):
            return
        if self._thinking and block != self._last_thinking:
            self._thinking.append("\n")
        self._thinking.append(text)
        self._last_thinking = block
        self.summary.content_started = True

    def tool(self, block: dict[str, Any]) -> ToolCall:
        index = len(self.summary.tool_calls)
        name = block.get("name") if isinstance(block.get("name"), str) else ""
        call_id = as_str(block.get("id")) or f"anthropic_{name}_{index}"
        call = ToolCall(index=index, call_id=call_id, name=name, complete=False)
        self.summary.tool_calls.append(call)
        self.summary.content_started = True
        return call

    def flush(self) -> None:
        self.summary.text = "".join(self._text)
        self.summary.thinking = "".join(self._thinking)


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
    last = max(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
        default=-1,
    )
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


def _parse_response(body: bytes, status: int) -> ResponseSummary:
    obj, summary = response_object(body, status)
    if obj is None:
        return summary
    content = obj.get("content")
    if not isinstance(content, list):
        summary.parse_errors += 1
        return summary
    summary.message_id = as_str(obj.get("id"))
    summary.model = as_str(obj.get("model"))
    acc = _Content(summary)
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        acc.block(kind)
        if kind == "text":
            acc.text(block.get("text"))
        elif kind == "thinking":
            acc.thinking(i, block.get("thinking"))
        elif kind == "redacted_thinking":
            acc.thinking(i, REDACTED_THINKING)
        elif kind in _TOOL_BLOCKS:
            call = acc.tool(block)
            given = block.get("input")  # same rule as a stream: empty or absent input is {}
            call.arguments = (dumps_compact(given) if given else "") or "{}"
            call.complete = True
    acc.flush()
    summary.stop_reason = as_str(obj.get("stop_reason"))
    if "usage" in obj:
        summary.usage = usage_from_anthropic(obj["usage"])
    summary.complete = True
    return summary


class _Block:
    """A streamed content block; for a tool call, its argument pieces."""

    __slots__ = ("call", "from_start", "parts")

    def __init__(self) -> None:
        self.call: ToolCall | None = None
        self.from_start = False
        self.parts: list[str] = []

    def close(self, complete: bool) -> None:
        if self.call is not None and not self.call.complete:
            self.call.arguments = "".join(self.parts)
            if complete:
                self.call.complete = True
                self.call.arguments = self.call.arguments or "{}"


class AnthropicStream:
    """Accumulates one Anthropic SSE stream into a `ResponseSummary`."""

    def __init__(self) -> None:
        self.summary = ResponseSummary()
        self._content = _Content(self.summary)
        self._blocks: dict[int, _Block] = {}
        self._raw_usage: dict[str, Any] | None = None
        self._output_reported = False
        self._stopped = False

    def event(self, ev: SSEEvent) -> None:
        """Consume one event; never raises (a failure counts as a parse error)."""
        try:
            self._handle(ev)
        except Exception:
            self.summary.parse_errors += 1

    def finish(self) -> ResponseSummary:
        """End of stream: complete only if `message_stop` came and no error did.

        Text, thinking and the arguments of unclosed tool calls are assembled here.
        """
        for block in self._blocks.values():
            block.close(complete=False)
        self._content.flush()
        self.summary.complete = self._stopped and self.summary.error_type is None
        return self.summary

    def _handle(self, ev: SSEEvent) -> None:
        if self._stopped:
            return
        obj = load_json(ev.data)
        if not isinstance(obj, dict):
            if ev.event == "error":  # a proxy's plain-text error event still ends the answer
                self._error({"error": {"message": ev.data.strip()[:500] or None}})
            if ev.event != "ping" and ev.data.strip() != "[DONE]":
                self.summary.parse_errors += 1
            return
        kind = obj.get("type") if isinstance(obj.get("type"), str) else ev.event
        handler = self._HANDLERS.get(kind or "")
        if handler is None:
            self.summary.unknown_events += 1
        else:
            handler(self, obj)

    def _message_start(self, obj: dict[str, Any]) -> None:
        message = obj.get("message")
        if not isinstance(message, dict):
            self.summary.parse_errors += 1
            return
        self.summary.message_id = as_str(message.get("id")) or self.summary.message_id
        self.summary.model = as_str(message.get("model")) or self.summary.model
        if isinstance(message.get("usage"), dict):
            self._raw_usage = dict(message["usage"])
            self._update_usage()

    def _block_index(self, obj: dict[str, Any]) -> int:
        index = as_int(obj.get("index"))
        return index if index is not None else -1

    def _block_start(self, obj: dict[str, Any]) -> None:
        index = self._block_index(obj)
        block = obj.get("content_block")
        if not isinstance(block, dict):
            self.summary.parse_errors += 1
            return
        kind = block.get("type")
        self._content.block(kind)
        state = _Block()
        if kind == "text":
            self._content.text(block.get("text"))
        elif kind == "thinking":
            self._content.thinking(index, block.get("thinking"))
        elif kind == "redacted_thinking":
            self._content.thinking(index, REDACTED_THINKING)
        elif kind in _TOOL_BLOCKS:
            state.call = self._content.tool(block)
            given = block.get("input")
            if given:
                state.parts.append(dumps_compact(given))
                state.from_start = True
        previous = self._blocks.get(index)
        if previous is not None:
            previous.close(complete=False)
        self._blocks[index] = state

    def _block_delta(self, obj: dict[str, Any]) -> None:
        index = self._block_index(obj)
        delta = obj.get("delta")
        if not isinstance(delta, dict):
            self.summary.parse_errors += 1
            return
        kind = delta.get("type")
        if kind == "text_delta":
            self._content.text(delta.get("text"))
        elif kind == "thinking_delta":
            self._content.thinking(index, delta.get("thinking"))
        elif kind == "input_json_delta":
            block = self._blocks.get(index)
            piece = delta.get("partial_json")
            if block is None or block.call is None or not isinstance(piece, str):
                self.summary.parse_errors += 1
                return
            if block.from_start and piece:
                block.parts, block.from_start = [], False
            block.parts.append(piece)
        elif kind not in _IGNORED_DELTAS:
            self.summary.unknown_events += 1

    def _block_stop(self, obj: dict[str, Any]) -> None:
        block = self._blocks.get(self._block_index(obj))
        if block is not None:
            block.close(complete=True)

    def _message_delta(self, obj: dict[str, Any]) -> None:
        delta = obj.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
            self.summary.stop_reason = delta["stop_reason"]
        usage = obj.get("usage")
        if isinstance(usage, dict):
            merged = self._raw_usage if self._raw_usage is not None else {}
            merged.update((k, v) for k, v in usage.items() if v is not None)
            self._raw_usage = merged
            if as_int(usage.get("output_tokens")) is not None:
                self._output_reported = True
            self._update_usage()

    def _message_stop(self, obj: dict[str, Any]) -> None:
        self._stopped = True
        self.summary.complete = self.summary.error_type is None

    def _ping(self, obj: dict[str, Any]) -> None:
        pass

    def _error(self, obj: dict[str, Any]) -> None:
        kind, message = error_fields(obj) or (None, None)
        self.summary.error_type = kind or "error"
        self.summary.error_message = message
        self.summary.complete = False

    def _update_usage(self) -> None:
        self.summary.usage = usage_from_anthropic(
            dict(self._raw_usage or {}), output_reported=self._output_reported
        )

    _HANDLERS: ClassVar[dict[str, Callable[[AnthropicStream, dict[str, Any]], None]]] = {
        "message_start": _message_start,
        "content_block_start": _block_start,
        "content_block_delta": _block_delta,
        "content_block_stop": _block_stop,
        "message_delta": _message_delta,
        "message_stop": _message_stop,
        "ping": _ping,
        "error": _error,
    }


class AnthropicMessages(GuardedParser):
    """ProtocolParser for the Anthropic Messages API."""

    name = "anthropic"
    request_fn = staticmethod(_parse_request)
    response_fn = staticmethod(_parse_response)
    stream_cls = AnthropicStream
