"""`mcp_calls` rows for MCP traffic, written by the recorder thread (not thread-safe).

One row per JSON-RPC message a client POSTed, with its answer from the POST's own response
(JSON or SSE) or, when the POST got `202 Accepted`, from a GET event stream of the same MCP
session (HTTP+SSE transport, resumed streams): such a row is written at once and completed
when its answer arrives (an answer that comes first waits for its row).

Linking: a model's tool call named in an MCP scheme and an MCP `tools/call` are the same call
when tool and arguments are equal and the MCP call started after the model call (within
`LINK_WINDOW`); a call whose server part matches the server's name wins. Whichever of the two
rows is written second makes the link.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from addons.flowdata import FlowData
from addons.mcp.wire import (
    McpResponse,
    StreamReader,
    exchange_key,
    initialize_name,
    mcp_tool_name,
    parse_request,
    parse_response,
    preview,
    server_name,
    url_key,
)
from addons.store import SessionStore
from capsem.ids import rfc3339
from capsem.redact import hash_value

LINK_WINDOW = 600.0
"""Seconds after a model's tool call within which an MCP tools/call can be its execution."""
MCP_PREVIEW_BYTES = 256 * 1024
"""mcp_calls request/response previews: the seed's "first 256KB" (capture.content_max_bytes if smaller)."""
_KEEP = 1000
"""Unmatched calls / answers remembered at most (oldest forgotten first)."""


def _norm(name: str | None) -> str:
    return re.sub(r"[^a-z0-9]", "", (name or "").lower())


def _related(a: str | None, b: str | None) -> bool:
    """Two server names that may name the same server (`files`, `Files-Server`)."""
    x, y = _norm(a), _norm(b)
    return bool(x and y) and (x in y or y in x)


def _ms(start: float, end: float | None) -> int:
    return max(0, round(((end or start) - start) * 1000))


def _framing(content_type: str | None, body: bytes) -> str:
    """How the POST's own response carried answers: `sse`, `json`, or `none` (an empty 202, text)."""
    kind = (content_type or "").lower()
    if "event-stream" in kind:
        return "sse"
    return "json" if "json" in kind and body.strip() else "none"


def _decision(flow_decision: str, failed: bool) -> str:
    """A policy verdict (denied, warned) wins; otherwise `error` when the call failed."""
    if flow_decision in ("denied", "warned"):
        return flow_decision
    return "error" if failed else "allowed"


@dataclass(slots=True)
class _ToolCall:
    """One side of a possible link: a model's tool call or an MCP tools/call."""

    row_id: int
    server: str | None
    tool: str
    arguments: Any
    at: float


@dataclass(slots=True)
class _Waiting:
    """An mcp_calls row whose answer is to come on a GET stream."""

    row_id: int
    method: str
    endpoint: str
    decision: str
    started: float


@dataclass(slots=True)
class _Stream:
    reader: StreamReader
    keys: set[str] = field(default_factory=set)
    preview: bytearray = field(default_factory=bytearray)


class McpLedger:
    """Writes and completes mcp_calls rows; links them with model tool calls."""

    def __init__(
        self,
        store: SessionStore,
        *,
        content_limit: int,
        preview_limit: int,
        cap: Callable[[str | None, int], str | None],
        names: dict[str, str] | None = None,
    ) -> None:
        self.store = store
        self.content_limit = content_limit
        self.preview_limit = preview_limit
        self.cap = cap
        self.names: dict[str, str] = names if names is not None else {}
        """MCP endpoint (host[:port]/path) -> the name its initialize result gave."""
        self.model_calls: deque[_ToolCall] = deque(maxlen=_KEEP)
        self.mcp_calls: deque[_ToolCall] = deque(maxlen=_KEEP)
        self.waiting: OrderedDict[tuple[str, str], _Waiting] = OrderedDict()
        self.early: OrderedDict[tuple[str, str], tuple[McpResponse, float]] = OrderedDict()
        self.streams: dict[str, _Stream] = {}

    # -- POSTed messages ----------------------------------------------------------------------

    def record(
        self,
        fd: FlowData,
        net_id: int,
        request_body: bytes,
        response_body: bytes,
        process: tuple[str | None, int | None],
    ) -> None:
        """One row per JSON-RPC message in the POST body (nothing when it is not MCP)."""
        requests = parse_request(request_body, {k.lower(): v for k, v in fd.request_headers})
        if requests is None:
            return
        content_type = fd.header("content-type", response=True)
        responses = {r.id: r for r in parse_response(response_body, content_type)}
        endpoint = server_name(fd.host, fd.port, fd.path)
        for req in requests:
            if req.method == "initialize" and req.id in responses:
                name = initialize_name(responses[req.id])
                if name:
                    self.names[endpoint] = name
        server = self.names.get(endpoint, endpoint)
        framing = _framing(content_type, response_body)
        session = fd.header("mcp-session-id") or fd.header("mcp-session-id", response=True)
        key = exchange_key(fd.header("mcp-session-id"), fd.host, fd.port, fd.path, fd.query)
        http_error = f"HTTP {fd.status}" if (fd.status or 0) >= 400 else None
        http_failure = fd.error or http_error
        for req in requests:
            resp = responses.get(req.id) if req.id is not None and req.method else None
            row = {
                "timestamp": rfc3339(fd.started),
                "server_name": server,
                "method": req.method or "(response)",
                "tool_name": req.tool_name,
                "request_id": req.id,
                "request_preview": self.cap(preview(req.params), self.content_limit),
                "decision": _decision(fd.decision, bool(http_failure)),
                "duration_ms": _ms(fd.started, fd.response_ended),
                "error_message": http_failure,
                "process_name": process[0],
                "pid": process[1],
                "bytes_sent": req.size,
                "bytes_received": 0,
                "net_event_id": net_id,
                "flow_id": fd.key,
                "matched_rule": fd.matched_rule,
                "status_code": fd.status,
                "endpoint": endpoint,
                "mcp_session": hash_value(session) if session else None,
                "protocol_version": fd.header("mcp-protocol-version"),
                "response_framing": framing,
            }
            if resp is not None:
                # a complete answer stands even if the connection broke after it (a client that
                # closes the SSE stream once it has its answer): only an HTTP error status counts
                row.update(self._answer_columns(resp, fd.decision, http_error))
            row_id = self.store.insert("mcp_calls", row)
            if req.method == "tools/call" and req.tool_name:
                arguments = req.params.get("arguments") if isinstance(req.params, dict) else None
                self._link_mcp(_ToolCall(row_id, server, req.tool_name, arguments or {}, fd.started))
            if resp is None and req.id is not None and req.method and fd.status == 202:
                waiting = _Waiting(row_id, req.method, endpoint, fd.decision, fd.started)
                early = self.early.pop((key, req.id), None)
                if early is not None:
                    self._complete(waiting, *early)
                else:
                    _remember(self.waiting, (key, req.id), waiting)

    def _answer_columns(self, resp: McpResponse, flow_decision: str, http_failure: str | None) -> dict:
        return {
            "response_preview": self.cap(preview(resp.error or resp.result), self.content_limit),
            "bytes_received": resp.size,
            "is_error": int(resp.is_error),
            "error_message": resp.error_message or http_failure,
            "decision": _decision(flow_decision, bool(http_failure) or resp.error is not None),
        }

    def _complete(self, waiting: _Waiting, resp: McpResponse, at: float) -> None:
        values = self._answer_columns(resp, waiting.decision, None)
        values.update(duration_ms=_ms(waiting.started, at), response_framing="stream")
        name = initialize_name(resp) if waiting.method == "initialize" else None
        if name:
            self.names[waiting.endpoint] = name
            values["server_name"] = name
        scrub = self.store.scrubber.scrub  # `update` writes values as given; `insert` scrubs itself
        self.store.update(
            "mcp_calls", waiting.row_id, {k: scrub(v) if isinstance(v, str) else v for k, v in values.items()}
        )

    # -- answers on GET event streams ---------------------------------------------------------

    def open_stream(self, fd: FlowData) -> None:
        """A GET event stream starts: it may carry answers to POSTs (read until it proves not MCP)."""
        url = f"{fd.scheme}://{fd.host}:{fd.port}{fd.path}"
        stream = _Stream(StreamReader(fd.header("content-encoding", response=True), url))
        session = fd.header("mcp-session-id")
        if session:
            stream.keys.add(exchange_key(session, fd.host, fd.port, fd.path, fd.query))
        self.streams[fd.key] = stream

    def stream_chunk(self, key: str, at: float, data: bytes, final: bool = False) -> bool:
        """Feed a chunk of a stream opened with `open_stream`; False when `key` is not one."""
        stream = self.streams.get(key)
        if stream is None:
            return False
        if len(stream.preview) < self.preview_limit:
            stream.preview += data[: self.preview_limit - len(stream.preview)]
        endpoints, responses = stream.reader.feed(data, final)
        stream.keys.update(url_key(u) for u in endpoints)
        for resp in responses:
            if resp.id is None:
                continue
            found = next((k for k in stream.keys if (k, resp.id) in self.waiting), None)
            if found is not None:
                self._complete(self.waiting.pop((found, resp.id)), resp, at)
            else:
                for k in stream.keys:
                    _remember(self.early, (k, resp.id), (resp, at))
        return True

    def close_stream(self, fd: FlowData) -> None:
        """The stream ended: read its last event; its first bytes become the flow's preview."""
        stream = self.streams.get(fd.key)
        if stream is None:
            return
        try:
            self.stream_chunk(fd.key, fd.response_ended or fd.started, b"", final=True)
        finally:
            del self.streams[fd.key]
            if fd.stream_preview is None and stream.preview:
                fd.stream_preview = bytes(stream.preview)

    # -- linking ------------------------------------------------------------------------------

    def model_tool_call(self, row_id: int, name: str, arguments: str, at: float) -> bool:
        """A model asked for a tool (its tool_calls row `row_id`): link it to the MCP tools/call that
        already ran it, or remember it for one to come. True when the name is an MCP tool name."""
        server, tool = mcp_tool_name(name) or (None, name)
        try:
            args = json.loads(arguments) if arguments else {}
        except ValueError:
            return server is not None
        call = _ToolCall(row_id, server, tool, args, at)
        match = self._best(call, [m for m in self.mcp_calls if m.at >= at - 1.0])
        if match is not None:
            self.mcp_calls.remove(match)
            self._link(call.row_id, match.row_id)
        else:
            self.model_calls.append(call)
        return server is not None

    def _link_mcp(self, call: _ToolCall) -> None:
        match = self._best(call, [m for m in self.model_calls if call.at >= m.at - 1.0])
        if match is not None:
            self.model_calls.remove(match)
            self._link(match.row_id, call.row_id)
        else:
            self.mcp_calls.append(call)

    @staticmethod
    def _best(call: _ToolCall, others: list[_ToolCall]) -> _ToolCall | None:
        """The newest of `others` with the same tool and arguments, preferring one whose server
        name goes with this one's (`mcp__files__x` and a server that calls itself `files-server`)."""
        same = [
            o for o in others
            if o.tool == call.tool and o.arguments == call.arguments and abs(o.at - call.at) <= LINK_WINDOW
        ]  # fmt: skip
        preferred = [o for o in same if _related(o.server, call.server)]
        return (preferred or same or [None])[-1]

    def _link(self, tool_call_row: int, mcp_row: int) -> None:
        self.store.update("tool_calls", tool_call_row, {"mcp_call_id": mcp_row, "origin": "mcp"})


def _remember(table: OrderedDict, key: Any, value: Any) -> None:
    table[key] = value
    while len(table) > _KEEP:
        table.popitem(last=False)
