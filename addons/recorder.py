"""Turns finished flows into session.db rows (runs on the recorder thread, never on the loop).

For every flow: one `net_events` row. For a model call also: decode and parse the request,
finish the response reader, fill in usage (estimating with tiktoken when the provider never
reported it), price it, chain its trace, then write `model_calls`, its `tool_calls` and the
new `tool_responses` of its request.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from addons import mcp
from addons.body import Preview, ResponseReader, stream_framing
from addons.decode import BodyDecoder
from addons.flowdata import FlowData
from addons.mcp.ledger import MCP_PREVIEW_BYTES, McpLedger
from addons.providers import Route, parser_for
from addons.records import RequestInfo, ResponseSummary, ToolResult
from addons.store import SessionStore
from addons.traces import TraceTracker
from addons.websocket import Turn as WsTurn
from addons.websocket import conn_type as ws_conn_type
from capsem.ids import rfc3339
from capsem.redact import Scrubber, headers_json, redact_query
from pricing.estimate import ESTIMATOR, count_tokens

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CaptureSettings:
    preview_bytes: int = 65536
    content_max_bytes: int = 1024 * 1024
    max_parse_bytes: int = 64 * 1024 * 1024
    header_allowlist: frozenset[str] = frozenset()
    query_params: frozenset[str] = frozenset()
    max_pending_calls: int = 10000

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> CaptureSettings:
        cap = settings.get("capture", {})
        return cls(
            preview_bytes=int(cap.get("preview_bytes", cls.preview_bytes)),
            content_max_bytes=int(cap.get("content_max_bytes", cls.content_max_bytes)),
            max_parse_bytes=int(cap.get("max_parse_bytes", cls.max_parse_bytes)),
            header_allowlist=frozenset(h.lower() for h in settings.get("headers", {}).get("allowlist", [])),
            query_params=frozenset(q.lower() for q in settings.get("redaction", {}).get("query_params", [])),
            max_pending_calls=int(cap.get("max_pending_calls", cls.max_pending_calls)),
        )


def _ms(start: float | None, end: float | None) -> int | None:
    if start is None or end is None:
        return None
    return max(0, round((end - start) * 1000))


def cap_text(text: str | None, limit: int) -> str | None:
    """`text` cut to at most `limit` UTF-8 bytes on a character boundary, with a note."""
    if text is None:
        return None
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    cut = data[:limit].decode("utf-8", "ignore")
    return cut + f"\n[… {len(data) - limit} more bytes]"


def _origin(call_id: str, name: str = "") -> str:
    """`server` for tools the provider runs itself (Anthropic web search...): no result comes back;
    `mcp` for tools named in an MCP scheme (`mcp__server__tool`)."""
    if call_id.startswith("srvtoolu_"):
        return "server"
    return "mcp" if mcp.mcp_tool_name(name) else "native"


def _decode(body: bytes | None, encoding: str | None, limit: int) -> tuple[bytes, str | None]:
    if not body:
        return b"", None
    decoder = BodyDecoder(encoding, sniff=False, max_output=limit)
    data = decoder.decode(body) + decoder.flush()
    return data, decoder.error


class Recorder:
    """Builds rows from flows. Not thread-safe: owned by the recorder thread."""

    def __init__(
        self,
        store: SessionStore,
        settings: CaptureSettings,
        scrubber: Scrubber,
        mcp_names: dict[str, str] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.scrubber = scrubber
        self.traces = TraceTracker(settings.max_pending_calls)
        self.readers: dict[str, ResponseReader] = {}
        self.first_content: dict[str, float] = {}
        self.mcp = McpLedger(
            store,
            content_limit=min(settings.content_max_bytes, MCP_PREVIEW_BYTES),
            preview_limit=settings.preview_bytes,
            cap=cap_text,
            names=mcp_names,  # shared with the addon's policy
        )

    # -- streamed bodies --------------------------------------------------------------------

    def open(self, fd: FlowData) -> None:
        """A streamed model response starts: prepare its reader (or an MCP stream's)."""
        if fd.route is None:
            if fd.mcp_stream:
                self.mcp.open_stream(fd)
            return
        self.readers[fd.key] = self._reader(fd)

    def chunk(self, key: str, at: float, data: bytes) -> None:
        reader = self.readers.get(key)
        if reader is None:
            self.mcp.stream_chunk(key, at, data)
            return
        reader.feed(data)
        if key not in self.first_content and reader.content_started:
            self.first_content[key] = at

    def _reader(self, fd: FlowData) -> ResponseReader:
        assert fd.route is not None
        parser = parser_for(fd.route.protocol)
        content_type = fd.header("content-type", response=True)
        return ResponseReader(
            parser,
            framing=stream_framing(parser, content_type, fd.path) if fd.streamed else None,
            content_encoding=fd.header("content-encoding", response=True),
            status=fd.status or 0,
            preview_bytes=self.settings.preview_bytes,
            max_parse_bytes=self.settings.max_parse_bytes,
        )

    # -- finished flows ---------------------------------------------------------------------

    def close(self, fd: FlowData) -> None:
        """A flow ended (response or error): write all its rows."""
        reader = self.readers.pop(fd.key, None)
        first_content = self.first_content.pop(fd.key, None)
        if fd.mcp_stream:
            self.mcp.close_stream(fd)
        process_name, pid = self._process(fd)
        request_body, request_decode_error = _decode(
            fd.request_body, fd.header("content-encoding"), self.settings.max_parse_bytes
        )
        summary: ResponseSummary | None = None
        response_preview: str | None
        decode_error = request_decode_error
        if fd.route is not None and (fd.status is not None or reader is not None):
            if reader is None:
                reader = self._reader(fd)
                reader.feed(fd.response_body or b"")
            summary = reader.finish()
            response_preview = reader.preview.text() if reader.preview.total else None
            decode_error = decode_error or reader.decode_error
        else:
            response_preview, response_error = self._plain_preview(fd)
            decode_error = decode_error or response_error
        request_preview = Preview(self.settings.preview_bytes)
        request_preview.add(request_body)
        net_id = self.store.insert(
            "net_events",
            {
                "timestamp": rfc3339(fd.started),
                "domain": fd.host,
                "port": fd.port,
                "decision": "error" if fd.error and fd.decision == "allowed" else fd.decision,
                "process_name": process_name,
                "pid": pid,
                "method": fd.method,
                "path": fd.path,
                "query": redact_query(fd.query, self.settings.query_params, self.scrubber) or None,
                "status_code": fd.status,
                "bytes_sent": fd.request_size,
                "bytes_received": fd.response_size,
                "duration_ms": _ms(fd.started, fd.response_ended) or 0,
                "matched_rule": fd.matched_rule,
                "request_headers": headers_json(
                    fd.request_headers, self.settings.header_allowlist, self.scrubber
                ),
                "response_headers": headers_json(
                    fd.response_headers, self.settings.header_allowlist, self.scrubber
                )
                if fd.status is not None
                else None,
                "request_body_preview": request_preview.text() if request_preview.total else None,
                "response_body_preview": response_preview,
                "conn_type": ws_conn_type(self, fd) or fd.scheme,
                "flow_id": fd.key,
                "error": "; ".join(e for e in (fd.error, fd.tap_failure) if e) or None,
                "http_version": fd.http_version,
                "client_addr": fd.client_addr,
                "ttfb_ms": _ms(fd.started, fd.first_chunk_at or fd.response_started),
                "request_content_type": fd.header("content-type"),
                "response_content_type": fd.header("content-type", response=True),
                "request_content_encoding": fd.header("content-encoding"),
                "response_content_encoding": fd.header("content-encoding", response=True),
                "decode_error": decode_error,
                "streamed": int(fd.streamed),
                "provider": fd.route.provider if fd.route else None,
            },
        )
        if fd.mcp:
            response_body, _ = _decode(
                fd.response_body if fd.response_body is not None else fd.stream_preview,
                fd.header("content-encoding", response=True),
                self.settings.content_max_bytes,
            )
            self.mcp.record(fd, net_id, request_body, response_body, (process_name, pid))
        if fd.route is None or fd.decision == "denied":  # a denied model call never reached the provider
            return
        request = parser_for(fd.route.protocol).parse_request(request_body)
        self._model_call(
            fd,
            net_id,
            request,
            summary or ResponseSummary(),
            first_content,
            process_name,
            pid,
            request_preview,
            stream_parsed=bool(reader is not None and reader.streaming and fd.streamed),
        )

    def ws_turn(self, fd: FlowData, route: Route, turn: WsTurn) -> None:
        """One Responses turn of a WebSocket (response.create … terminal event) as a model call.

        Its row is linked to the upgrade flow's net_events row when the socket ends.
        """
        call = dataclasses.replace(
            fd, route=route, started=turn.started, response_ended=turn.ended, status=turn.status,
            request_size=turn.request_bytes, response_size=turn.response_bytes, error=None,
        )  # fmt: skip
        preview = Preview(self.settings.preview_bytes)
        preview.add(turn.request_body)
        process_name, pid = self._process(fd)
        self._model_call(call, None, turn.request, turn.summary, turn.first_content, process_name, pid,  # type: ignore[arg-type]
                         preview, stream_parsed=True)  # fmt: skip

    def _plain_preview(self, fd: FlowData) -> tuple[str | None, str | None]:
        body = fd.response_body if fd.response_body is not None else fd.stream_preview
        if not body:
            return None, None
        limit = self.settings.preview_bytes
        decoder = BodyDecoder(fd.header("content-encoding", response=True), max_output=limit)
        data = decoder.decode(body[: limit * 4] if fd.response_body is None else body)
        preview = Preview(limit)
        preview.add(data)
        preview.total = max(preview.total, fd.response_size if not decoder.error else 0)
        error = decoder.error if decoder.error and "exceeds" not in decoder.error else None
        return preview.text(), error

    def _process(self, fd: FlowData) -> tuple[str | None, int | None]:
        if fd.process is None:
            return None, None
        try:
            return fd.process.result(timeout=2.0)
        except Exception:
            return None, None

    def _model_call(
        self,
        fd: FlowData,
        net_id: int,
        request: RequestInfo,
        summary: ResponseSummary,
        first_content: float | None,
        process_name: str | None,
        pid: int | None,
        request_preview: Preview,
        stream_parsed: bool,
    ) -> None:
        assert fd.route is not None
        limit = self.settings.content_max_bytes
        usage = summary.usage
        ok = fd.status is not None and 200 <= fd.status < 300 and summary.error_type is None
        if ok or (fd.status is not None and 200 <= fd.status < 300 and (summary.text or summary.tool_calls)):
            self._estimate_missing(request, summary)
        model = request.model or fd.route.model or summary.model
        streamed = bool(request.stream or stream_parsed)
        from pricing import price_call  # imported here: genai-prices takes ~0.7 s to import (see warm_up)

        priced = price_call(
            provider=fd.route.provider,
            model=model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read=usage.cache_read,
            cache_write=usage.cache_write,
            cache_write_1h=usage.cache_write_1h,
            at=datetime.fromtimestamp(fd.started, UTC),
        )
        trace = self.traces.trace_for(request.tool_results)
        if fd.status is None and summary.error_message is None and fd.error:
            summary.error_message = fd.error
        ttft_end = first_content if streamed else (fd.response_ended if fd.status else None)
        call_id = self.store.insert(
            "model_calls",
            {
                "timestamp": rfc3339(fd.started),
                "provider": fd.route.provider,
                "model": model,
                "process_name": process_name,
                "pid": pid,
                "method": fd.method,
                "path": fd.path,
                "stream": int(streamed),
                "system_prompt_preview": cap_text(request.system_prompt, self.settings.preview_bytes),
                "messages_count": request.messages_count,
                "tools_count": request.tools_count,
                "request_bytes": fd.request_size,
                "request_body_preview": request_preview.text() if request_preview.total else None,
                "message_id": summary.message_id,
                "status_code": fd.status,
                "text_content": cap_text(summary.text, limit) if summary.text else None,
                "thinking_content": cap_text(summary.thinking, limit) if summary.thinking else None,
                "stop_reason": summary.stop_reason,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "duration_ms": _ms(fd.started, fd.response_ended) or 0,
                "response_bytes": fd.response_size,
                "estimated_cost_usd": float(priced.total_usd) if priced else None,
                "trace_id": trace,
                "usage_details": json.dumps(usage.details(), ensure_ascii=False),
                "net_event_id": net_id,
                "flow_id": fd.key,
                "protocol": fd.route.protocol,
                "host": fd.host,
                "response_model": summary.model,
                "ttft_ms": _ms(fd.started, ttft_end),
                "complete": int(summary.complete and fd.error is None),
                "error_type": summary.error_type,
                "error_message": summary.error_message or (request.error if fd.status is None else None),
                "price_source": priced.source if priced else None,
                "cost_details": json.dumps({"model_id": priced.model_id, **priced.details})
                if priced
                else None,
                "parse_errors": summary.parse_errors,
            },
        )
        self.store.update("net_events", net_id, {"trace_id": trace})
        ts = rfc3339(fd.started)
        for result in self.traces.new_results(request.tool_results):
            self._tool_response(call_id, ts, trace, result)
        for call in summary.tool_calls:
            origin = _origin(call.call_id, call.name)
            row_id = self.store.insert(
                "tool_calls",
                {
                    "model_call_id": call_id,
                    "call_index": call.index,
                    "call_id": call.call_id,
                    "tool_name": call.name,
                    "arguments": cap_text(call.arguments, limit),
                    "origin": origin,
                    "timestamp": ts,
                    "trace_id": trace,
                    "complete": int(call.complete),
                },
            )
            if origin != "server":
                self.mcp.model_tool_call(row_id, call.name, call.arguments, fd.started)
        client_calls = [(c.call_id, c.name) for c in summary.tool_calls if _origin(c.call_id) != "server"]
        if ok or client_calls:
            self.traces.finish_call(trace, client_calls)

    def _tool_response(self, model_call_id: int, ts: str, trace: str, result: ToolResult) -> None:
        self.store.insert(
            "tool_responses",
            {
                "model_call_id": model_call_id,
                "call_id": result.call_id,
                "content_preview": cap_text(result.content, self.settings.content_max_bytes),
                "is_error": int(result.is_error),
                "timestamp": ts,
                "trace_id": trace,
                "tool_name": result.tool_name,
                "content_bytes": len(result.content.encode("utf-8", "surrogatepass")),
            },
        )

    @staticmethod
    def _estimate_missing(request: RequestInfo, summary: ResponseSummary) -> None:
        """Fill usage the provider never reported with tokenizer estimates, flagged as such."""
        usage = summary.usage
        if usage.input_tokens is None and request.prompt_text:
            usage.input_tokens = count_tokens(request.prompt_text)
            usage.estimated.append("input_tokens")
        if usage.output_tokens is None:
            produced = (
                summary.text + summary.thinking + "".join(c.name + c.arguments for c in summary.tool_calls)
            )
            usage.output_tokens = count_tokens(produced)
            usage.estimated.append("output_tokens")
        if usage.estimated:
            usage.extra["estimator"] = ESTIMATOR
