"""Google Gemini (`:generateContent`, `:streamGenerateContent`), Vertex AI and Code Assist.

Protocol quirks handled:

- The model is in the URL (`/models/<model>:generateContent`; the route captures it), except
  for Gemini CLI's Code Assist envelope (`/v1internal:generateContent`), whose request is
  `{"model", "project", "request": {...}}` and whose responses are `{"response": {...}}`.
- Streams come as SSE with `alt=sse`, or as one JSON array streamed element by element
  without it (`addons/providers/__init__.py: stream_framing` says "json-array" then). Every element is a whole
  GenerateContentResponse holding the next piece of text, not a delta event.
- `usageMetadata` is a running total on every chunk: the last one wins. `promptTokenCount`
  already includes `cachedContentTokenCount`; `thoughtsTokenCount` is billed as output but is
  not part of `candidatesTokenCount`, so output = candidates + thoughts.
- `thought: true` parts are thinking. `functionCall` parts arrive whole (args is an object);
  without an `id`, calls get `gemini_<name>_<n>` (n = the call's position in the response),
  and a trailing `functionResponse` without id is matched to the previous model turn's call
  of the same name, giving the same synthetic id.
- Errors are `{"error": {"code", "message", "status"}}` (array-wrapped in JSON-array mode,
  possibly after an HTTP 200 inside a stream): `error_type` is the `status` string.
- A prompt blocked before any candidate (`promptFeedback.blockReason`) ends the call with
  that reason as stop reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from addons.framing import SSEEvent
from addons.providers._common import as_int, as_str, decode_json, dumps_compact, load_json, request_object
from addons.providers.base import GuardedParser
from addons.providers.collect import Collector
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
from addons.providers.wire_shapes import GeminiChunk, decode_gemini_chunk, is_object
from addons.records import ERROR_TEXT_KEPT, RequestInfo, ToolResult, Usage

__all__ = ["RULES", "Gemini", "GeminiEvents", "body_events", "usage_from_gemini"]

RULES = SummaryRules(call_id_prefix="gemini")
_PARSE_ERROR = (PARSE_ERROR,)
_NOT_FINAL = Done(final=False)


def usage_from_gemini(raw: Any) -> Usage:
    """Normalize `usageMetadata` (the one place that knows its semantics)."""
    if not isinstance(raw, dict):
        return Usage(raw=raw)
    candidates, thoughts = as_int(raw.get("candidatesTokenCount")), as_int(raw.get("thoughtsTokenCount"))
    output = None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0)
    extra = {}
    tool_prompt = as_int(raw.get("toolUsePromptTokenCount"))
    if tool_prompt:
        extra["tool_use_prompt_tokens"] = tool_prompt
    return Usage(
        input_tokens=as_int(raw.get("promptTokenCount")),
        output_tokens=output,
        cache_read=as_int(raw.get("cachedContentTokenCount")),
        reasoning=thoughts,
        extra=extra,
        raw=raw,
    )


def _error(obj: dict[str, Any]) -> tuple[str | None, str | None] | None:
    err = obj.get("error")
    if not isinstance(err, dict):
        return None
    kind = as_str(err.get("status")) or (str(err["code"]) if err.get("code") is not None else None)
    return kind, as_str(err.get("message"))


def _unwrap(obj: dict[str, Any]) -> dict[str, Any]:
    """The GenerateContentResponse inside a Code Assist `{"response": ...}` envelope."""
    if isinstance(obj.get("response"), dict) and "candidates" not in obj:
        return obj["response"]
    return obj


def _parts(content: Any) -> list[dict[str, Any]]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _call_id(call: dict[str, Any], name: str, n: int) -> str:
    return as_str(call.get("id")) or f"gemini_{name}_{n}"


# -- requests -------------------------------------------------------------------------------


def _trailing_results(contents: list[Any]) -> list[ToolResult]:
    """The functionResponse parts at the end of `contents`, with ids matching their calls."""
    start = len(contents)
    while start > 0 and any("functionResponse" in p for p in _parts(contents[start - 1])):
        start -= 1
    calls: dict[str, list[str]] = {}
    if start > 0:
        for n, part in enumerate(p for p in _parts(contents[start - 1]) if "functionCall" in p):
            call = part["functionCall"] if isinstance(part["functionCall"], dict) else {}
            name = as_str(call.get("name")) or ""
            calls.setdefault(name, []).append(_call_id(call, name, n))
    results = []
    for content in contents[start:]:
        for part in _parts(content):
            resp = part.get("functionResponse")
            if not isinstance(resp, dict):
                continue
            name = as_str(resp.get("name")) or ""
            pending = calls.get(name) or []
            call_id = as_str(resp.get("id")) or (
                pending.pop(0) if pending else f"gemini_{name}_{len(results)}"
            )
            body = resp.get("response")
            results.append(
                ToolResult(call_id, "" if body is None else dumps_compact(body), tool_name=name or None)
            )
    return results


def _parse_request(body: bytes) -> RequestInfo:
    obj, info = request_object(body)
    if obj is None:
        return info
    if isinstance(obj.get("request"), dict):  # Code Assist envelope
        info.model = as_str(obj.get("model"))
        obj = obj["request"]
    system = obj.get("systemInstruction") or obj.get("system_instruction")
    info.system_prompt = (
        "\n".join(p["text"] for p in _parts(system) if isinstance(p.get("text"), str)) or None
    )
    contents = obj.get("contents") if isinstance(obj.get("contents"), list) else []
    info.messages_count = len(contents)
    tools = obj.get("tools") if isinstance(obj.get("tools"), list) else []
    declarations = [
        d for t in tools if isinstance(t, dict)
        for d in (t.get("functionDeclarations") or t.get("function_declarations") or []) if isinstance(d, dict)
    ]  # fmt: skip
    info.tools_count = len(declarations)
    info.tool_results = _trailing_results(contents)
    texts = [info.system_prompt or ""]
    for content in contents:
        for part in _parts(content):
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif "functionCall" in part or "functionResponse" in part:
                texts.append(dumps_compact(part.get("functionCall") or part.get("functionResponse")))
    texts.append(dumps_compact(declarations) if declarations else "")
    info.prompt_text = "\n".join(t for t in texts if t)
    return info


# -- responses ------------------------------------------------------------------------------


class GeminiEvents:
    """Reads GenerateContentResponse chunks (SSE events or JSON-array elements) into neutral events.

    A plain chunk is decoded into `GeminiChunk` and read by `typed`; anything else (an error, the
    Code Assist envelope, a candidate or part that is not an object, an array, JSON msgspec
    refuses) goes through `general`, the reading of the whole decoded document. Both give the
    same summary for a chunk both can read (tests/providers/test_typed_paths.py).
    """

    NATIVE_KIND = 4
    """The compiled framer reads this protocol's text chunks itself (`capsem.native`)."""

    def __init__(self) -> None:
        self._calls = 0
        self._meta: tuple[Any, Any] = (None, None)  # the id and model last said (every chunk repeats them)

    def native_state(self) -> tuple[Any, Any]:
        """The id and model last said: the compiled framer takes a chunk only when it repeats them."""
        return self._meta

    @staticmethod
    def native_run(collector: Collector, run: list[Any]) -> None:
        """A run of text-only chunks the compiled framer read: [their non-empty texts, their
        non-empty thoughts, the raw JSON of the last `usageMetadata` object or None, the last
        non-empty finishReason or None]. Each of these replaces or extends its own part of the
        summary, so one run gives what its chunks one by one give."""
        texts, thoughts, usage, reason = run
        if texts:
            collector.add_texts(texts, None)
        if thoughts:
            collector.add_thinking(thoughts, None)
        if usage is not None:  # a running total: the last one wins
            collector.add(UsageReport(msgspec.Raw(usage), usage_from_gemini))
        if reason is not None:  # the last one wins; Done(final=False) only notes that one came
            collector.add(Stop(reason))
            collector.add(_NOT_FINAL)

    def events(self, ev: SSEEvent) -> Sequence[LlmEvent]:
        try:
            obj = decode_gemini_chunk(ev.data)
        except msgspec.DecodeError:  # not a plain chunk (or not JSON)
            return self.general(ev)
        if obj.error is not None or obj.response is not None or not obj.candidates:
            return self.general(ev)
        return self.typed(obj)

    def typed(self, obj: GeminiChunk) -> list[LlmEvent]:
        """`chunk` for a decoded plain chunk that has candidates (no error, no envelope)."""
        out: list[LlmEvent] = []
        meta = (obj.responseId, obj.modelVersion)
        if meta != self._meta:
            self._meta = meta
            out.append(Meta(as_str(meta[0]), as_str(meta[1])))
        usage = obj.usageMetadata
        if is_object(usage):  # an object: a running total, the last one wins (decoded then)
            out.append(UsageReport(usage, usage_from_gemini))
        candidate = obj.candidates[0]  # type: ignore[index]  (events() checked there is one)
        parts = candidate.content.parts if candidate.content is not None else None
        for part in parts or ():
            text = part.text
            if type(text) is str and text:
                out.append(ThinkingDelta(text) if part.thought is True else TextDelta(text))
            if type(part.functionCall) is dict:
                out += self._call(part.functionCall)
        reason = candidate.finishReason
        if type(reason) is str and reason:
            out += [Stop(reason), Done(final=False)]
        return out

    def _call(self, call: dict[str, Any]) -> list[LlmEvent]:
        key, self._calls = self._calls, self._calls + 1
        args = call.get("args")
        return [
            ToolCallStart(key, as_str(call.get("id")) or "", as_str(call.get("name")) or ""),
            ToolCallDelta(key, dumps_compact(args if args is not None else {})),
            ToolCallEnd(key),
        ]

    def general(self, ev: SSEEvent) -> Sequence[LlmEvent]:
        """Any event: the whole document decoded, then read by `chunk`."""
        try:
            obj = decode_json(ev.data)
        except Exception:  # msgspec refuses it: load_json decides
            obj = load_json(ev.data)
        if obj is None:
            return () if ev.data.strip() in ("", "[DONE]") else _PARSE_ERROR
        if not isinstance(obj, list):
            return self.chunk(obj)
        out: list[LlmEvent] = []
        for chunk in obj:
            out += self.chunk(chunk)
        return out

    def end(self) -> Sequence[LlmEvent]:
        return ()

    def chunk(self, obj: Any) -> list[LlmEvent]:
        """The events of one whole GenerateContentResponse (or error object)."""
        if type(obj) is not dict:
            return [PARSE_ERROR]
        error = _error(obj)
        if error is not None:
            return [Error(*error)]
        obj = _unwrap(obj)
        out: list[LlmEvent] = []
        meta = (obj.get("responseId"), obj.get("modelVersion"))
        if meta != self._meta:
            self._meta = meta
            out.append(Meta(as_str(meta[0]), as_str(meta[1])))
        usage = obj.get("usageMetadata")
        if type(usage) is dict:  # a running total: the last one wins
            out.append(UsageReport(usage, usage_from_gemini))
        candidates = obj.get("candidates")
        if not (type(candidates) is list and candidates):
            feedback = obj.get("promptFeedback")
            block = feedback.get("blockReason") if isinstance(feedback, dict) else None
            if isinstance(block, str):
                out += [Stop(block), Done(final=False)]
            return out
        candidate = candidates[0] if type(candidates[0]) is dict else {}
        content = candidate.get("content")
        parts = content.get("parts") if type(content) is dict else None
        for part in parts if type(parts) is list else ():
            if type(part) is not dict:
                continue
            text = part.get("text")
            if type(text) is str and text:
                out.append(ThinkingDelta(text) if part.get("thought") is True else TextDelta(text))
            call = part.get("functionCall")
            if type(call) is dict:
                out += self._call(call)
        reason = candidate.get("finishReason")
        if type(reason) is str and reason:
            out += [Stop(reason), Done(final=False)]
        return out


def body_events(body: bytes, status: int) -> Iterator[LlmEvent]:
    """The neutral events of a whole body: one response, an array of chunks, or an error."""
    obj = load_json(body)
    if obj is None:
        yield PARSE_ERROR
        if status >= 400:
            yield Error(None, f"HTTP {status}: {body[:ERROR_TEXT_KEPT].decode('utf-8', 'replace')}")
        return
    chunks = GeminiEvents()
    events: list[LlmEvent] = []
    for chunk in obj if isinstance(obj, list) else [obj]:
        events += chunks.chunk(chunk)
    yield from events
    errors = [e for e in events if isinstance(e, Error)]
    if status >= 400 or (errors and errors[-1].type is not None):
        yield Done()  # a whole error body is a complete answer


class Gemini(GuardedParser):
    """ProtocolParser for the Gemini API, Vertex AI and the Code Assist envelope."""

    name = "gemini"
    rules = RULES
    request_fn = staticmethod(_parse_request)
    body_fn = staticmethod(body_events)
    wire_cls = GeminiEvents
