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

Over 400 lines on purpose: one protocol's wire knowledge (requests, stream chunks read typed and
in general, whole bodies, errors) in one file, as for every provider.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from addons.framing import SSEEvent
from addons.providers._common import (
    arguments_text,
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
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageReport,
)
from addons.providers.wire_shapes import decode_chat_chunk, is_object
from addons.records import RequestInfo, ToolResult, Usage

__all__ = ["REFUSAL_PREFIX", "RULES", "ChatEvents", "OpenAIChat", "body_events", "usage_from_openai"]

REFUSAL_PREFIX = "[refusal] "
RULES = SummaryRules(call_id_prefix="openai")
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


# -- requests -------------------------------------------------------------------------------


def tool_part(call: Any) -> tuple[dict[str, Any], Any] | None:
    """A `tool_calls` entry's tool and what it passes it: its `function` and `arguments`, or a
    custom tool's `custom` and free-form `input`; None for neither."""
    if isinstance(call, dict):
        for field, key in (("function", "arguments"), ("custom", "input")):
            part = call.get(field)
            if isinstance(part, dict):
                return part, part.get(key)
    return None


def _message_text(msg: dict[str, Any]) -> str:
    parts = [content_text(msg.get("content"), placeholders=False)]
    calls = msg.get("tool_calls")
    for found in map(tool_part, calls if isinstance(calls, list) else []):
        if found is not None:
            parts.append(f"{found[0].get('name') or ''} {arguments_text(found[1])}")
    return "\n".join(p for p in parts if p)


def _trailing_results(messages: list[Any]) -> list[ToolResult]:
    """The `tool` messages after the last assistant message."""
    last = last_assistant(messages)
    names: dict[str, str] = {}
    calls = messages[last].get("tool_calls") if last >= 0 else None
    for call in calls if isinstance(calls, list) else []:
        found = tool_part(call)
        if found is not None and isinstance(call.get("id"), str) and isinstance(found[0].get("name"), str):
            names[call["id"]] = found[0]["name"]
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

_PARSE_ERROR = (PARSE_ERROR,)
_DONE = (Done(),)


def _first_choice(choices: list[Any]) -> dict[str, Any] | None:
    first = choices[0] if choices else None
    if type(first) is dict and first.get("index") == 0:  # the usual case, without a loop
        return first
    for choice in choices:
        if isinstance(choice, dict) and (as_int(choice.get("index")) or 0) == 0:
            return choice
    return None


def _text_events(content: Any, reasoning: Any, other_reasoning: Any, refusal: Any,
                 refusal_prefix: str) -> tuple[list[LlmEvent], bool]:  # fmt: skip
    """Text and thinking of a message (body) or a delta (stream), by its fields as sent, and whether
    it held a refusal. `reasoning` is `reasoning_content`, which wins over `other_reasoning`
    (`reasoning`) when a server sends both; the refusal is appended after the text, behind
    `refusal_prefix`."""
    text, thinking = (content, "") if type(content) is str else _content_parts(content)
    if not (type(reasoning) is str and reasoning):
        reasoning = other_reasoning
    if type(reasoning) is str:
        thinking = reasoning + thinking
    refused = isinstance(refusal, str) and refusal != ""
    if refused:
        text += refusal_prefix + refusal
    out: list[LlmEvent] = []
    if text:
        out.append(TextDelta(text))
    if thinking:
        out.append(ThinkingDelta(thinking))
    return out, refused


class ChatEvents:
    """Reads one Chat Completions stream (choice 0) into neutral events."""

    NATIVE_KIND = 2
    """The compiled framer reads this protocol's text chunks itself (`capsem.native`)."""

    def __init__(self) -> None:
        self._keys: dict[Any, int] = {}  # fragment index (or ("no-index", n)) -> call key
        self._ids: list[str] = []  # id of each call so far, "" until one came
        self._named: list[bool] = []
        self._last: int | None = None
        self._meta: tuple[Any, Any] = (None, None)  # the id and model last said (every chunk repeats them)
        self._refused = False
        self._stop: str | None = None
        self._failed = False

    def events(self, ev: SSEEvent) -> Sequence[LlmEvent]:
        try:
            obj = decode_chat_chunk(ev.data)
        except msgspec.DecodeError:  # not a plain chunk (or not JSON)
            return self.general(ev)
        choices = obj.choices
        if obj.error is not msgspec.UNSET or obj.object == "error" or not choices or choices[0].index != 0:
            return self.general(ev)
        out: list[LlmEvent] = []
        meta = (obj.id, obj.model)
        if meta != self._meta:
            self._meta = meta
            out.append(Meta(as_str(meta[0]), as_str(meta[1])))
        if is_object(obj.usage):  # an object (decoded only if it is the last report)
            out.append(UsageReport(obj.usage, usage_from_openai))
        choice = choices[0]
        delta = choice.delta
        if delta is not None:
            out += self._delta(delta.content, delta.reasoning_content, delta.reasoning, delta.refusal,
                               delta.tool_calls)  # fmt: skip
        reason = choice.finish_reason
        if type(reason) is str and reason:
            out += self._finish(reason)
        return out

    def native_state(self) -> tuple[Any, Any]:
        """The id and model last said: the compiled framer takes a text chunk only when it repeats them."""
        return self._meta

    @staticmethod
    def native_run(collector: Collector, texts: list[str]) -> None:
        """A run of non-empty `content` pieces the compiled framer read from text-only chunks."""
        collector.add_texts(texts, None)

    def general(self, ev: SSEEvent) -> Sequence[LlmEvent]:
        """Any event: the whole document decoded and read (`events` reads a plain chunk, whose first
        choice is choice 0 and that is no error, into `ChatChunk` first)."""
        try:
            obj = decode_json(ev.data)
        except Exception:  # msgspec refuses it: load_json decides
            obj = load_json(ev.data)
        if type(obj) is not dict:
            return _DONE if ev.data.strip() == "[DONE]" else _PARSE_ERROR
        out: list[LlmEvent] = []
        error = error_fields(obj) if "error" in obj or obj.get("object") == "error" else None
        if error is not None:
            out.append(Error(error[0] or "error", error[1]))
            self._failed = True
        meta = (obj.get("id"), obj.get("model"))
        if meta != self._meta:
            self._meta = meta
            out.append(Meta(as_str(meta[0]), as_str(meta[1])))
        if isinstance(obj.get("usage"), dict):
            out.append(UsageReport(obj["usage"], usage_from_openai))
        choices = obj.get("choices")
        if isinstance(choices, list):
            choice = _first_choice(choices)
            if choice is not None:
                out += self._choice(choice)
        elif error is None and "usage" not in obj:
            out.append(UNKNOWN_EVENT)
        return out

    def end(self) -> Sequence[LlmEvent]:
        """Tool calls are whole once a finish reason came without an error; `length` cut the last one."""
        out: list[LlmEvent] = []
        if self._stop is not None and not self._failed:
            out += [ToolCallEnd(key) for key in range(len(self._ids))]
        if self._stop == "length" and self._ids:
            out.append(ToolCallEnd(len(self._ids) - 1, complete=False))
        return out

    def _choice(self, choice: dict[str, Any]) -> list[LlmEvent]:
        out: list[LlmEvent] = []
        delta = choice.get("delta")
        if isinstance(delta, dict):
            out = self._delta(delta.get("content"), delta.get("reasoning_content"), delta.get("reasoning"),
                              delta.get("refusal"), delta.get("tool_calls"))  # fmt: skip
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            out += self._finish(reason)
        return out

    def _delta(self, content: Any, reasoning: Any, other_reasoning: Any, refusal: Any,
               fragments: Any) -> list[LlmEvent]:  # fmt: skip
        """A choice's delta, by its fields as sent (see `_text_events`)."""
        prefix = "" if self._refused else REFUSAL_PREFIX
        out, refused = _text_events(content, reasoning, other_reasoning, refusal, prefix)
        self._refused = self._refused or refused
        for fragment in fragments if isinstance(fragments, list) else []:
            if isinstance(fragment, dict):
                out += self._fragment(fragment)
        return out

    def _finish(self, reason: str) -> list[LlmEvent]:
        """A choice's non-empty finish reason."""
        out: list[LlmEvent] = []
        if self._stop is None:  # the first finish reason wins
            self._stop = reason
            out.append(Stop(reason))
        out.append(Done(final=False))
        return out

    def _fragment(self, fragment: dict[str, Any]) -> list[LlmEvent]:
        key: Any = as_int(fragment.get("index"))
        call_id = as_str(fragment.get("id")) or ""
        fn, passed = tool_part(fragment) or ({}, None)
        name = as_str(fn.get("name")) or ""
        call: int | None
        if key is None:  # no index: a new id starts a call, anything else continues the last one
            last = self._last
            call = last if last is not None and (not call_id or self._ids[last] in ("", call_id)) else None
            key = ("no-index", len(self._ids))
        else:
            call = self._keys.get(key)
            if call is not None and call_id and self._ids[call] and call_id != self._ids[call]:
                call = None  # a different id at an index already in use: a new call
        out: list[LlmEvent] = []
        if call is None:
            call = len(self._ids)
            self._keys[key] = call
            self._ids.append(call_id)
            self._named.append(bool(name))
            out.append(ToolCallStart(call, call_id, name))
        else:
            new_id = call_id if not self._ids[call] else ""
            new_name = name if not self._named[call] else ""
            if new_id or new_name:
                out.append(ToolCallStart(call, new_id, new_name))
                self._ids[call] = self._ids[call] or new_id
                self._named[call] = self._named[call] or bool(new_name)
        arguments = arguments_text(passed)
        if arguments:
            out.append(ToolCallDelta(call, arguments))
        self._last = call
        return out


def body_events(body: bytes, status: int) -> Iterator[LlmEvent]:
    """The neutral events of a whole chat.completion body (choice 0)."""
    obj, events = body_object(body, status, listing="choices")
    yield from events
    if obj is None:
        return
    choice = _first_choice(obj["choices"])
    message = choice.get("message") if choice else None
    calls = 0
    if isinstance(message, dict):
        texts = (message.get(k) for k in ("content", "reasoning_content", "reasoning", "refusal"))
        yield from _text_events(*texts, REFUSAL_PREFIX)[0]
        tool_calls = message.get("tool_calls")
        for call in tool_calls if isinstance(tool_calls, list) else []:
            found = tool_part(call)
            if found is None:
                continue
            fn, passed = found
            name = fn.get("name") if isinstance(fn.get("name"), str) else ""
            yield ToolCallStart(calls, as_str(call.get("id")) or "", name)
            yield ToolCallDelta(calls, arguments_text(passed))
            yield ToolCallEnd(calls)
            calls += 1
    stop = as_str(choice.get("finish_reason")) if choice is not None else None
    if stop is not None:
        yield Stop(stop)
    if obj.get("usage") is not None:
        yield UsageReport(obj["usage"], usage_from_openai)
    if stop == "length" and calls:
        yield ToolCallEnd(calls - 1, complete=False)  # cut while writing its arguments
    yield Done()


class OpenAIChat(GuardedParser):
    """ProtocolParser for OpenAI Chat Completions and OpenAI-compatible servers."""

    name = "openai_chat"
    rules = RULES
    request_fn = staticmethod(_parse_request)
    body_fn = staticmethod(body_events)
    wire_cls = ChatEvents
