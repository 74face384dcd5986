"""OpenAI Responses API (`POST /v1/responses`), streamed (SSE or WebSocket events) or not.

Protocol quirks handled:

- System prompt = `instructions` (a string, or input items); without it, the text of the
  `system` / `developer` messages in `input`.
- `input` is a string (one message) or a list of items; `messages_count` counts the items.
- Tool results = EVERY `function_call_output` / `custom_tool_call_output` item of `input`
  (a user message may follow them; clients with `store=false` resend the whole history, and
  `previous_response_id` continuations carry only the new ones). De-duplication by call id
  happens downstream (addons/traces.py). The tool name comes from the `function_call` item
  with the same `call_id` when the request carries it.
- Stream events carry their type in the JSON `type` (the `event:` line repeats it, and
  WebSocket messages have none). `response.created|in_progress|queued` give id and model;
  `output_text.delta` (and `refusal.delta`, prefixed once with ``[refusal] ``) give text;
  `reasoning_summary_text.delta` and `reasoning_text.delta` give thinking;
  `output_item.added` of a `function_call` (or `custom_tool_call`) starts a tool call keyed
  by `output_index` / `item_id`, recorded with its `call_id` (not the `fc_` item id);
  argument deltas are concatenated raw, and `function_call_arguments.done` /
  `output_item.done` replace them when they disagree (deltas may be missing). A `.done`
  event also reconciles text and thinking parts.
- Text and thinking: distinct parts (message content parts, summary parts, reasoning content
  parts) are joined with a blank line, each part's pieces as sent — the same rule for bodies.
- Terminal events: `response.completed` (stop_reason ``completed``, even with tool calls),
  `response.incomplete` (``incomplete:<reason>``), `response.failed` (``failed``, error_type
  = `response.error.code`); each carries the usage. An `error` event (may come after a 200
  instead of a terminal event) records `code` as error_type. First terminal event wins.
  When the terminal event carries `output` and the deltas said nothing, the summary is
  filled from it.
- Unknown event types (~60 exist) and keys such as `obfuscation` are ignored.
- Usage: `input_tokens` already includes `input_tokens_details.cached_tokens`, and
  `output_tokens` includes `output_tokens_details.reasoning_tokens` — normalized by the
  shared OpenAI function (`usage_from_openai` understands both namings).
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
    load_json_object,
    request_object,
    response_object,
)
from addons.providers.base import GuardedParser
from addons.providers.openai_chat import REFUSAL_PREFIX, usage_from_openai
from addons.records import RequestInfo, ResponseSummary, ToolCall, ToolResult, Usage

__all__ = [
    "OpenAIResponses",
    "OpenAIResponsesStream",
    "parse_request_object",
    "stop_reason_of",
    "usage_from_responses",
]

PART_SEP = "\n\n"
_SYSTEM_ROLES = ("system", "developer")
_CALL_TYPES = ("function_call", "custom_tool_call")
_RESULT_TYPES = ("function_call_output", "custom_tool_call_output")
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")
_START = ("response.created", "response.in_progress", "response.queued")


def usage_from_responses(raw: Any) -> Usage:
    """Normalize a Responses `usage` object (input and output counts are inclusive)."""
    return usage_from_openai(raw)


def stop_reason_of(response: dict[str, Any], event_type: str | None = None) -> str | None:
    """``completed``, ``incomplete:<reason>``, ``failed`` or the raw status; None while running."""
    status = as_str(response.get("status"))
    if status is None and event_type in _TERMINAL:
        status = event_type.split(".", 1)[1]
    if status in (None, "in_progress", "queued"):
        return None
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = as_str(details.get("reason")) if isinstance(details, dict) else None
        return f"incomplete:{reason}" if reason else "incomplete"
    return status


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else dumps_compact(value)


def _call_arguments(item: dict[str, Any]) -> Any:
    return item.get("input") if item.get("type") == "custom_tool_call" else item.get("arguments")


# -- requests -------------------------------------------------------------------------------


def _item_text(item: Any) -> str:
    if isinstance(item, str):
        return item
    if not isinstance(item, dict):
        return ""
    kind = item.get("type")
    if kind in _CALL_TYPES:
        return f"{item.get('name') or ''} {_arguments(_call_arguments(item))}"
    if kind in _RESULT_TYPES:
        return content_text(item.get("output"), placeholders=False)
    if kind == "reasoning":
        summary = item.get("summary")
        return content_text(summary, placeholders=False) if isinstance(summary, list) else ""
    return content_text(item.get("content"), placeholders=False)


def _tool_results(items: list[Any]) -> list[ToolResult]:
    names: dict[str, str] = {}
    for item in items:
        if isinstance(item, dict) and item.get("type") in _CALL_TYPES:
            call_id, name = as_str(item.get("call_id")), as_str(item.get("name"))
            if call_id and name:
                names[call_id] = name
    results = []
    for item in items:
        if not (isinstance(item, dict) and item.get("type") in _RESULT_TYPES):
            continue
        call_id = as_str(item.get("call_id")) or as_str(item.get("id")) or ""
        output = item.get("output")
        text = output if isinstance(output, str) else content_text(output)
        results.append(ToolResult(call_id=call_id, content=text, tool_name=names.get(call_id)))
    return results


def parse_request_object(obj: dict[str, Any]) -> RequestInfo:
    """A `RequestInfo` from a Responses request object (HTTP body or WebSocket `response.create`)."""
    info = RequestInfo()
    info.model = as_str(obj.get("model"))
    info.stream = obj.get("stream") is True
    raw_input = obj.get("input")
    items: list[Any]
    if isinstance(raw_input, str):
        items = [{"role": "user", "content": raw_input}]
    elif isinstance(raw_input, list):
        items = raw_input
    else:
        items = []
    tools = obj.get("tools") if isinstance(obj.get("tools"), list) else []
    info.messages_count = len(items)
    info.tools_count = len(tools)
    instructions = obj.get("instructions")
    if isinstance(instructions, str):
        info.system_prompt = instructions
    elif isinstance(instructions, list):
        info.system_prompt = "\n".join(t for t in (_item_text(i) for i in instructions) if t) or None
    if info.system_prompt is None:
        system = [
            content_text(i.get("content"), placeholders=False)
            for i in items
            if isinstance(i, dict) and i.get("role") in _SYSTEM_ROLES
        ]
        info.system_prompt = "\n".join(system) if system else None
    info.tool_results = _tool_results(items)
    parts = [info.system_prompt or ""] if isinstance(instructions, str | list) else []
    parts += [_item_text(i) for i in items]
    parts.append(dumps_compact(tools) if tools else "")
    info.prompt_text = "\n".join(p for p in parts if p)
    return info


def _parse_request(body: bytes) -> RequestInfo:
    obj, info = request_object(body)
    if obj is None:
        return info
    return parse_request_object(obj)


# -- responses ------------------------------------------------------------------------------


def _output_items(output: Any) -> tuple[str, str, list[ToolCall]]:
    """(text, thinking, tool calls) of a response's `output` list."""
    text: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") if isinstance(item.get("content"), list) else []:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                    text.append(REFUSAL_PREFIX + part["refusal"])
                elif isinstance(part.get("text"), str):
                    text.append(part["text"])
        elif kind == "reasoning":
            for key in ("summary", "content"):
                parts = item.get(key)
                for part in parts if isinstance(parts, list) else []:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        thinking.append(part["text"])
        elif kind in _CALL_TYPES:
            name = item.get("name") if isinstance(item.get("name"), str) else ""
            call_id = as_str(item.get("call_id")) or as_str(item.get("id")) or f"openai_{name}_{len(calls)}"
            done = item.get("status") in (None, "completed")
            calls.append(ToolCall(len(calls), call_id, name, _arguments(_call_arguments(item)), done))
    return PART_SEP.join(text), PART_SEP.join(thinking), calls


def _apply_response(summary: ResponseSummary, response: dict[str, Any], event_type: str | None) -> None:
    """Id, model, stop reason, usage and error of a response object (body or terminal event)."""
    summary.message_id = summary.message_id or as_str(response.get("id"))
    summary.model = summary.model or as_str(response.get("model"))
    summary.stop_reason = stop_reason_of(response, event_type)
    if response.get("usage") is not None:
        summary.usage = usage_from_responses(response["usage"])
    error = response.get("error")
    if isinstance(error, dict) and error:
        summary.error_type = as_str(error.get("code")) or as_str(error.get("type")) or "error"
        summary.error_message = as_str(error.get("message"))
    elif summary.stop_reason == "failed":
        summary.error_type = summary.error_type or "failed"


def _parse_response(body: bytes, status: int) -> ResponseSummary:
    obj = load_json_object(body)
    if obj is not None and status < 400 and (obj.get("object") == "response" or "output" in obj):
        summary = ResponseSummary()
    else:
        obj, summary = response_object(body, status)
        if obj is None:
            return summary
    summary.text, summary.thinking, summary.tool_calls = _output_items(obj.get("output"))
    summary.content_started = bool(summary.text or summary.thinking or summary.tool_calls)
    _apply_response(summary, obj, None)
    summary.complete = summary.stop_reason is not None
    if summary.stop_reason is None and "output" not in obj:
        summary.parse_errors += 1
    return summary


class OpenAIResponsesStream:
    """Accumulates one Responses event stream (SSE or WebSocket messages) into a summary."""

    def __init__(self) -> None:
        self.summary = ResponseSummary()
        self._text: dict[Any, list[str]] = {}
        self._thinking: dict[Any, list[str]] = {}
        self._refusals: set[Any] = set()
        self._calls: dict[Any, ToolCall] = {}
        self._args: dict[int, list[str]] = {}
        self._done_calls: set[int] = set()
        self._terminal = False
        self._output: Any = None

    @property
    def terminal(self) -> bool:
        """True once a terminal event (`response.completed|incomplete|failed` or `error`) came."""
        return self._terminal

    def event(self, ev: SSEEvent) -> None:
        """Consume one event; never raises (a failure counts as a parse error)."""
        try:
            self._handle(ev)
        except Exception:
            self.summary.parse_errors += 1

    def finish(self) -> ResponseSummary:
        """End of stream: join the pieces and decide completeness."""
        s = self.summary
        s.text = PART_SEP.join("".join(p) for p in self._text.values() if p)
        s.thinking = PART_SEP.join("".join(p) for p in self._thinking.values() if p)
        for call in s.tool_calls:
            call.arguments = "".join(self._args[call.index])
            call.complete = call.index in self._done_calls
            if not call.call_id:
                call.call_id = f"openai_{call.name}_{call.index}"
        if self._terminal and not (s.text or s.thinking or s.tool_calls) and self._output is not None:
            s.text, s.thinking, s.tool_calls = _output_items(self._output)
            s.content_started = s.content_started or bool(s.text or s.thinking or s.tool_calls)
        s.complete = self._terminal and s.error_type is None
        return s

    # -- events ---------------------------------------------------------------------------

    def _handle(self, ev: SSEEvent) -> None:
        if self._terminal:
            return
        obj = load_json(ev.data)
        if not isinstance(obj, dict):
            if ev.data.strip() != "[DONE]":
                self.summary.parse_errors += 1
            return
        kind = as_str(obj.get("type")) or ev.event or ""
        s = self.summary
        if kind in _START or kind in _TERMINAL:
            response = obj.get("response")
            if isinstance(response, dict):
                if kind in _TERMINAL:
                    _apply_response(s, response, kind)
                    self._output = response.get("output")
                else:
                    s.message_id = s.message_id or as_str(response.get("id"))
                    s.model = s.model or as_str(response.get("model"))
            if kind in _TERMINAL:
                self._terminal = True
                if kind == "response.failed" and s.error_type is None:
                    s.error_type = "failed"
            return
        if kind == "error":
            code = as_str(obj.get("code"))
            message = as_str(obj.get("message"))
            if code is None:
                fields = error_fields(obj)
                if fields is not None:
                    code, message = fields
            s.error_type, s.error_message = code or "error", message
            self._terminal = True
            return
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, obj)
        elif not kind.startswith("response."):
            s.unknown_events += 1

    def _piece(self, table: dict[Any, list[str]], key: Any, piece: Any) -> None:
        if isinstance(piece, str) and piece:
            table.setdefault(key, []).append(piece)
            self.summary.content_started = True

    def _part_done(self, table: dict[Any, list[str]], key: Any, whole: Any) -> None:
        if isinstance(whole, str) and whole and "".join(table.get(key, ())) != whole:
            table[key] = [whole]
            self.summary.content_started = True

    @staticmethod
    def _key(obj: dict[str, Any], index_key: str) -> tuple[Any, Any]:
        item = as_str(obj.get("item_id"))
        return (item if item is not None else as_int(obj.get("output_index")), as_int(obj.get(index_key)))

    def _text_delta(self, obj: dict[str, Any]) -> None:
        self._piece(self._text, self._key(obj, "content_index"), obj.get("delta"))

    def _text_done(self, obj: dict[str, Any]) -> None:
        self._part_done(self._text, self._key(obj, "content_index"), obj.get("text"))

    def _refusal_delta(self, obj: dict[str, Any]) -> None:
        key = self._key(obj, "content_index")
        delta = obj.get("delta")
        if isinstance(delta, str) and delta and key not in self._refusals:
            self._refusals.add(key)
            delta = REFUSAL_PREFIX + delta
        self._piece(self._text, key, delta)

    def _refusal_done(self, obj: dict[str, Any]) -> None:
        refusal = obj.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refusals.add(self._key(obj, "content_index"))
            self._part_done(self._text, self._key(obj, "content_index"), REFUSAL_PREFIX + refusal)

    def _summary_delta(self, obj: dict[str, Any]) -> None:
        self._piece(self._thinking, ("s", *self._key(obj, "summary_index")), obj.get("delta"))

    def _summary_done(self, obj: dict[str, Any]) -> None:
        self._part_done(self._thinking, ("s", *self._key(obj, "summary_index")), obj.get("text"))

    def _reasoning_delta(self, obj: dict[str, Any]) -> None:
        self._piece(self._thinking, ("r", *self._key(obj, "content_index")), obj.get("delta"))

    def _reasoning_done(self, obj: dict[str, Any]) -> None:
        self._part_done(self._thinking, ("r", *self._key(obj, "content_index")), obj.get("text"))

    def _call_for(self, obj: dict[str, Any]) -> ToolCall | None:
        item = as_str(obj.get("item_id"))
        if item is not None and ("item", item) in self._calls:
            return self._calls[("item", item)]
        return self._calls.get(("index", as_int(obj.get("output_index"))))

    def _new_call(self, obj: dict[str, Any], item: dict[str, Any]) -> ToolCall:
        name = item.get("name") if isinstance(item.get("name"), str) else ""
        call_id = as_str(item.get("call_id")) or as_str(item.get("id")) or ""
        call = ToolCall(len(self.summary.tool_calls), call_id, name, complete=False)
        self.summary.tool_calls.append(call)
        self._args[call.index] = []
        index = as_int(obj.get("output_index"))
        if index is not None:
            self._calls[("index", index)] = call
        if as_str(item.get("id")):
            self._calls[("item", item["id"])] = call
        self.summary.content_started = True
        return call

    def _item_added(self, obj: dict[str, Any]) -> None:
        item = obj.get("item")
        if not (isinstance(item, dict) and item.get("type") in _CALL_TYPES):
            return
        call = self._call_for({"item_id": item.get("id"), "output_index": obj.get("output_index")})
        if call is None:
            call = self._new_call(obj, item)
        initial = _arguments(_call_arguments(item))
        if initial:
            self._args[call.index].append(initial)

    def _args_delta(self, obj: dict[str, Any]) -> None:
        call = self._call_for(obj)
        delta = obj.get("delta")
        if call is not None and isinstance(delta, str):
            self._args[call.index].append(delta)

    def _args_done(self, obj: dict[str, Any], key: str = "arguments") -> None:
        call = self._call_for(obj)
        whole = obj.get(key)
        if call is not None and isinstance(whole, str) and "".join(self._args[call.index]) != whole:
            self._args[call.index] = [whole]

    def _custom_done(self, obj: dict[str, Any]) -> None:
        self._args_done(obj, "input")

    def _item_done(self, obj: dict[str, Any]) -> None:
        item = obj.get("item")
        if not isinstance(item, dict):
            return
        kind = item.get("type")
        if kind in _CALL_TYPES:
            call = self._call_for({"item_id": item.get("id"), "output_index": obj.get("output_index")})
            if call is None:
                call = self._new_call(obj, item)
            call.call_id = as_str(item.get("call_id")) or call.call_id
            call.name = call.name or (item.get("name") if isinstance(item.get("name"), str) else "")
            whole = _call_arguments(item)
            if whole is not None and "".join(self._args[call.index]) != _arguments(whole):
                self._args[call.index] = [_arguments(whole)]
            self._done_calls.add(call.index)
        elif kind in ("message", "reasoning") and isinstance(item.get("id"), str):
            text, thinking, _ = _output_items([item])
            ids = (item["id"], as_int(obj.get("output_index")))
            known_text = any(k[0] in ids for k in self._text)
            known_thinking = any(k[1] in ids for k in self._thinking)
            if text and not known_text:
                self._part_done(self._text, (item["id"], None), text)
            if thinking and not known_thinking:
                self._part_done(self._thinking, ("i", item["id"], None), thinking)


_HANDLERS = {
    "response.output_text.delta": OpenAIResponsesStream._text_delta,
    "response.output_text.done": OpenAIResponsesStream._text_done,
    "response.refusal.delta": OpenAIResponsesStream._refusal_delta,
    "response.refusal.done": OpenAIResponsesStream._refusal_done,
    "response.reasoning_summary_text.delta": OpenAIResponsesStream._summary_delta,
    "response.reasoning_summary_text.done": OpenAIResponsesStream._summary_done,
    "response.reasoning_text.delta": OpenAIResponsesStream._reasoning_delta,
    "response.reasoning_text.done": OpenAIResponsesStream._reasoning_done,
    "response.output_item.added": OpenAIResponsesStream._item_added,
    "response.output_item.done": OpenAIResponsesStream._item_done,
    "response.function_call_arguments.delta": OpenAIResponsesStream._args_delta,
    "response.function_call_arguments.done": OpenAIResponsesStream._args_done,
    "response.custom_tool_call_input.delta": OpenAIResponsesStream._args_delta,
    "response.custom_tool_call_input.done": OpenAIResponsesStream._custom_done,
}


class OpenAIResponses(GuardedParser):
    """ProtocolParser for the OpenAI Responses API."""

    name = "openai_responses"
    request_fn = staticmethod(_parse_request)
    response_fn = staticmethod(_parse_response)
    stream_cls = OpenAIResponsesStream
