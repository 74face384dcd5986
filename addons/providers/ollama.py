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

import json
from typing import Any

from addons.framing import SSEEvent
from addons.providers._common import as_int, as_str, load_json, request_object
from addons.providers.base import GuardedParser
from addons.records import RequestInfo, ResponseSummary, ToolCall, ToolResult, Usage

__all__ = ["Ollama", "OllamaStream", "usage_from_ollama"]

_USAGE_KEYS = ("prompt_eval_count", "eval_count", "total_duration", "load_duration", "prompt_eval_duration",
               "eval_duration")  # fmt: skip


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


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
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
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
        info.tool_results.append(ToolResult(call_id, content if isinstance(content, str) else _dump(content),
                                            tool_name=name or None))  # fmt: skip
    texts = [info.system_prompt or "", obj.get("prompt") if isinstance(obj.get("prompt"), str) else ""]
    texts += [m["content"] for m in messages if isinstance(m.get("content"), str)]
    texts.append(_dump(tools) if tools else "")
    info.prompt_text = "\n".join(t for t in texts if t)
    return info


class OllamaStream:
    """Accumulates NDJSON lines (or one whole body) of /api/chat or /api/generate."""

    def __init__(self) -> None:
        self.summary = ResponseSummary()
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._finished = False

    def event(self, ev: SSEEvent) -> None:
        obj = load_json(ev.data)
        if not isinstance(obj, dict):
            self.summary.parse_errors += 1
            return
        try:
            self.chunk(obj)
        except Exception:
            self.summary.parse_errors += 1

    def chunk(self, obj: dict[str, Any]) -> None:
        s = self.summary
        if "error" in obj:
            s.error_type, s.error_message = "error", as_str(obj.get("error")) or _dump(obj.get("error"))
            return
        s.model = as_str(obj.get("model")) or s.model
        message = obj.get("message") if isinstance(obj.get("message"), dict) else {}
        for target, value in ((self._text, message.get("content", obj.get("response"))),
                              (self._thinking, message.get("thinking", obj.get("thinking")))):  # fmt: skip
            if isinstance(value, str) and value:
                target.append(value)
                s.content_started = True
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, dict):
                continue
            fn = call.get("function") if isinstance(call.get("function"), dict) else {}
            name = as_str(fn.get("name")) or ""
            args = fn.get("arguments")
            n = len(s.tool_calls)
            s.tool_calls.append(ToolCall(n, _call_id(call, name, n), name,
                                         args if isinstance(args, str) else _dump(args or {})))  # fmt: skip
            s.content_started = True
        if obj.get("done") is True:
            s.complete = True
            s.stop_reason = as_str(obj.get("done_reason")) or "stop"
            s.usage = usage_from_ollama(obj)

    def finish(self) -> ResponseSummary:
        if not self._finished:
            self._finished = True
            self.summary.text = "".join(self._text)
            self.summary.thinking = "".join(self._thinking)
            if self.summary.error_type is not None:
                self.summary.complete = False
        return self.summary


def _parse_response(body: bytes, status: int) -> ResponseSummary:
    stream = OllamaStream()
    lines = [line for line in body.splitlines() if line.strip()] or [body]
    for line in lines:
        stream.event(SSEEvent(None, line.decode("utf-8", "replace")))
    summary = stream.finish()
    if summary.error_type is not None and (status >= 400 or len(lines) == 1):
        summary.complete = True  # a whole error body is a complete answer
    return summary


class Ollama(GuardedParser):
    """ProtocolParser for Ollama's native chat and generate endpoints."""

    name = "ollama"
    request_fn = staticmethod(_parse_request)
    response_fn = staticmethod(_parse_response)
    stream_cls = OllamaStream
