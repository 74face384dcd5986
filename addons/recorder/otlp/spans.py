"""A session's rows as OpenTelemetry spans, following the GenAI semantic conventions (pure).

One trace per turn (`turn_id`): a root `invoke_agent` span per turn carrying
`gen_ai.conversation.id` (the session id); under it one `chat {model}` CLIENT span per model call
and one `execute_tool {name}` span per tool call whose result came back (from the end of the call
that asked for it to the start of the call that carried the result: inferred, capsem never sees
the tool run); an MCP call is a CLIENT span under the `execute_tool` span of the model tool call it
ran (else under the turn of its time). A subagent's calls and tools hang under the `execute_tool`
span of the tool call that started it. Span and trace ids are hashes of capsem's ids, so an export
done twice is the same data.

The builders take plain rows (`Rows`, read by `addons.recorder.otlp.read`) and return the SDK's
`ReadableSpan`s, which its OTLP exporter sends as they are.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from capsem import __version__

PROFILES = ("latest", "compat")
PROVIDERS = {
    "anthropic": "anthropic",
    "openai": "openai",
    "azure": "azure.ai.openai",
    "gemini": "gcp.gemini",
    "vertex": "gcp.vertex_ai",
    "bedrock": "aws.bedrock",
    "xai": "x_ai",
    "mistral": "mistral_ai",
}
"""capsem's provider names -> `gen_ai.provider.name` where the conventions name it differently."""
SCOPE = InstrumentationScope("capsem", __version__)
INFERRED = "capsem.span.inferred"
"""True on spans whose times capsem inferred (a tool's run, between two model calls)."""


@dataclass(frozen=True)
class Options:
    content: bool = False
    """Message content on the spans (`export.otlp.content`)."""
    profile: str = "latest"
    """`compat` adds the older names backends still read."""


@dataclass
class Rows:
    """What one export step turns into spans (`addons.recorder.otlp.read.rows`)."""

    session_id: str
    calls: list[dict] = field(default_factory=list)
    """New model calls, with `port` (of their net event) and, with content, `inputs`/`outputs`."""
    tools: list[dict] = field(default_factory=list)
    """Tool calls whose result came in a new call: the tool call's columns, `asked_end` (end of
    the call that asked), `carried_start` (start of the call that carried the result),
    `result`, `is_error`, `asked_turn`, `asked_parent` (the asking call's turn and parent)."""
    mcp: list[dict] = field(default_factory=list)
    """New MCP calls, with `turn_key` (the turn they ran in, for those no tool call links)."""
    parents: dict[int, dict] = field(default_factory=dict)
    """tool_calls.id -> {event_id, turn_key}: the tool calls new spans hang under."""
    turns: list[dict] = field(default_factory=list)
    """With the session finished: each turn's key, start and end (its root spans)."""


def turn_key(call: dict) -> str:
    """The turn a call belongs to: its `turn_id`, else its trace, else itself."""
    return call.get("turn_id") or call.get("trace_id") or f"call:{call['event_id']}"


def _hash(*parts: str, size: int) -> int:
    digest = hashlib.sha256("\0".join(parts).encode()).digest()
    return int.from_bytes(digest[:size], "big") or 1  # 0 is the invalid id


def trace_id(session_id: str, turn: str) -> int:
    return _hash(session_id, "trace", turn, size=16)


def span_id(session_id: str, kind: str, key: str) -> int:
    return _hash(session_id, kind, key, size=8)


def nanos(timestamp: str) -> int:
    """session.db's RFC 3339 UTC text -> Unix nanoseconds."""
    moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def call_end(call: dict) -> int:
    return nanos(call["timestamp"]) + int(call.get("duration_ms") or 0) * 1_000_000


def _context(trace: int, span: int) -> SpanContext:
    return SpanContext(trace, span, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))


class Builder:
    """Turns `Rows` of one session into spans."""

    def __init__(self, session_id: str, options: Options) -> None:
        self.session_id = session_id
        self.options = options
        self.resource = Resource.create({"service.name": "capsem", "service.version": __version__})

    # ids ---------------------------------------------------------------------------------------
    def turn_context(self, turn: str) -> SpanContext:
        return _context(trace_id(self.session_id, turn), span_id(self.session_id, "turn", turn))

    def tool_context(self, turn: str, tool_event_id: str) -> SpanContext:
        return _context(trace_id(self.session_id, turn), span_id(self.session_id, "tool", tool_event_id))

    def parent_of(self, turn: str, parent_tool_call_id: int | None, parents: dict[int, dict]) -> SpanContext:
        """A call's (or its tools') parent: the subagent's tool call span, else the turn."""
        parent = parents.get(parent_tool_call_id) if parent_tool_call_id else None
        if parent is not None:
            return self.tool_context(turn, parent["event_id"])
        return self.turn_context(turn)

    def span(self, name: str, context: SpanContext, parent: SpanContext | None, kind: SpanKind,
             attributes: dict[str, Any], start: int, end: int, error: str | None = None) -> ReadableSpan:  # fmt: skip
        attributes = {k: v for k, v in attributes.items() if v is not None}
        attributes["gen_ai.conversation.id"] = self.session_id
        if self.options.profile == "compat":
            attributes["session.id"] = self.session_id
        status = Status(StatusCode.ERROR, error) if error else Status(StatusCode.UNSET)
        return ReadableSpan(name, context=context, parent=parent, resource=self.resource, attributes=attributes,
                            kind=kind, status=status, start_time=start, end_time=max(start, end),
                            instrumentation_scope=SCOPE)  # fmt: skip

    # spans -------------------------------------------------------------------------------------
    def spans(self, rows: Rows) -> list[ReadableSpan]:
        out = [self.chat(call, rows.parents) for call in rows.calls]
        out += [self.tool(tool, rows.parents) for tool in rows.tools]
        out += [self.mcp(call, rows.parents) for call in rows.mcp]
        out += [self.turn(turn) for turn in rows.turns]
        return out

    def turn(self, turn: dict) -> ReadableSpan:
        attributes: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "capsem.turn.id": turn["key"],
                                      "capsem.turn.calls": turn["calls"]}  # fmt: skip
        if self.options.profile == "compat":
            attributes["openinference.span.kind"] = "AGENT"
        return self.span("invoke_agent", self.turn_context(turn["key"]), None, SpanKind.INTERNAL, attributes,
                         turn["start"], turn["end"])  # fmt: skip

    def chat(self, call: dict, parents: dict[int, dict]) -> ReadableSpan:
        turn = turn_key(call)
        operation = "generate_content" if call["provider"] in ("gemini", "vertex") else "chat"
        model = call.get("model") or call.get("response_model") or ""
        usage = _json(call.get("usage_details"))
        cost = _json(call.get("cost_details")).get("parts", {})
        status = call.get("status_code")
        error = call.get("error_type") or (str(status) if status and status >= 400 else None)
        if error is None and not status:
            error = "no_response"
        start = nanos(call["timestamp"])
        reasons = [call["stop_reason"]] if call.get("stop_reason") else None
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": PROVIDERS.get(call["provider"], call["provider"]),
            "gen_ai.request.model": call.get("model"),
            "gen_ai.response.model": call.get("response_model"),
            "gen_ai.response.id": call.get("message_id"),
            "gen_ai.response.finish_reasons": reasons,
            "gen_ai.request.stream": bool(call.get("stream")),
            "gen_ai.usage.input_tokens": call.get("input_tokens"),
            "gen_ai.usage.output_tokens": call.get("output_tokens"),
            "gen_ai.usage.cache_read.input_tokens": usage.get("cache_read"),
            "gen_ai.usage.cache_creation.input_tokens": usage.get("cache_write"),
            "gen_ai.usage.reasoning.output_tokens": usage.get("reasoning"),
            "server.address": call.get("host"),
            "server.port": call.get("port"),
            "error.type": error,
            "http.response.status_code": status,
            "capsem.model_call.id": call["id"],
            "capsem.event_id": call["event_id"],
            "capsem.cost.usd": call.get("estimated_cost_usd"),
            "gen_ai.usage.cost.total_usd": call.get("estimated_cost_usd"),
            "capsem.stop_reason": call.get("stop_reason"),
        }
        if call.get("ttft_ms") is not None and call.get("stream"):
            attributes["gen_ai.response.time_to_first_chunk"] = call["ttft_ms"] / 1000
        if call["provider"] == "openai" and call.get("protocol") in ("openai_chat", "openai_responses"):
            attributes["openai.api.type"] = (
                "responses" if call["protocol"] == "openai_responses" else "chat_completions"
            )
        for part, value in cost.items():  # input, cache_write, cache_read, output, reasoning (USD)
            attributes[f"gen_ai.usage.cost.{part}_usd"] = float(value)
        if call.get("cache_break_cause"):  # this call read less from the prompt cache than was cached
            attributes["capsem.cache_break.cause"] = call["cache_break_cause"]
            attributes["capsem.cache_break.item"] = call.get("cache_break_item")
            attributes["capsem.cache_break.extra_cost_usd"] = call.get("cache_break_cost_usd")
        if self.options.profile == "compat":
            attributes.update(_compat_usage(call, usage, model))
        if self.options.content:
            attributes.update(_content(call))
        name = f"{operation} {model}".strip()
        parent = self.parent_of(turn, call.get("parent_tool_call_id"), parents)
        context = _context(parent.trace_id, span_id(self.session_id, "call", call["event_id"]))
        return self.span(name, context, parent, SpanKind.CLIENT, attributes, start, call_end(call), error)

    def tool(self, tool: dict, parents: dict[int, dict]) -> ReadableSpan:
        turn = tool["asked_turn"]
        error = "tool_error" if tool.get("is_error") else None
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool["tool_name"],
            "gen_ai.tool.call.id": tool["call_id"],
            "gen_ai.tool.type": "extension" if tool.get("origin") == "mcp" else "function",
            "error.type": error,
            INFERRED: True,
            "capsem.tool_call.id": tool["id"],
            "capsem.event_id": tool["event_id"],
            "capsem.tool.origin": tool.get("origin"),
            "capsem.tool.decision": tool.get("decision"),
        }
        if self.options.profile == "compat":
            attributes["openinference.span.kind"] = "TOOL"
            attributes["tool.name"] = tool["tool_name"]
        if self.options.content:
            attributes["gen_ai.tool.call.arguments"] = tool.get("arguments")
            attributes["gen_ai.tool.call.result"] = tool.get("result")
        parent = self.parent_of(turn, tool.get("asked_parent"), parents)
        context = self.tool_context(turn, tool["event_id"])
        return self.span(f"execute_tool {tool['tool_name']}", context, parent, SpanKind.INTERNAL, attributes,
                         tool["asked_end"], tool["carried_start"], error)  # fmt: skip

    def mcp(self, call: dict, parents: dict[int, dict]) -> ReadableSpan:
        linked = parents.get(call.get("tool_call_id") or 0)
        turn = linked["turn_key"] if linked else call["turn_key"]
        if linked:
            parent: SpanContext | None = self.tool_context(turn, linked["event_id"])
        else:
            parent = self.turn_context(turn) if call.get("has_turn") else None
        method = call["method"]
        target = call.get("tool_name")
        error = call.get("error_message")
        error_type = None
        if call.get("is_error"):
            error_type = "tool_error"
        elif error or (call.get("status_code") or 0) >= 400:
            error_type = str(
                _jsonrpc_code(call.get("response_preview")) or call.get("status_code") or "error"
            )
        address, port = _address(call.get("endpoint"))
        attributes: dict[str, Any] = {
            "mcp.method.name": method,
            "jsonrpc.request.id": call.get("request_id") or None,
            "gen_ai.tool.name": target if method == "tools/call" else None,
            "gen_ai.operation.name": "execute_tool" if method == "tools/call" else None,
            "mcp.protocol.version": call.get("protocol_version"),
            "mcp.session.id": call.get("mcp_session"),
            "network.transport": "tcp",
            "network.protocol.name": "http",
            "server.address": address,
            "server.port": port,
            "rpc.response.status_code": _jsonrpc_code(call.get("response_preview")),
            "error.type": error_type,
            "capsem.mcp_call.id": call["id"],
            "capsem.event_id": call["event_id"],
            "capsem.mcp.server": call.get("server_name"),
            "capsem.mcp.decision": call.get("decision"),
        }
        if self.options.content:
            attributes["gen_ai.tool.call.arguments"] = call.get("request_preview")
            attributes["gen_ai.tool.call.result"] = call.get("response_preview")
        trace = parent.trace_id if parent else trace_id(self.session_id, f"mcp:{call['event_id']}")
        start = nanos(call["timestamp"])
        end = start + int(call.get("duration_ms") or 0) * 1_000_000
        name = f"{method} {target}" if target else method
        context = _context(trace, span_id(self.session_id, "mcp", call["event_id"]))
        return self.span(
            name,
            context,
            parent,
            SpanKind.CLIENT,
            attributes,
            start,
            end,
            error_type and (error or error_type),
        )


def _json(text: str | None) -> dict:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _jsonrpc_code(preview: str | None) -> int | None:
    error = _json(preview).get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) else None


def _address(endpoint: str | None) -> tuple[str | None, int | None]:
    if not endpoint:
        return None, None
    parts = urlsplit(endpoint if "//" in endpoint else f"//{endpoint}")
    try:
        return parts.hostname, parts.port
    except ValueError:
        return parts.hostname, None


def _compat_usage(call: dict, usage: dict, model: str) -> dict[str, Any]:
    """The older names: GenAI before v1.37, OpenLLMetry/OpenLIT, OpenInference (Phoenix)."""
    out: dict[str, Any] = {
        "gen_ai.system": call["provider"],
        "gen_ai.usage.prompt_tokens": call.get("input_tokens"),
        "gen_ai.usage.completion_tokens": call.get("output_tokens"),
        "gen_ai.usage.cache_read_input_tokens": usage.get("cache_read"),
        "gen_ai.usage.cache_creation_input_tokens": usage.get("cache_write"),
        "gen_ai.usage.cost": call.get("estimated_cost_usd"),
        "openinference.span.kind": "LLM",
        "llm.provider": call["provider"],
        "llm.model_name": model or None,
        "llm.token_count.prompt": call.get("input_tokens"),
        "llm.token_count.completion": call.get("output_tokens"),
        "llm.token_count.prompt_details.cache_read": usage.get("cache_read"),
        "llm.token_count.prompt_details.cache_write": usage.get("cache_write"),
        "llm.token_count.completion_details.reasoning": usage.get("reasoning"),
        "llm.cost.total": call.get("estimated_cost_usd"),
    }
    if call.get("input_tokens") is not None and call.get("output_tokens") is not None:
        out["llm.token_count.total"] = call["input_tokens"] + call["output_tokens"]
    return out


def _content(call: dict) -> dict[str, Any]:
    """The opt-in content attributes, as JSON text (the conventions' form where attributes are flat)."""
    inputs = call.get("inputs") or []
    system = [_loads(i["content"]) for i in inputs if i["kind"] == "system"]
    tools = [_loads(i["content"]) for i in inputs if i["kind"] == "tool_definition"]
    messages = [_message(i) for i in inputs if i["kind"] not in ("system", "tool_definition")]
    parts: list[dict] = []
    if call.get("thinking_content"):
        parts.append({"type": "reasoning", "content": call["thinking_content"]})
    if call.get("text_content"):
        parts.append({"type": "text", "content": call["text_content"]})
    for tool in call.get("outputs") or []:
        parts.append({"type": "tool_call", "id": tool["call_id"], "name": tool["tool_name"],
                      "arguments": _loads(tool.get("arguments"))})  # fmt: skip
    output = [{"role": "assistant", "parts": parts, "finish_reason": call.get("stop_reason") or ""}]
    dump = json.dumps
    return {
        "gen_ai.system_instructions": dump(system, ensure_ascii=False) if system else None,
        "gen_ai.tool.definitions": dump(tools, ensure_ascii=False) if tools else None,
        "gen_ai.input.messages": dump(messages, ensure_ascii=False) if messages else None,
        "gen_ai.output.messages": dump(output, ensure_ascii=False) if parts else None,
    }


def _loads(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


def _message(item: dict) -> dict:
    """One input item in the conventions' message shape (role and parts)."""
    value = _loads(item["content"])
    kind = item["kind"]
    if kind == "tool_call":
        part = {
            "type": "tool_call",
            "id": item.get("call_id"),
            "name": item.get("tool_name"),
            "arguments": value,
        }
        return {"role": "assistant", "parts": [part]}
    if kind == "tool_result":
        return {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": item.get("call_id"), "response": value}],
        }
    content = value.get("content", value) if isinstance(value, dict) else value
    blocks = content if isinstance(content, list) else [content]
    parts = [{"type": "text", "content": b} if isinstance(b, str)
             else {"type": "text", "content": b["text"]} if isinstance(b, dict) and isinstance(b.get("text"), str)
             else {"type": str(b.get("type", "generic")) if isinstance(b, dict) else "generic", "content": b}
             for b in blocks]  # fmt: skip
    return {"role": item.get("role") or "user", "parts": parts}
