"""OpenAI Chat Completions (`POST /v1/chat/completions`) and compatible servers.

Protocol quirks handled:

- System prompt = the text of every `system` and `developer` message, joined with newlines.
- New tool results = the `role: "tool"` messages after the last assistant message (agents
  resend the whole history); their names come from that assistant message's `tool_calls`.
- Streams are `data:`-only chunks ending with `data: [DONE]`; anything after `[DONE]` is
  ignored. A `finish_reason` also marks the stream complete when `[DONE]` never comes (Gemini's
  and some proxies' compatible endpoints omit it). A chunk with a truthy top-level `error`
  (or vLLM's old `{"object": "error"}`) records the error and leaves the stream incomplete.
- Tool-call fragments are keyed by `tool_calls[].index`: `id`/`name` come with the first
  fragment (servers that repeat them on every fragment do not create duplicates; a *different*
  id at an index already in use starts a new call), `arguments` are concatenated raw. Indexes
  may start above 0; `ToolCall.index` is the position in output order.
- Only choice 0 is recorded (`n > 1` answers are not concatenated). Azure's first chunk
  (`choices: []`, empty `id`/`model`) and its content-filter chunks whose choice has no
  `delta` are harmless; id and model are the first non-empty ones.
- Reasoning: `reasoning_content` (DeepSeek, llama.cpp, old vLLM) or `reasoning` (vLLM >= 0.11,
  OpenRouter, Ollama) go to thinking; when a server sends both, `reasoning_content` wins.
  Mistral-style content part lists (`text` / `thinking` parts) are understood too.
- Usage comes from any chunk with a non-null `usage` (last wins): the `choices: []` chunk of
  `include_usage`, or the finish chunk (llama.cpp, DeepSeek); without it usage stays unknown.
- `finish_reason: "length"` with tool calls marks the last call incomplete (it was cut).

Text rule (the same for bodies and streams): `content` pieces are concatenated as sent; a
refusal is appended once as ``[refusal] `` + its text.
"""

from __future__ import annotations

from typing import Any

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

__all__ = ["REFUSAL_PREFIX", "OpenAIChat", "OpenAIChatStream", "usage_from_openai"]

REFUSAL_PREFIX = "[refusal] "
_SYSTEM_ROLES = ("system", "developer")  # a tuple: a JSON role may be unhashable


def usage_from_openai(raw: Any) -> Usage:
    """Normalize a Chat Completions `usage` object (prompt and completion counts are inclusive)."""
    if not isinstance(raw, dict):
        return Usage(raw=raw)

    def first(*keys: str, src: dict[str, Any] = raw) -> int | None:
        for key in keys:
            value = as_int(src.get(key))
            if value is not None:
                return value
        return None

    prompt = raw.get("prompt_tokens_details") or raw.get("input_tokens_details")
    prompt = prompt if isinstance(prompt, dict) else {}
    completion = raw.get("completion_tokens_details") or raw.get("output_tokens_details")
    completion = completion if isinstance(completion, dict) else {}
    extra: dict[str, Any] = {}
    for name, src, key in (
        ("input_audio_tokens", prompt, "audio_tokens"),
        ("output_audio_tokens", completion, "audio_tokens"),
        ("accepted_prediction_tokens", completion, "accepted_prediction_tokens"),
        ("rejected_prediction_tokens", completion, "rejected_prediction_tokens"),
    ):
        value = as_int(src.get(key))
        if value:
            extra[name] = value
    cost = raw.get("cost")  # OpenRouter bills and reports its own cost: kept next to ours
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        extra["provider_cost"] = cost
        if isinstance(raw.get("is_byok"), bool):
            extra["provider_is_byok"] = raw["is_byok"]
        if isinstance(raw.get("cost_details"), dict):
            extra["provider_cost_details"] = raw["cost_details"]
    cache_read = first("cached_tokens", src=prompt)
    return Usage(
        input_tokens=first("prompt_tokens", "input_tokens"),
        output_tokens=first("completion_tokens", "output_tokens"),
        cache_read=cache_read if cache_read is not None else first("prompt_cache_hit_tokens"),
        cache_write=first("cache_write_tokens", src=prompt),
        reasoning=first("reasoning_tokens", src=completion),
        extra=extra,
        raw=raw,
    )


def _content_parts(content: Any) -> tuple[str, str]:
    """(text, thinking) of a message or delta `content`: a string or a list of parts."""
    if isinstance(content, str):
        return content, ""
    if not isinstance(content, list):
        return "", ""
    text, thinking = [], []
    for part in content:
        if isinstance(part, str):
            text.append(part)
        elif isinstance(part, dict):
            if part.get("type") == "thinking":
                thinking.append(content_text(part.get("thinking"), sep="", placeholders=False))
            elif isinstance(part.get("text"), str):
                text.append(part["text"])
    return "".join(text), "".join(thinking)


def _reasoning(message: dict[str, Any]) -> str:
    value = message.get("reasoning_content")
    if not (isinstance(value, str) and value):
        value = message.get("reasoning")
    return value if isinstance(value, str) else ""


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else dumps_compact(value)


# -- requests -------------------------------------------------------------------------------


def _message_text(msg: dict[str, Any]) -> str:
    parts = [content_text(msg.get("content"), placeholders=False)]
    calls = msg.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            parts.append(f"{fn.get('name') or ''} {_arguments(fn.get('arguments'))}")
    return "\n".join(p for p in parts if p)


def _trailing_results(messages: list[Any]) -> list[ToolResult]:
    """The `tool` messages after the last assistant message."""
    last = max(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
        default=-1,
    )
    names: dict[str, str] = {}
    calls = messages[last].get("tool_calls") if last >= 0 else None
    for call in calls if isinstance(calls, list) else []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict) and isinstance(call.get("id"), str) and isinstance(fn.get("name"), str):
            names[call["id"]] = fn["name"]
    results: list[ToolResult] = []
    for msg in messages[last + 1 :]:
        if not (isinstance(msg, dict) and msg.get("role") == "tool"):
            continue
        call_id = as_str(msg.get("tool_call_id")) or as_str(msg.get("call_id")) or ""
        results.append(
            ToolResult(
                call_id=call_id, content=content_text(msg.get("content")), tool_name=names.get(call_id)
            )
        )
    return results


def _parse_request(body: bytes) -> RequestInfo:
    obj, info = request_object(body)
    if obj is None:
        return info
    info.model = as_str(obj.get("model"))
    info.stream = obj.get("stream") is True
    messages = obj.get("messages") if isinstance(obj.get("messages"), list) else []
    tools = obj.get("tools")
    if not isinstance(tools, list):
        tools = obj.get("functions") if isinstance(obj.get("functions"), list) else []
    info.messages_count = len(messages)
    info.tools_count = len(tools)
    system = [
        content_text(m.get("content"), placeholders=False)
        for m in messages
        if isinstance(m, dict) and m.get("role") in _SYSTEM_ROLES
    ]
    info.system_prompt = "\n".join(system) if system else None
    info.tool_results = _trailing_results(messages)
    parts = [_message_text(m) for m in messages if isinstance(m, dict)]
    parts.append(dumps_compact(tools) if tools else "")
    info.prompt_text = "\n".join(p for p in parts if p)
    return info


# -- responses ------------------------------------------------------------------------------


def _mark_truncated(summary: ResponseSummary) -> None:
    if summary.stop_reason == "length" and summary.tool_calls:
        summary.tool_calls[-1].complete = False


def _first_choice(choices: list[Any]) -> dict[str, Any] | None:
    for choice in choices:
        if isinstance(choice, dict) and (as_int(choice.get("index")) or 0) == 0:
            return choice
    return None


def _parse_response(body: bytes, status: int) -> ResponseSummary:
    obj, summary = response_object(body, status)
    if obj is None:
        return summary
    choices = obj.get("choices")
    if not isinstance(choices, list):
        summary.parse_errors += 1
        return summary
    summary.message_id = as_str(obj.get("id"))
    summary.model = as_str(obj.get("model"))
    choice = _first_choice(choices)
    message = choice.get("message") if choice else None
    if isinstance(message, dict):
        text, thinking = _content_parts(message.get("content"))
        refusal = message.get("refusal")
        if isinstance(refusal, str) and refusal:
            text += REFUSAL_PREFIX + refusal
        summary.text = text
        summary.thinking = _reasoning(message) + thinking
        calls = message.get("tool_calls")
        for i, call in enumerate(calls if isinstance(calls, list) else []):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict):
                continue
            name = fn.get("name") if isinstance(fn.get("name"), str) else ""
            call_id = as_str(call.get("id")) or f"openai_{name}_{i}"
            index = len(summary.tool_calls)
            summary.tool_calls.append(ToolCall(index, call_id, name, _arguments(fn.get("arguments"))))
        summary.content_started = bool(summary.text or summary.thinking or summary.tool_calls)
    if choice is not None:
        summary.stop_reason = as_str(choice.get("finish_reason"))
    if "usage" in obj and obj["usage"] is not None:
        summary.usage = usage_from_openai(obj["usage"])
    _mark_truncated(summary)
    summary.complete = True
    return summary


class OpenAIChatStream:
    """Accumulates one Chat Completions SSE stream into a `ResponseSummary`.

    Text, thinking and arguments are collected as lists of pieces (appending to a string
    attribute is quadratic on long answers) and joined by `finish()`.
    """

    def __init__(self) -> None:
        self.summary = ResponseSummary()
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._calls: dict[Any, ToolCall] = {}
        self._args: dict[int, list[str]] = {}
        self._last: ToolCall | None = None
        self._done = False
        self._finished = False
        self._refusal = False

    def event(self, ev: SSEEvent) -> None:
        """Consume one event; never raises (a failure counts as a parse error)."""
        try:
            self._handle(ev)
        except Exception:
            self.summary.parse_errors += 1

    def finish(self) -> ResponseSummary:
        """End of stream: decide completeness of the stream and of its tool calls."""
        s = self.summary
        s.text, s.thinking = "".join(self._text), "".join(self._thinking)
        s.complete = (self._done or self._finished) and s.error_type is None
        for call in s.tool_calls:
            call.arguments = "".join(self._args[call.index])
            call.complete = self._finished and s.error_type is None
            if not call.call_id:
                call.call_id = f"openai_{call.name}_{call.index}"
        _mark_truncated(s)
        return s

    def _handle(self, ev: SSEEvent) -> None:
        if self._done:
            return
        if ev.data.strip() == "[DONE]":
            self._done = True
            self.summary.complete = self.summary.error_type is None
            return
        obj = load_json(ev.data)
        if not isinstance(obj, dict):
            self.summary.parse_errors += 1
            return
        s = self.summary
        error = error_fields(obj)
        if error is not None:
            s.error_type, s.error_message = error
            s.error_type = s.error_type or "error"
            s.complete = False
        s.message_id = s.message_id or as_str(obj.get("id"))
        s.model = s.model or as_str(obj.get("model"))
        if isinstance(obj.get("usage"), dict):
            s.usage = usage_from_openai(obj["usage"])
        choices = obj.get("choices")
        if isinstance(choices, list):
            choice = _first_choice(choices)
            if choice is not None:
                self._choice(choice)
        elif error is None and "usage" not in obj:
            s.unknown_events += 1

    def _choice(self, choice: dict[str, Any]) -> None:
        s = self.summary
        delta = choice.get("delta")
        if isinstance(delta, dict):
            text, thinking = _content_parts(delta.get("content"))
            thinking = _reasoning(delta) + thinking
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                if not self._refusal:
                    text += REFUSAL_PREFIX
                    self._refusal = True
                text += refusal
            if text or thinking:
                self._text.append(text)
                self._thinking.append(thinking)
                s.content_started = True
            fragments = delta.get("tool_calls")
            for fragment in fragments if isinstance(fragments, list) else []:
                if isinstance(fragment, dict):
                    self._fragment(fragment)
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            s.stop_reason = s.stop_reason or reason
            self._finished = True
            s.complete = s.error_type is None

    def _fragment(self, fragment: dict[str, Any]) -> None:
        key: Any = as_int(fragment.get("index"))
        call_id = as_str(fragment.get("id"))
        fn = fragment.get("function") if isinstance(fragment.get("function"), dict) else {}
        call: ToolCall | None
        if key is None:  # no index: a new id starts a call, anything else continues the last one
            last = self._last
            call = last if last is not None and (not call_id or last.call_id in ("", call_id)) else None
            key = ("no-index", len(self.summary.tool_calls))
        else:
            call = self._calls.get(key)
            if call is not None and call_id and call.call_id and call_id != call.call_id:
                call = None
        if call is None:
            call = ToolCall(len(self.summary.tool_calls), call_id or "", "", complete=False)
            self.summary.tool_calls.append(call)
            self._args[call.index] = []
            self._calls[key] = call
            self.summary.content_started = True
        elif call_id and not call.call_id:
            call.call_id = call_id
        name = as_str(fn.get("name"))
        if name and not call.name:
            call.name = name
        self._args[call.index].append(_arguments(fn.get("arguments")))
        self._last = call


class OpenAIChat(GuardedParser):
    """ProtocolParser for OpenAI Chat Completions and OpenAI-compatible servers."""

    name = "openai_chat"
    request_fn = staticmethod(_parse_request)
    response_fn = staticmethod(_parse_response)
    stream_cls = OpenAIChatStream
