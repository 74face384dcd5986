"""OpenAI Responses API (`POST /v1/responses`), streamed (SSE or WebSocket events) or not.

Protocol quirks handled:

- System prompt = `instructions` (a string, or input items); without it, the text of the
  `system` / `developer` messages in `input`.
- `input` is a string (one message) or a list of items; `messages_count` counts the items.
- Tool results = EVERY `function_call_output` / `custom_tool_call_output` item of `input`
  (a user message may follow them; clients with `store=false` resend the whole history, and
  `previous_response_id` continuations carry only the new ones). De-duplication by call id
  happens downstream (addons/recorder/traces.py). The tool name comes from the `function_call` item
  with the same `call_id` when the request carries it.
- Stream events carry their type in the JSON `type` (the `event:` line repeats it, and
  WebSocket messages have none). `response.created|in_progress|queued` give id and model;
  `output_text.delta` (and `refusal.delta`, prefixed once with ``[refusal] ``) give text;
  `reasoning_summary_text.delta` and `reasoning_text.delta` give thinking;
  `output_item.added` of a `function_call` (or `custom_tool_call`) starts a tool call keyed
  by `output_index` / `item_id`, recorded with its `call_id` (not the `fc_` item id);
  argument deltas are concatenated raw, and `function_call_arguments.done` /
  `output_item.done` replace them when they disagree (deltas may be missing). A `.done`
  event also reconciles text and thinking parts. The API's own `shell_call` and
  `apply_patch_call` take an object (`action`, `operation`): `shell_call_command.added|delta|done`
  (by `output_index` and `command_index`, no item id) build its `commands`, and
  `apply_patch_call_operation_diff.delta|done` its `diff`, so that a stream cut before the item's
  `done` still records what the model had asked so far.
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

Over 400 lines on purpose: one protocol's wire knowledge (requests, stream events, whole bodies,
errors, the item shapes they share) in one file, as for every provider.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
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
    load_json,
    load_json_object,
    request_object,
)
from addons.providers.base import GuardedParser
from addons.providers.collect import Collector, Stream
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
    TextDone,
    ThinkingDelta,
    ThinkingDone,
    ToolCallArguments,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageReport,
)
from addons.providers.openai_chat import REFUSAL_PREFIX, usage_from_openai
from addons.providers.wire_shapes import decode_responses_delta
from addons.records import RequestInfo, ToolResult, Usage
from addons.responses_calls import CALL_TYPES, RESULT_TYPES, call_arguments, call_name

__all__ = [
    "RULES",
    "OpenAIResponses",
    "OpenAIResponsesStream",
    "ResponsesEvents",
    "body_events",
    "output_events",
    "parse_request_object",
    "stop_reason_of",
    "usage_from_responses",
]

PART_SEP = "\n\n"
RULES = SummaryRules(call_id_prefix="openai", part_sep=PART_SEP)
_SYSTEM_ROLES = ("system", "developer")
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


# -- requests -------------------------------------------------------------------------------


def _item_text(item: Any) -> str:
    if isinstance(item, str):
        return item
    if not isinstance(item, dict):
        return ""
    kind = item.get("type")
    if kind in CALL_TYPES:
        return f"{call_name(item)} {arguments_text(call_arguments(item))}"
    if kind in RESULT_TYPES:
        return content_text(item.get("output"), placeholders=False)
    if kind == "reasoning":
        summary = item.get("summary")
        return content_text(summary, placeholders=False) if isinstance(summary, list) else ""
    return content_text(item.get("content"), placeholders=False)


def _tool_results(items: list[Any]) -> list[ToolResult]:
    names: dict[str, str] = {}
    for item in items:
        if isinstance(item, dict) and item.get("type") in CALL_TYPES:
            call_id, name = as_str(item.get("call_id")), call_name(item)
            if call_id and name:
                names[call_id] = name
    results = []
    for item in items:
        if not (isinstance(item, dict) and item.get("type") in RESULT_TYPES):
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

_PARSE_ERROR = (PARSE_ERROR,)
_UNKNOWN = (UNKNOWN_EVENT,)


def _item_parts(item: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Text parts and thinking parts of one output item (a message or a reasoning item)."""
    text: list[str] = []
    thinking: list[str] = []
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
    return text, thinking


def output_events(output: Any) -> Iterator[LlmEvent]:
    """The events of a response's `output` list (a whole body, or a terminal event's copy)."""
    calls = 0
    for n, item in enumerate(output if isinstance(output, list) else []):
        if not isinstance(item, dict):
            continue
        if item.get("type") in CALL_TYPES:
            key = ("output", calls)
            calls += 1
            name = call_name(item)
            yield ToolCallStart(key, as_str(item.get("call_id")) or as_str(item.get("id")) or "", name)
            yield ToolCallDelta(key, arguments_text(call_arguments(item)))
            yield ToolCallEnd(key, complete=item.get("status") in (None, "completed"))
            continue
        text, thinking = _item_parts(item)
        for i, part in enumerate(text):
            yield TextDelta(part, ("output", n, i))
        for i, part in enumerate(thinking):
            yield ThinkingDelta(part, ("output", n, i))


def _response_events(response: dict[str, Any], event_type: str | None) -> list[LlmEvent]:
    """Id, model, stop reason, usage and error of a response object (body or terminal event)."""
    out: list[LlmEvent] = [Meta(as_str(response.get("id")), as_str(response.get("model")))]
    stop = stop_reason_of(response, event_type)
    if stop is not None:
        out.append(Stop(stop))
    if response.get("usage") is not None:
        out.append(UsageReport(response["usage"], usage_from_responses))
    error = response.get("error")
    if isinstance(error, dict) and error:
        kind = as_str(error.get("code")) or as_str(error.get("type")) or "error"
        out.append(Error(kind, as_str(error.get("message"))))
    elif stop == "failed":
        out.append(Error("failed", None))
    return out


def body_events(body: bytes, status: int) -> Iterator[LlmEvent]:
    """The neutral events of a whole Responses body (a response object, or an error body)."""
    obj = load_json_object(body)
    if obj is None or status >= 400 or (obj.get("object") != "response" and "output" not in obj):
        obj, events = body_object(body, status)  # (a failed response has an `error`: read above)
        yield from events
        if obj is None:
            return
    yield from output_events(obj.get("output"))
    yield from _response_events(obj, None)
    if stop_reason_of(obj) is not None:
        yield Done()
    elif "output" not in obj:
        yield PARSE_ERROR


_ARGUMENT_DELTAS = ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta")


class ResponsesEvents:
    """Reads one Responses event stream (SSE events or WebSocket messages) into neutral events."""

    NATIVE_KIND = 3
    """The compiled framer reads this protocol's output_text deltas itself (`capsem.native`)."""

    def __init__(self) -> None:
        self._refusals: set[Any] = set()
        self._calls: dict[tuple[str, Any], int] = {}  # ("index", output_index) / ("item", id) -> key
        self._count = 0
        self._text_owners: set[Any] = set()  # item ids / output indexes that gave text
        self._thinking_owners: set[Any] = set()
        self._content = False  # any text, thinking or tool call so far
        self._shaped: dict[int, dict[str, Any]] = {}  # call key -> a shell call's action, a patch's
        # operation, as its deltas build it
        self._unsent: set[int] = set()  # calls whose deltas changed their arguments since they were sent

    def events(self, ev: SSEEvent) -> Sequence[LlmEvent]:
        try:
            obj = decode_responses_delta(ev.data)
        except msgspec.DecodeError:  # not a delta event's shape (or not JSON)
            return self.general(ev)
        kind = obj.type
        if kind == "response.output_text.delta":  # most events: straight there
            return self._text(self._key_of(obj.item_id, obj.output_index, obj.content_index), obj.delta)
        if kind == "response.reasoning_summary_text.delta":
            return self._thinking(
                ("s", *self._key_of(obj.item_id, obj.output_index, obj.summary_index)), obj.delta
            )
        if kind in _ARGUMENT_DELTAS:
            return self._args_piece(obj.item_id, obj.output_index, obj.delta)
        if kind == "response.reasoning_text.delta":
            return self._thinking(
                ("r", *self._key_of(obj.item_id, obj.output_index, obj.content_index)), obj.delta
            )
        return self.general(ev)

    def native_run(self, collector: Collector, run: list[Any]) -> None:
        """A run of output_text deltas of one part the compiled framer read: [(item id, content
        index), their non-empty texts...]; what `_text` does for each."""
        key = run[0]
        self._text_owners.add(key[0])
        self._content = True
        del run[0]
        collector.add_texts(run, key)

    def general(self, ev: SSEEvent) -> Sequence[LlmEvent]:
        """Any event: the whole document decoded, dispatched on its `type` (`events` reads the text,
        reasoning and tool argument deltas, most of a stream, into `ResponsesDeltaEvent` first)."""
        try:
            obj = decode_json(ev.data)
        except Exception:  # msgspec refuses it: load_json decides
            obj = load_json(ev.data)
        if type(obj) is not dict:
            return () if ev.data.strip() == "[DONE]" else _PARSE_ERROR
        kind = obj.get("type")
        if not (type(kind) is str and kind):
            kind = ev.event or ""
        handler = _HANDLERS.get(kind)
        if handler is not None:
            return handler(self, obj)
        if kind in _TERMINAL:
            return self._terminal(obj, kind)
        return () if kind.startswith("response.") else _UNKNOWN

    def end(self) -> Sequence[LlmEvent]:
        """Calls never done stay incomplete, with what their deltas said."""
        unsent, self._unsent = sorted(self._unsent), set()
        return tuple(ToolCallArguments(key, arguments_text(self._shaped[key])) for key in unsent)

    # -- text and thinking parts ------------------------------------------------------------

    @staticmethod
    def _key(obj: dict[str, Any], index_key: str) -> tuple[Any, Any]:
        """(item id, or output index without one; part index): which part a piece belongs to."""
        return ResponsesEvents._key_of(obj.get("item_id"), obj.get("output_index"), obj.get(index_key))

    @staticmethod
    def _key_of(item: Any, output_index: Any, index: Any) -> tuple[Any, Any]:
        """`_key` from the fields as sent."""
        if not (type(item) is str and item):
            item = as_int(output_index)
        return item, index if type(index) is int else as_int(index)

    def _text(self, key: tuple[Any, Any], text: Any, whole: bool = False) -> Sequence[LlmEvent]:
        if not (isinstance(text, str) and text):
            return ()
        self._text_owners.add(key[0])
        self._content = True
        return (TextDone(text, key) if whole else TextDelta(text, key),)

    def _thinking(self, key: tuple[str, Any, Any], text: Any, whole: bool = False) -> Sequence[LlmEvent]:
        if not (isinstance(text, str) and text):
            return ()
        self._thinking_owners.add(key[1])
        self._content = True
        return (ThinkingDone(text, key) if whole else ThinkingDelta(text, key),)

    def _text_delta(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        return self._text(self._key(obj, "content_index"), obj.get("delta"))

    def _text_done(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        return self._text(self._key(obj, "content_index"), obj.get("text"), whole=True)

    def _refusal_delta(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        key = self._key(obj, "content_index")
        delta = obj.get("delta")
        if isinstance(delta, str) and delta and key not in self._refusals:
            self._refusals.add(key)
            delta = REFUSAL_PREFIX + delta
        return self._text(key, delta)

    def _refusal_done(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        refusal = obj.get("refusal")
        if not (isinstance(refusal, str) and refusal):
            return ()
        key = self._key(obj, "content_index")
        self._refusals.add(key)
        return self._text(key, REFUSAL_PREFIX + refusal, whole=True)

    def _summary_delta(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        return self._thinking(("s", *self._key(obj, "summary_index")), obj.get("delta"))

    def _summary_done(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        return self._thinking(("s", *self._key(obj, "summary_index")), obj.get("text"), whole=True)

    def _reasoning_delta(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        return self._thinking(("r", *self._key(obj, "content_index")), obj.get("delta"))

    def _reasoning_done(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        return self._thinking(("r", *self._key(obj, "content_index")), obj.get("text"), whole=True)

    # -- tool calls -------------------------------------------------------------------------

    def _call_for(self, item_id: Any, output_index: Any) -> int | None:
        item = as_str(item_id)
        if item is not None and ("item", item) in self._calls:
            return self._calls[("item", item)]
        return self._calls.get(("index", as_int(output_index)))

    def _call(self, obj: dict[str, Any], item: dict[str, Any]) -> tuple[int, list[LlmEvent]]:
        """The call an `output_item` event is about, started if new."""
        key = self._call_for(item.get("id"), obj.get("output_index"))
        if key is not None:
            return key, []
        key, self._count = self._count, self._count + 1
        index = as_int(obj.get("output_index"))
        if index is not None:
            self._calls[("index", index)] = key
        if as_str(item.get("id")):
            self._calls[("item", item["id"])] = key
        self._content = True
        name = call_name(item)
        return key, [ToolCallStart(key, as_str(item.get("call_id")) or as_str(item.get("id")) or "", name)]

    def _item_added(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        item = obj.get("item")
        if not (isinstance(item, dict) and item.get("type") in CALL_TYPES):
            return ()
        key, out = self._call(obj, item)
        arguments = call_arguments(item)
        if item.get("type") == "shell_call" and isinstance(arguments, dict):
            commands = arguments.get("commands")
            self._shaped[key] = {
                **arguments,
                "commands": list(commands) if isinstance(commands, list) else [],
            }
        elif item.get("type") == "apply_patch_call" and isinstance(arguments, dict):
            self._shaped[key] = dict(arguments)
        if initial := arguments_text(arguments):
            out.append(ToolCallDelta(key, initial))
        return out

    def _args_delta(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        return self._args_piece(obj.get("item_id"), obj.get("output_index"), obj.get("delta"))

    def _args_piece(self, item_id: Any, output_index: Any, delta: Any) -> Sequence[LlmEvent]:
        """`_args_delta` from the fields as sent."""
        key = self._call_for(item_id, output_index)
        return (ToolCallDelta(key, delta),) if key is not None and isinstance(delta, str) else ()

    def _args_done(self, obj: dict[str, Any], field: str = "arguments") -> Sequence[LlmEvent]:
        key = self._call_for(obj.get("item_id"), obj.get("output_index"))
        whole = obj.get(field)
        return (ToolCallArguments(key, whole),) if key is not None and isinstance(whole, str) else ()

    def _custom_done(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        return self._args_done(obj, "input")

    def _command(self, obj: dict[str, Any], field: str) -> Sequence[LlmEvent]:
        """`shell_call_command.added|delta|done` (`command`, or a `delta` of it): one command of a
        shell call's `action.commands`, by `command_index` (these events carry no item id)."""
        key = self._call_for(obj.get("item_id"), obj.get("output_index"))
        action = self._shaped.get(key) if key is not None else None
        index, text = obj.get("command_index"), obj.get(field)
        if key is None or action is None or not (type(index) is int and 0 <= index < 10_000):
            return ()
        if not isinstance(text, str):
            return ()
        commands = action.get("commands")
        if not isinstance(commands, list):  # (a patch's operation: not a shell call)
            return ()
        commands.extend([""] * (index + 1 - len(commands)))
        before = commands[index] if isinstance(commands[index], str) else ""
        commands[index] = before + text if field == "delta" else text
        return self._reshaped(key, field != "delta")

    def _diff(self, obj: dict[str, Any], field: str) -> Sequence[LlmEvent]:
        """`apply_patch_call_operation_diff.delta|done`: a patch's `operation.diff`."""
        key = self._call_for(obj.get("item_id"), obj.get("output_index"))
        operation = self._shaped.get(key) if key is not None else None
        text = obj.get(field)
        if key is None or operation is None or not isinstance(text, str):
            return ()
        before = operation.get("diff") if isinstance(operation.get("diff"), str) else ""
        operation["diff"] = before + text if field == "delta" else text
        return self._reshaped(key, field != "delta")

    def _reshaped(self, key: int, whole: bool) -> Sequence[LlmEvent]:
        """A shaped call's arguments as they stand, sent at a `.done` (a delta only marks them:
        the stream's end sends what is unsent, `end`)."""
        if not whole:
            self._unsent.add(key)
            return ()
        self._unsent.discard(key)
        return (ToolCallArguments(key, arguments_text(self._shaped[key])),)

    def _item_done(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        item = obj.get("item")
        if not isinstance(item, dict):
            return ()
        kind = item.get("type")
        if kind in CALL_TYPES:
            key, out = self._call(obj, item)
            self._shaped.pop(key, None)  # the whole item says it all
            self._unsent.discard(key)
            name = call_name(item)
            out.append(ToolCallStart(key, as_str(item.get("call_id")) or "", name))
            whole = call_arguments(item)
            if whole is not None:
                out.append(ToolCallArguments(key, arguments_text(whole)))
            out.append(ToolCallEnd(key))
            return out
        if kind not in ("message", "reasoning") or not isinstance(item.get("id"), str):
            return ()
        # parts whose deltas were all lost: the item's own text, unless some part of it came
        text, thinking = (PART_SEP.join(p for p in parts if p) for parts in _item_parts(item))
        ids = (item["id"], as_int(obj.get("output_index")))
        out = []
        if not (ids[0] in self._text_owners or ids[1] in self._text_owners):
            out += self._text((item["id"], None), text, whole=True)
        if not (ids[0] in self._thinking_owners or ids[1] in self._thinking_owners):
            out += self._thinking(("i", item["id"], None), thinking, whole=True)
        return out

    # -- lifecycle --------------------------------------------------------------------------

    def _start(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        response = obj.get("response")
        if not isinstance(response, dict):
            return ()
        return (Meta(as_str(response.get("id")), as_str(response.get("model"))),)

    def _terminal(self, obj: dict[str, Any], kind: str) -> Sequence[LlmEvent]:
        out: list[LlmEvent] = []
        response = obj.get("response")
        if isinstance(response, dict):
            out += _response_events(response, kind)
            if not self._content and response.get("output") is not None:
                out += output_events(response["output"])  # the deltas said nothing
        if kind == "response.failed" and not any(isinstance(e, Error) for e in out):
            out.append(Error("failed", None))
        out.append(Done())
        return out

    def _error(self, obj: dict[str, Any]) -> Sequence[LlmEvent]:
        code, message = as_str(obj.get("code")), as_str(obj.get("message"))
        if code is None:
            fields = error_fields(obj)
            if fields is not None:
                code, message = fields
        return Error(code or "error", message), Done()


_HANDLERS: dict[str, Callable[[ResponsesEvents, dict[str, Any]], Sequence[LlmEvent]]] = {
    "response.output_text.delta": ResponsesEvents._text_delta,
    "response.output_text.done": ResponsesEvents._text_done,
    "response.refusal.delta": ResponsesEvents._refusal_delta,
    "response.refusal.done": ResponsesEvents._refusal_done,
    "response.reasoning_summary_text.delta": ResponsesEvents._summary_delta,
    "response.reasoning_summary_text.done": ResponsesEvents._summary_done,
    "response.reasoning_text.delta": ResponsesEvents._reasoning_delta,
    "response.reasoning_text.done": ResponsesEvents._reasoning_done,
    "response.output_item.added": ResponsesEvents._item_added,
    "response.output_item.done": ResponsesEvents._item_done,
    "response.function_call_arguments.delta": ResponsesEvents._args_delta,
    "response.function_call_arguments.done": ResponsesEvents._args_done,
    "response.custom_tool_call_input.delta": ResponsesEvents._args_delta,
    "response.custom_tool_call_input.done": ResponsesEvents._custom_done,
    "response.shell_call_command.added": lambda r, obj: r._command(obj, "command"),
    "response.shell_call_command.delta": lambda r, obj: r._command(obj, "delta"),
    "response.shell_call_command.done": lambda r, obj: r._command(obj, "command"),
    "response.apply_patch_call_operation_diff.delta": lambda r, obj: r._diff(obj, "delta"),
    "response.apply_patch_call_operation_diff.done": lambda r, obj: r._diff(obj, "diff"),
    "response.created": ResponsesEvents._start,
    "response.in_progress": ResponsesEvents._start,
    "response.queued": ResponsesEvents._start,
    "error": ResponsesEvents._error,
}


class OpenAIResponsesStream(Stream):
    """A Responses stream interpreter (SSE or WebSocket events); `terminal` says the response ended."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(ResponsesEvents(), RULES)


class OpenAIResponses(GuardedParser):
    """ProtocolParser for the OpenAI Responses API."""

    name = "openai_responses"
    rules = RULES
    request_fn = staticmethod(_parse_request)
    body_fn = staticmethod(body_events)
    wire_cls = ResponsesEvents
