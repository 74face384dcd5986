"""Ollama's native API (`/api/chat`, `/api/generate`): NDJSON streams and JSON bodies.

Protocol quirks handled:

- `stream` defaults to TRUE when the request leaves it out.
- Streams are one JSON object per line (`application/x-ndjson`); the last has `done: true`,
  `done_reason`, and the counts: `prompt_eval_count` (input) and `eval_count` (output).
- Text is `message.content` (chat) or `response` (generate); thinking is `message.thinking`
  or `thinking`. Tool calls arrive whole with `arguments` as an OBJECT and usually no id:
  they get `ollama_<name>_<n>`, and trailing `role: tool` results are matched to the previous
  assistant message's calls by name, giving the same ids.
- Errors are `{"error": "message"}` (as a body or as a line mid-stream).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from addons.framing import SSEEvent
from addons.providers._common import as_int, as_str, dumps_compact, last_assistant, load_json, request_object
from addons.providers.base import GuardedParser
from addons.providers.events import (
    PARSE_ERROR,
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
from addons.records import RequestInfo, ToolResult, Usage

__all__ = ["RULES", "Ollama", "OllamaEvents", "body_events", "usage_from_ollama"]

RULES = SummaryRules(call_id_prefix="ollama")
_USAGE_KEYS = ("prompt_eval_count", "eval_count", "total_duration", "load_duration", "prompt_eval_duration",
               "eval_duration")  # fmt: skip
_PARSE_ERROR = (PARSE_ERROR,)


def usage_from_ollama(final: dict[str, Any]) -> Usage:
    """Counts of the final (`done: true`) object; raw keeps the counts and durations."""
    raw = {k: final[k] for k in _USAGE_KEYS if k in final}
    return Usage(input_tokens=as_int(final.get("prompt_eval_count")), output_tokens=as_int(final.get("eval_count")),
                 raw=raw or None)  # fmt: skip


def _call_id(call: dict[str, Any], name: str, n: int) -> str:
    return as_str(call.get("id")) or f"ollama_{name}_{n}"


def _parse_request(body: bytes) -> RequestInfo:
    obj, info = request_object(body)
    if obj is None:
        return info
    info.model = as_str(obj.get("model"))
    info.stream = obj.get("stream") is not False
    messages = obj.get("messages") if isinstance(obj.get("messages"), list) else []
    messages = [m for m in messages if isinstance(m, dict)]
    system = [
        m.get("content") for m in messages if m.get("role") == "system" and isinstance(m.get("content"), str)
    ]
    if isinstance(obj.get("system"), str):
        system.insert(0, obj["system"])
    info.system_prompt = "\n".join(system) or None
    info.messages_count = len(messages) if messages else (1 if isinstance(obj.get("prompt"), str) else 0)
    tools = obj.get("tools") if isinstance(obj.get("tools"), list) else []
    info.tools_count = len(tools)
    last = last_assistant(messages)
    pending: dict[str, list[str]] = {}
    if last >= 0:
        for n, call in enumerate(c for c in messages[last].get("tool_calls") or [] if isinstance(c, dict)):
            fn = call.get("function") if isinstance(call.get("function"), dict) else {}
            name = as_str(fn.get("name")) or ""
            pending.setdefault(name, []).append(_call_id(call, name, n))
    for msg in messages[last + 1 :]:
        if msg.get("role") != "tool":
            continue
        name = as_str(msg.get("tool_name")) or as_str(msg.get("name")) or next(iter(pending), "")
        ids = pending.get(name) or []
        call_id = as_str(msg.get("tool_call_id")) or (
            ids.pop(0) if ids else f"ollama_tool_result_{len(info.tool_results)}"
        )
        content = msg.get("content")
        info.tool_results.append(ToolResult(call_id, content if isinstance(content, str) else dumps_compact(content),
                                            tool_name=name or None))  # fmt: skip
    texts = [info.system_prompt or "", obj.get("prompt") if isinstance(obj.get("prompt"), str) else ""]
    texts += [m["content"] for m in messages if isinstance(m.get("content"), str)]
    texts.append(dumps_compact(tools) if tools else "")
    info.prompt_text = "\n".join(t for t in texts if t)
    return info


class OllamaEvents:
    """Reads the NDJSON lines of /api/chat or /api/generate into neutral events."""

    def __init__(self) -> None:
        self._calls = 0
        self._model: Any = None  # the model last said (every line repeats it)

    def events(self, ev: SSEEvent) -> Sequence[LlmEvent]:
        obj = load_json(ev.data)
        return self.chunk(obj) if isinstance(obj, dict) else _PARSE_ERROR

    def end(self) -> Sequence[LlmEvent]:
        return ()

    def chunk(self, obj: dict[str, Any]) -> list[LlmEvent]:
        """The events of one line's object."""
        if "error" in obj:
            return [Error("error", as_str(obj.get("error")) or dumps_compact(obj.get("error")))]
        out: list[LlmEvent] = []
        model = obj.get("model")
        if model != self._model:
            self._model = model
            out.append(Meta(model=as_str(model)))
        message = obj.get("message")
        if type(message) is not dict:
            message = {}
        text = message["content"] if "content" in message else obj.get("response")
        if type(text) is str and text:
            out.append(TextDelta(text))
        thinking = message["thinking"] if "thinking" in message else obj.get("thinking")
        if type(thinking) is str and thinking:
            out.append(ThinkingDelta(thinking))
        calls = message.get("tool_calls")
        for call in calls if type(calls) is list else ():
            if not isinstance(call, dict):
                continue
            fn = call.get("function") if isinstance(call.get("function"), dict) else {}
            args = fn.get("arguments")
            key, self._calls = self._calls, self._calls + 1
            out.append(ToolCallStart(key, as_str(call.get("id")) or "", as_str(fn.get("name")) or ""))
            out.append(ToolCallDelta(key, args if isinstance(args, str) else dumps_compact(args or {})))
            out.append(ToolCallEnd(key))
        if obj.get("done") is True:
            out += [Stop(as_str(obj.get("done_reason")) or "stop"), UsageReport(obj, usage_from_ollama),
                    Done(final=False)]  # fmt: skip
        return out


def body_events(body: bytes, status: int) -> Iterator[LlmEvent]:
    """The neutral events of a whole body: one JSON object, or NDJSON lines read as a stream."""
    lines = [line for line in body.splitlines() if line.strip()] or [body]
    reader = OllamaEvents()
    events: list[LlmEvent] = []
    for line in lines:
        events += reader.events(SSEEvent(None, line.decode("utf-8", "replace")))
    failed = any(isinstance(e, Error) for e in events)
    done = any(isinstance(e, Done) for e in events)
    yield from (e for e in events if not isinstance(e, Done))
    if (done and not failed) or (failed and (status >= 400 or len(lines) == 1)):
        yield Done()  # an error as the whole body is a complete answer; mid-stream, it is not


class Ollama(GuardedParser):
    """ProtocolParser for Ollama's native chat and generate endpoints."""

    name = "ollama"
    rules = RULES
    request_fn = staticmethod(_parse_request)
    body_fn = staticmethod(body_events)
    wire_cls = OllamaEvents
