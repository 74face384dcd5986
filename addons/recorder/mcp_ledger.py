"""`mcp_calls` rows for MCP traffic, built on the recorder's side (not thread-safe).

One row per JSON-RPC message a client POSTed, with its answer from the POST's own response
(JSON or SSE) or, when the POST got `202 Accepted`, from a GET event stream of the same MCP
session (HTTP+SSE transport, resumed streams). Such a row is held until its answer arrives (an
answer that comes first waits for its row), and written whole; one whose answer never comes
is written without it after `ANSWER_WAIT` seconds or when the session ends.

Linking: a model's tool call named in an MCP scheme and an MCP `tools/call` are the same call
when tool and arguments are equal and the MCP call started after the model call (within
`LINK_WINDOW`); a call whose server part matches the server's name wins. Whichever of the two
rows is built second carries the link: a tool call built after its MCP call gets
`mcp_call_id` and `origin='mcp'`; an MCP call built after its tool call gets `tool_call_id`
(and a trigger in session.db fills the tool call's `mcp_call_id` in the same insert).
Rows are only ever inserted.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from addons.mcp.wire import (
    McpResponse,
    StreamReader,
    exchange_key,
    initialize_name,
    learned_name,
    mcp_tool_name,
    parse_request,
    parse_response,
    preview,
    server_name,
    url_key,
)
from addons.messages import FlowEnded, StreamOpened
from addons.recorder.outcome import call_error, row_decision, tool_call_decision
from capsem.ids import rfc3339
from capsem.redact import hash_value
from capsem.store.rows import IdMinter, McpCall, ToolCall, new_event_id

LINK_WINDOW = 600.0
"""Seconds after a model's tool call within which an MCP tools/call can be its execution."""
ANSWER_WAIT = 30.0
"""Seconds a POST answered `202` waits for its answer on a GET stream before it is written without."""
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


@dataclass(slots=True)
class _Side:
    """One side of a possible link: a model's tool call or an MCP tools/call."""

    row: ToolCall | McpCall
    server: str | None
    tool: str
    arguments: Any
    at: float


@dataclass(slots=True)
class _Waiting:
    """An mcp_calls row held until its answer comes on a GET stream."""

    row: McpCall
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
    """Builds mcp_calls rows; links them with model tool calls."""

    def __init__(
        self,
        ids: IdMinter,
        *,
        content_limit: int,
        preview_limit: int,
        cap: Callable[[str | None, int], str | None],
    ) -> None:
        self.ids = ids
        self.content_limit = content_limit
        self.preview_limit = preview_limit
        self.cap = cap
        self.names: dict[str, str] = {}
        """MCP endpoint (host[:port]/path) -> the name its initialize result gave."""
        self.model_calls: deque[_Side] = deque(maxlen=_KEEP)
        self.mcp_calls: deque[_Side] = deque(maxlen=_KEEP)
        self.waiting: OrderedDict[tuple[str, str], _Waiting] = OrderedDict()
        self.early: OrderedDict[tuple[str, str], tuple[McpResponse, float]] = OrderedDict()
        self.streams: dict[str, _Stream] = {}

    # -- POSTed messages ----------------------------------------------------------------------

    # Long on purpose: every JSON-RPC message of one POST becomes one row here, its ~20 columns set
    # once, in order, beside the matching of its answer (inline, or later on a GET stream).
    def record(
        self,
        flow: FlowEnded,
        net_id: int,
        request_body: bytes,
        response_body: bytes,
        process: tuple[str | None, int | None],
    ) -> list[McpCall]:
        """The rows of the JSON-RPC messages in the body of a request mitmdump decided is MCP
        (`FlowEnded.mcp`; none when it cannot be read); rows whose answer is to come on a GET
        stream are held back (see `answered`, `expired`)."""
        req = flow.request
        requests = parse_request(request_body)
        if requests is None:
            return []
        resp = flow.response
        status = resp.status if resp is not None else None
        content_type = resp.header("content-type") if resp is not None else None
        responses = {r.id: r for r in parse_response(response_body, content_type)}
        endpoint = server_name(req.host, req.port, req.canonical_path or req.path)
        name = learned_name(requests, responses)
        if name:
            self.names[endpoint] = name
        server = self.names.get(endpoint, endpoint)
        framing = _framing(content_type, response_body)
        session = req.header("mcp-session-id") or (resp.header("mcp-session-id") if resp else None)
        key = exchange_key(req.header("mcp-session-id"), req.host, req.port, req.path, req.query)
        http_error = f"HTTP {status}" if (status or 0) >= 400 else None
        rows: list[McpCall] = []
        for call in requests:
            answer = responses.get(call.id) if call.id is not None and call.method else None
            failure = call_error(flow.error, answered=answer is not None) or http_error
            row = McpCall(
                id=self.ids.next("mcp_calls"),
                event_id=new_event_id(),
                timestamp=rfc3339(req.started),
                server_name=server,
                method=call.method or "(response)",
                tool_name=call.tool_name,
                request_id=call.id,
                request_preview=self.cap(preview(call.params), self.content_limit),
                decision=row_decision(flow.decision, bool(failure)),
                duration_ms=_ms(req.started, flow.ended),
                error_message=failure,
                process_name=process[0],
                pid=process[1],
                bytes_sent=call.size,
                net_event_id=net_id,
                flow_id=req.key,
                matched_rule=flow.matched_rule,
                status_code=status,
                endpoint=endpoint,
                mcp_session=hash_value(session) if session else None,
                protocol_version=req.header("mcp-protocol-version"),
                response_framing=framing,
            )
            if answer is not None:
                self._answer(row, answer, flow.decision, failure)
            if call.method == "tools/call" and call.tool_name:
                arguments = call.params.get("arguments") if isinstance(call.params, dict) else None
                self._link_mcp(_Side(row, server, call.tool_name, arguments or {}, req.started))
            if answer is None and call.id is not None and call.method and status == 202:
                waiting = _Waiting(row, call.method, endpoint, flow.decision, req.started)
                early = self.early.pop((key, call.id), None)
                if early is None:
                    _remember(self.waiting, (key, call.id), waiting)
                    continue
                self._complete(waiting, *early)
            rows.append(row)
        return rows

    def _answer(self, row: McpCall, resp: McpResponse, flow_decision: str, http_failure: str | None) -> None:
        row.response_preview = self.cap(preview(resp.error or resp.result), self.content_limit)
        row.bytes_received = resp.size
        row.is_error = int(resp.is_error)
        row.error_message = resp.error_message or http_failure
        row.decision = row_decision(flow_decision, bool(http_failure) or resp.error is not None)

    def _complete(self, waiting: _Waiting, resp: McpResponse, at: float) -> McpCall:
        row = waiting.row
        self._answer(row, resp, waiting.decision, None)
        row.duration_ms = _ms(waiting.started, at)
        row.response_framing = "stream"
        name = initialize_name(resp) if waiting.method == "initialize" else None
        if name:
            self.names[waiting.endpoint] = name
            row.server_name = name
        return row

    def expired(self, now: float, wait: float = ANSWER_WAIT) -> list[McpCall]:
        """Held rows whose answer did not come within `wait` seconds (all of them with `wait=0`)."""
        rows = []
        for key, waiting in list(self.waiting.items()):
            if now - waiting.started >= wait:
                del self.waiting[key]
                rows.append(waiting.row)
        return rows

    # -- answers on GET event streams ---------------------------------------------------------

    def open_stream(self, opened: StreamOpened) -> None:
        """A GET event stream starts: it may carry answers to POSTs (read until it proves not MCP)."""
        req = opened.request
        url = f"{req.scheme}://{req.host}:{req.port}{req.path}"
        stream = _Stream(StreamReader(opened.response.header("content-encoding"), url))
        session = req.header("mcp-session-id")
        if session:
            stream.keys.add(exchange_key(session, req.host, req.port, req.path, req.query))
        self.streams[req.key] = stream

    def stream_chunk(self, key: str, at: float, data: bytes, final: bool = False) -> list[McpCall] | None:
        """Feed a chunk of a stream opened with `open_stream`: the held rows it answered; None
        when `key` is not such a stream."""
        stream = self.streams.get(key)
        if stream is None:
            return None
        if len(stream.preview) < self.preview_limit:
            stream.preview += data[: self.preview_limit - len(stream.preview)]
        endpoints, responses = stream.reader.feed(data, final)
        stream.keys.update(url_key(u) for u in endpoints)
        rows = []
        for resp in responses:
            if resp.id is None:
                continue
            found = next((k for k in stream.keys if (k, resp.id) in self.waiting), None)
            if found is not None:
                rows.append(self._complete(self.waiting.pop((found, resp.id)), resp, at))
            else:
                for k in stream.keys:
                    _remember(self.early, (k, resp.id), (resp, at))
        return rows

    def close_stream(self, flow: FlowEnded) -> tuple[list[McpCall], bytes | None]:
        """The stream ended: the rows its last event answered, and its first bytes (the flow's preview)."""
        stream = self.streams.get(flow.request.key)
        if stream is None:
            return [], None
        try:
            rows = self.stream_chunk(flow.request.key, flow.ended, b"", final=True) or []
        finally:
            del self.streams[flow.request.key]
        return rows, bytes(stream.preview) if stream.preview else None

    # -- linking ------------------------------------------------------------------------------

    def model_tool_call(self, row: ToolCall, arguments: str, at: float) -> None:
        """A model asked for a tool (its row, not yet written): link it to the MCP tools/call that
        already ran it, or remember it for one to come."""
        server, tool = mcp_tool_name(row.tool_name) or (None, row.tool_name)
        try:
            args = json.loads(arguments) if arguments else {}
        except ValueError:
            return
        side = _Side(row, server, tool, args, at)
        match = self._best(side, [m for m in self.mcp_calls if m.at >= at - 1.0])
        if match is not None:
            self.mcp_calls.remove(match)
            mcp: McpCall = match.row  # type: ignore[assignment]
            row.mcp_call_id, row.origin, row.server_name = mcp.id, "mcp", mcp.server_name
            row.decision = tool_call_decision(mcp.decision)
            row.decision_rule = mcp.matched_rule if row.decision != "allowed" else None
        else:
            self.model_calls.append(side)

    def _link_mcp(self, side: _Side) -> None:
        match = self._best(side, [m for m in self.model_calls if side.at >= m.at - 1.0])
        if match is not None:
            self.model_calls.remove(match)
            side.row.tool_call_id = match.row.id  # type: ignore[union-attr]
        else:
            self.mcp_calls.append(side)

    @staticmethod
    def _best(side: _Side, others: list[_Side]) -> _Side | None:
        """The newest of `others` with the same tool and arguments, preferring one whose server
        name goes with this one's (`mcp__files__x` and a server that calls itself `files-server`)."""
        same = [
            o for o in others
            if o.tool == side.tool and o.arguments == side.arguments and abs(o.at - side.at) <= LINK_WINDOW
        ]  # fmt: skip
        preferred = [o for o in same if _related(o.server, side.server)]
        return (preferred or same or [None])[-1]


def _remember(table: OrderedDict, key: Any, value: Any) -> None:
    table[key] = value
    while len(table) > _KEEP:
        table.popitem(last=False)
