"""Pure record builders: a finished flow (or WebSocket turn) in, the rows that record it out.

Nothing here touches SQLite or mitmproxy. Decoding, parsing, usage, pricing and trace linking
produce complete rows with their ids and links already set (`capsem/store/rows.py`); the recorder
hands them to the writer. The only state is passed in explicitly: the id minter, the trace
tracker (which tool calls are pending) and the MCP ledger (which MCP calls ran which tools).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

from addons.body import Scrub, cap_text
from addons.conversations import SUBAGENT_TOOLS, Conversations, Spawn
from addons.decode import BodyDecoder
from addons.items import Item
from addons.mcp.wire import mcp_tool_name
from addons.messages import FlowEnded, RequestHead, Route
from addons.recorder.items_rows import item_rows
from addons.recorder.mcp_ledger import McpLedger
from addons.recorder.outcome import row_decision
from addons.recorder.previews import KEPT_PREVIEW_BYTES
from addons.recorder.traces import TraceTracker
from addons.records import ERROR_MESSAGE_BYTES, RequestInfo, ResponseSummary
from capsem.ids import rfc3339
from capsem.redact import Scrubber, headers_json, redact_query
from capsem.settings import CaptureSettings
from capsem.store.rows import (
    ApprovalRow,
    IdMinter,
    ModelCall,
    NetEvent,
    Row,
    SubstitutionEvent,
    ToolCall,
    ToolResponse,
    new_event_id,
)
from pricing.estimate import ESTIMATOR, count_tokens

ProcessInfo = tuple[str | None, int | None]


def ms(start: float | None, end: float | None) -> int | None:
    """Milliseconds from `start` to `end` (never negative), None when either is unknown."""
    if start is None or end is None:
        return None
    return max(0, round((end - start) * 1000))


def decode(
    body: bytes | None, encoding: str | None, limit: int, *, sniff: bool = False
) -> tuple[bytes, str | None]:
    """A whole (content-encoded) body decoded, at most `limit` bytes, and the decoding error."""
    if not body:
        return b"", None
    decoder = BodyDecoder(encoding, sniff=sniff, max_output=limit)
    data = decoder.decode(body) + decoder.flush()
    return data, decoder.error


def cost_details(priced) -> str | None:
    """The `cost_details` JSON of a priced call: model id, genai-prices' input and output, and the
    cost by token type (`parts`, USD as strings, adding up to the call's cost)."""
    if priced is None:
        return None
    parts = {name: str(value) for name, value in priced.parts.items()}
    return json.dumps({"model_id": priced.model_id, **priced.details, "parts": parts})


def origin(call_id: str, name: str = "") -> str:
    """`server` for tools the provider runs itself (Anthropic web search...): no result comes back;
    `mcp` for tools named in an MCP scheme (`mcp__server__tool`); else `native`."""
    if call_id.startswith("srvtoolu_"):
        return "server"
    return "mcp" if mcp_tool_name(name) else "native"


def net_event(
    flow: FlowEnded,
    *,
    row_id: int,
    settings: CaptureSettings,
    scrubber: Scrubber,
    process: ProcessInfo,
    request_preview: str | None,
    response_preview: str | None,
    decode_error: str | None,
    conn_type: str | None = None,
    trace_id: str | None = None,
    bytes_sent: int | None = None,
    bytes_received: int | None = None,
    error: str | None = None,
) -> NetEvent:
    """The `net_events` row of a flow (header values hashed; credential values teach the scrubber)."""
    req, resp = flow.request, flow.response
    status = flow.client_status or (resp.status if resp is not None else None)
    return NetEvent(
        id=row_id,
        event_id=new_event_id(),
        timestamp=rfc3339(req.started),
        domain=req.host,
        port=req.port,
        decision=row_decision(flow.decision, error is not None),
        method=req.method,
        path=req.path,
        canonical_path=req.canonical_path,
        flow_id=req.key,
        http_version=req.http_version,
        conn_type=conn_type or req.scheme,
        process_name=process[0],
        pid=process[1],
        query=redact_query(req.query, settings.query_params, scrubber) or None,
        status_code=status,
        bytes_sent=flow.request_size if bytes_sent is None else bytes_sent,
        bytes_received=flow.response_size if bytes_received is None else bytes_received,
        duration_ms=ms(req.started, flow.ended) or 0,
        matched_rule=flow.matched_rule,
        request_headers=headers_json(req.headers, settings.header_allowlist, scrubber),
        response_headers=headers_json(resp.headers, settings.header_allowlist, scrubber) if resp else None,
        request_body_preview=request_preview,
        response_body_preview=response_preview,
        error=error,
        client_addr=req.client_addr,
        ttfb_ms=ms(req.started, flow.first_chunk_at or (resp.started if resp else None)),
        request_content_type=req.header("content-type"),
        response_content_type=resp.header("content-type") if resp else None,
        request_content_encoding=req.header("content-encoding"),
        response_content_encoding=resp.header("content-encoding") if resp else None,
        decode_error=decode_error,
        streamed=int(flow.streamed),
        provider=flow.route.provider if flow.route else None,
        trace_id=trace_id,
    )


@dataclass(frozen=True, slots=True)
class CallInput:
    """What one model call is made of, for HTTP flows and WebSocket turns alike."""

    request: RequestHead
    route: Route
    info: RequestInfo
    summary: ResponseSummary
    started: float
    ended: float
    status: int | None
    request_size: int
    response_size: int
    request_preview: str | None
    streamed: bool
    first_content: float | None
    error: str | None
    """Why the flow failed (connection error), None when it did not."""
    process: ProcessInfo
    net_event_id: int | None
    items: tuple[Item, ...] = ()
    """The request's input items (addons/items.py)."""
    previous_response_id: str | None = None
    websocket: bool = False
    """A turn on a WebSocket (`request` is its upgrade)."""
    released: float | None = None
    """When an `ask` rule's hold let the request go upstream (approved): its time to first token
    counts from there; the wait is the `approvals` row's (`asked_at` to `decided_at`)."""


def estimate_missing(info: RequestInfo, summary: ResponseSummary) -> None:
    """Fill usage the provider never reported with tokenizer estimates, flagged as such."""
    usage = summary.usage
    if usage.input_tokens is None and info.prompt_text:
        usage.input_tokens = count_tokens(info.prompt_text)
        usage.estimated.append("input_tokens")
    if usage.output_tokens is None:
        produced = summary.text + summary.thinking + "".join(c.name + c.arguments for c in summary.tool_calls)
        usage.output_tokens = count_tokens(produced)
        usage.estimated.append("output_tokens")
    if usage.estimated:
        usage.extra["estimator"] = ESTIMATOR


class CallRows(NamedTuple):
    """A model call's rows, its trace id, and the items whose content the session has not stored yet."""

    rows: list[Row]
    trace: str
    fresh_items: list[Item]


# Long on purpose: one model_calls row has ~40 columns and each is set here once, in column order;
# split, the columns would be set in several places.
def model_call(
    call: CallInput,
    *,
    ids: IdMinter,
    traces: TraceTracker,
    mcp: McpLedger,
    settings: CaptureSettings,
    conversations: Conversations | None = None,
    scrub: Scrub | None = None,
) -> CallRows:
    """The rows of one model call: `model_calls`, its `tool_calls`, the new `tool_responses` its
    request carried and its conversation items; its trace id; its items new to the session. Texts
    cut short are scrubbed before the cut with `scrub` (`cap_text`)."""
    from pricing import price_call  # genai-prices is imported lazily: ~0.7 s (loaded in the warm-up)

    info, summary, usage = call.info, call.summary, call.summary.usage
    status = call.status
    success = status is not None and 200 <= status < 300
    ok = success and summary.error_type is None
    if ok or (success and (summary.text or summary.tool_calls)):
        estimate_missing(info, summary)
    model = info.model or call.route.model or summary.model
    streamed = bool(info.stream or call.streamed)
    priced = price_call(
        provider=call.route.provider, model=model, input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens, cache_read=usage.cache_read, cache_write=usage.cache_write,
        cache_write_1h=usage.cache_write_1h, reasoning=usage.reasoning, at=datetime.fromtimestamp(call.started, UTC),
    )  # fmt: skip
    trace = traces.trace_for(info.tool_results)
    error_message = summary.error_message
    if status is None and error_message is None:
        error_message = call.error or info.error
    limit = settings.content_max_bytes
    ts = rfc3339(call.started)
    call_row_id = ids.next("model_calls")
    spawns: list[tuple[int, str]] = []
    rows: list[Row] = [
        ModelCall(
            id=call_row_id,
            event_id=new_event_id(),
            timestamp=ts,
            provider=call.route.provider,
            method=call.request.method,
            path=call.request.path,
            flow_id=call.request.key,
            protocol=call.route.protocol,
            host=call.request.host,
            model=model,
            process_name=call.process[0],
            pid=call.process[1],
            stream=int(streamed),
            system_prompt_preview=cap_text(
                info.system_prompt, min(settings.preview_bytes, KEPT_PREVIEW_BYTES), scrub
            ),
            messages_count=info.messages_count,
            tools_count=info.tools_count,
            request_bytes=call.request_size,
            request_body_preview=call.request_preview,
            message_id=summary.message_id,
            status_code=status,
            text_content=cap_text(summary.text, limit, scrub) if summary.text else None,
            thinking_content=cap_text(summary.thinking, limit, scrub) if summary.thinking else None,
            stop_reason=summary.stop_reason,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            duration_ms=ms(call.started, call.ended) or 0,
            response_bytes=call.response_size,
            estimated_cost_usd=float(priced.total_usd) if priced else None,
            trace_id=trace,
            usage_details=json.dumps(usage.details(), ensure_ascii=False),
            net_event_id=call.net_event_id,
            response_model=summary.model,
            ttft_ms=ms(
                call.released or call.started,
                call.first_content if streamed else (call.ended if status else None),
            ),
            complete=int(summary.complete),
            error_type=summary.error_type,
            error_message=cap_text(error_message, ERROR_MESSAGE_BYTES, scrub),
            price_source=priced.source if priced else None,
            cost_details=cost_details(priced),
            parse_errors=summary.parse_errors,
        )
    ]
    for result in traces.new_results(info.tool_results):
        rows.append(
            ToolResponse(
                id=ids.next("tool_responses"),
                event_id=new_event_id(),
                model_call_id=call_row_id,
                call_id=result.call_id,
                content_preview=cap_text(result.content, min(limit, KEPT_PREVIEW_BYTES), scrub),
                is_error=int(result.is_error),
                timestamp=ts,
                trace_id=trace,
                tool_name=result.tool_name,
                content_bytes=len(result.content.encode("utf-8", "surrogatepass")),
            )
        )
    # how the response carried its tool calls, in Capsem's words (tool_calls.transport)
    transport = "websocket" if call.websocket else "sse" if streamed else "http"
    for tool in summary.tool_calls:
        kind = origin(tool.call_id, tool.name)
        row = ToolCall(
            id=ids.next("tool_calls"),
            event_id=new_event_id(),
            model_call_id=call_row_id,
            call_index=tool.index,
            call_id=tool.call_id,
            tool_name=tool.name,
            arguments=cap_text(tool.arguments, limit, scrub),
            origin=kind,
            timestamp=ts,
            trace_id=trace,
            complete=int(tool.complete),
            provider=call.route.provider,
            transport=transport,
        )
        if kind != "server":
            mcp.model_tool_call(row, tool.arguments, call.started)
        rows.append(row)
        if conversations is not None and tool.name in SUBAGENT_TOOLS:
            prompt = _prompt_of(tool.arguments)
            if prompt:
                spawns.append((row.id, prompt))
    client_calls = [(c.call_id, c.name) for c in summary.tool_calls if origin(c.call_id) != "server"]
    if ok or client_calls:
        traces.finish_call(trace, client_calls)
    fresh: list[Item] = []
    if conversations is not None:
        more, fresh = item_rows(call, rows[0], summary, conversations)  # type: ignore[arg-type]
        rows += more
        turn = rows[0].turn_id  # type: ignore[union-attr]
        conversations.spawns.extend(Spawn(tool_id, prompt, turn) for tool_id, prompt in spawns)  # type: ignore[arg-type]
    return CallRows(rows, trace, fresh)


def _prompt_of(arguments: str) -> str | None:
    """The `prompt` argument of a subagent tool call (its subagent's first user message)."""
    try:
        value = json.loads(arguments).get("prompt")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value.strip() else None


def substitution_events(
    flow: FlowEnded, *, net_event_id: int, process: ProcessInfo
) -> list[SubstitutionEvent]:
    """The `substitution_events` rows of a flow: each credential placeholder it carried, and what
    capsem did with it (the values never travel this far)."""
    req = flow.request
    return [
        SubstitutionEvent(
            event_id=new_event_id(),
            timestamp=rfc3339(req.started),
            credential=s.credential,
            host=req.host,
            location=s.location,
            outcome=s.outcome,
            port=req.port,
            reason=s.reason,
            flow_id=req.key,
            net_event_id=net_event_id,
            process_name=process[0],
            pid=process[1],
        )
        for s in flow.substitutions
    ]


def approval_row(flow: FlowEnded, *, net_event_id: int, process: ProcessInfo) -> ApprovalRow | None:
    """The `approvals` row of a request an `ask` rule held (its arguments are scrubbed by the writer)."""
    a, req = flow.approval, flow.request
    if a is None:
        return None
    return ApprovalRow(
        event_id=new_event_id(), approval_id=a.id, rule=a.rule, asked_at=rfc3339(a.asked_at),
        decided_at=rfc3339(a.decided_at), waited_ms=max(0, round((a.decided_at - a.asked_at) * 1000)),
        decision=a.decision, decided_by=a.decided_by, net_event_id=net_event_id, flow_id=req.key,
        reason=a.reason, always=int(a.always), method=req.method, host=req.host, path=req.path,
        mcp_server=a.mcp_server, tool=a.tool, arguments=a.arguments, process_name=process[0], pid=process[1],
    )  # fmt: skip
