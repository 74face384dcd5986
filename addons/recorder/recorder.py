"""The recorder: messages from the hooks in, rows to the writer out (in the recorder process).

It keeps what spans several messages: the reader of each streamed response, the turns of each
WebSocket, the MCP streams and held rows (in the ledger), the pending tool calls of each trace,
and the process behind each client connection. Everything else is done by the pure builders
(`addons/recorder/build.py`). A message that cannot be handled is counted and logged; the next one is
handled as usual.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from addons.body import ResponseReader, cap_text
from addons.conversations import Conversations
from addons.items import Item, request_items
from addons.messages import (
    CUT_MARGIN,
    Chunk,
    Chunks,
    FlowEnded,
    Message,
    RequestHead,
    StreamOpened,
    ToolDecision,
    WsMessage,
    WsOpened,
)
from addons.providers import parser_for, stream_framing, websocket_route
from addons.recorder import build, previews
from addons.recorder.bodies import Body, BodyStore
from addons.recorder.mcp_ledger import MCP_PREVIEW_BYTES, McpLedger
from addons.recorder.outcome import apply_tool_decisions, call_error
from addons.recorder.previews import KEPT_PREVIEW_BYTES
from addons.recorder.spend import SessionSpend
from addons.recorder.streams import StreamRead, chunks_json
from addons.recorder.traces import TraceTracker
from addons.recorder.websocket import Turn, WebSocketTurns, close_error, request_of
from addons.spec import WS_TURN
from capsem.redact import learn_credentials
from capsem.settings import CaptureSettings
from capsem.store.bodies import known_pieces
from capsem.store.rows import IdMinter, McpCall, ModelCall, ResponseChunksRow, Row
from capsem.store.writer import SessionWriter

logger = logging.getLogger(__name__)

ProcessInfo = tuple[str | None, int | None]


@dataclass(slots=True)
class _Socket:
    net_id: int
    """The id of the upgrade flow's net_events row, written when the socket ends."""
    request: RequestHead
    turns: WebSocketTurns = field(default_factory=WebSocketTurns)
    sent: int = 0
    received: int = 0
    server_messages: int = 0
    trace: str | None = None
    process: ProcessInfo = (None, None)
    tool_decisions: list[ToolDecision] = field(default_factory=list)
    """The tool rules' verdicts that came with its messages, for the turns still to be written."""


class Recorder:
    """Turns messages into rows. Not thread-safe: owned by the recorder's one thread."""

    def __init__(
        self,
        writer: SessionWriter,
        settings: CaptureSettings,
        spend: SessionSpend | None = None,
    ) -> None:
        self.writer = writer
        self.settings = settings
        self.spend = spend
        """This session's spend, for budgets (None: no budget is configured)."""
        self.failures = 0
        self.ids = IdMinter(writer.max_ids())
        self.traces = TraceTracker(settings.max_pending_calls)
        self.mcp = McpLedger(
            self.ids,
            content_limit=min(settings.content_max_bytes, MCP_PREVIEW_BYTES),
            preview_limit=settings.preview_bytes + CUT_MARGIN,  # the flow's preview, read across its cut
            cap=lambda text, limit: cap_text(text, limit, writer.scrubber.scrub),
        )
        self.bodies = BodyStore(writer.scrubber, self.ids, known_pieces(writer.conn))
        self.conversations = Conversations()
        self.conversations.stored = {r[0] for r in writer.conn.execute("SELECT hash FROM item_data")}
        self.readers: dict[str, StreamRead] = {}
        self._held: list[StreamRead] = []
        """Readers holding chunks back (`feed_held`)."""
        self.sockets: dict[str, _Socket] = {}
        self.restart_missed: int | None = None
        """In a recorder restarted after its predecessor died: the flows not recorded whole so far
        (`capture_missed_flows`); None in a session's first recorder."""

    def handle(self, message: Message) -> None:
        """Handle one message; a failure is logged and counted, never raised."""
        handler = _HANDLERS.get(type(message))
        if handler is None:
            return
        try:
            handler(self, message)
        except Exception as exc:
            self.failures += 1
            logger.warning("capsem: recording failed (%s): %r", type(message).__name__, exc,
                           exc_info=logger.isEnabledFor(logging.DEBUG))  # fmt: skip
        ended = message if type(message) is FlowEnded else None
        if self.spend is not None and ended is not None and (ended.route is not None or ended.websocket):
            self.spend.counted(ended.request.key)  # even when it failed; a socket: the turn it left open

    def tick(self, now: float | None = None) -> None:
        """Periodic work: MCP rows whose answer never came are written without it."""
        self._write(self.mcp.expired(time.time() if now is None else now))

    def close(self) -> None:
        """Shutdown: whatever is still held is written."""
        self._write(self.mcp.expired(0.0, wait=0.0) if self.mcp.waiting else [])

    def _write(self, rows: list[Row] | list) -> None:
        if rows:
            self.writer.add(rows)
            if self.spend is not None:
                for row in rows:
                    if type(row) is ModelCall:
                        self.spend.add(row)

    # -- streamed bodies -----------------------------------------------------------------------

    def _stream_opened(self, msg: StreamOpened) -> None:
        if msg.route is None:
            if msg.mcp_stream:
                self.mcp.open_stream(msg)
            return
        reader = self._reader(
            msg.route, msg.framing, msg.response.header("content-encoding"), msg.response.status
        )
        self.readers[msg.request.key] = StreamRead(reader, started=msg.request.started)

    def _reader(self, route, framing: str | None, encoding: str | None, status: int) -> ResponseReader:
        return ResponseReader(
            parser_for(route.protocol),
            framing=framing,
            content_encoding=encoding,
            status=status,
            preview_bytes=self.settings.preview_bytes,
            max_parse_bytes=self.settings.max_parse_bytes,
            keep_bytes=self.settings.max_body_bytes + CUT_MARGIN,  # cut clear of a secret: `BodyStore.cut`
        )

    def _chunk(self, msg: Chunk) -> None:
        state = self.readers.get(msg.key)
        if state is None:
            self._write(self.mcp.stream_chunk(msg.key, msg.at, msg.data) or [])
            return
        if state.take(msg.data, msg.at):  # held: fed with its batch's others (`feed_held`)
            self._held.append(state)

    def _chunks(self, msg: Chunks) -> None:
        """A model call's chunks of one batch, packed by `Outbox.take`: taken in one step."""
        state = self.readers.get(msg.key)  # none: its `StreamOpened` was lost (nothing reads them)
        if state is not None and state.take_many(msg.data, msg.sizes, msg.times):
            self._held.append(state)

    def feed_held(self) -> None:
        """Feed each reader the chunks it held back, at once: a batch carries several chunks of a
        busy stream, and decoding and framing them in one pass costs less than one by one (the
        reader gives the same result however a body is cut). The loop calls it after each batch;
        a flow's end feeds them first too."""
        held, self._held = self._held, []
        for state in held:
            try:
                state.feed_held()
            except Exception as exc:  # the reader never raises; a bug must not stop the loop
                self.failures += 1
                logger.warning("capsem: recording failed (Chunk): %r", exc)

    # -- finished flows ------------------------------------------------------------------------

    # Long on purpose: the one place a finished flow is routed (WebSocket, MCP, model call, plain);
    # each branch is a few lines that call a builder.
    def _flow_ended(self, flow: FlowEnded) -> None:
        if self._held:
            self.feed_held()
        key = flow.request.key
        state = self.readers.pop(key, None)
        socket = self.sockets.pop(key, None)
        if flow.close_code is not None and flow.error is None:
            turn_open = socket is not None and socket.turns.current is not None
            closed = close_error(flow.close_code, flow.close_reason, turn_open)
            if closed is not None:
                flow = _with_error(flow, closed)
        mcp_rows, stream_preview = self.mcp.close_stream(flow)
        self._write(mcp_rows)
        settings = self.settings
        process = flow.process or (None, None)
        request_body, decode_error = build.decode(
            flow.request_body, flow.request.header("content-encoding"), settings.max_parse_bytes
        )
        summary = None
        route = flow.route
        if route is not None and flow.response is not None and not flow.websocket:
            if state is None and flow.streamed and self.restart_missed is not None:
                flow = self._lost_stream(flow)
            if state is None:  # a whole body (an SSE one too: read whole for the tool rules, `tool_gate.py`)
                framing = stream_framing(
                    route.protocol, flow.response.header("content-type"), flow.request.path
                )
                state = StreamRead(self._reader(route, framing, flow.response.header("content-encoding"),
                                             flow.response.status))  # fmt: skip
                state.reader.feed(flow.response_body or b"")
            summary = state.reader.finish()
            response_preview = previews.read_preview(state.reader.preview, flow, self.writer.scrubber)
            decode_error = decode_error or state.reader.decode_error
        else:
            if stream_preview is not None and flow.stream_preview is None:
                flow = msgspec.structs.replace(flow, stream_preview=stream_preview)
            response_preview, response_error = previews.plain_preview(
                flow, settings.preview_bytes, self.writer.scrubber
            )
            decode_error = decode_error or response_error
        answered = summary is not None and summary.complete and not flow.tap_failure
        failures = (call_error(flow.error, answered=answered), flow.tap_failure, _dropped(flow))
        error = "; ".join(e for e in failures if e) or None
        kept = (
            route is not None and flow.decision != "denied"
        ) or flow.mcp  # whole bodies go to event_body_blobs
        request_preview = previews.request_preview(
            request_body,
            min(settings.preview_bytes, KEPT_PREVIEW_BYTES) if kept else settings.preview_bytes,
            self.writer.scrubber,
        )
        if socket is not None:
            socket.tool_decisions += flow.tool_decisions
            self._ws_end(flow, socket)
        net_id = socket.net_id if socket is not None else self.ids.next("net_events")
        rows: list[Row] = []
        trace = socket.trace if socket is not None else None
        if route is not None and summary is not None and flow.decision != "denied":
            request_obj = _json_object(request_body)
            call = build.CallInput(
                request=flow.request, route=route,
                info=parser_for(route.protocol).parse_request(request_body), summary=summary,
                started=flow.request.started, ended=flow.ended,
                status=flow.client_status or (flow.response.status if flow.response else None),
                request_size=flow.request_size, response_size=flow.response_size,
                request_preview=request_preview, streamed=bool(state and state.reader.streaming and flow.streamed),
                first_content=state.first_content if state else None, error=error, process=process,
                net_event_id=net_id, items=tuple(request_items(route.protocol, request_obj or b"")),
                previous_response_id=_previous_response(request_obj),
                released=flow.approval.decided_at if flow.approval and flow.approval.decision == "approved" else None,
            )  # fmt: skip
            rows, trace, fresh = build.model_call(call, ids=self.ids, traces=self.traces, mcp=self.mcp,
                                                  settings=settings, conversations=self.conversations,
                                                  scrub=self.writer.scrubber.scrub)  # fmt: skip
            apply_tool_decisions(rows, flow.tool_decisions)
        net = build.net_event(
            flow, row_id=net_id, settings=settings, scrubber=self.writer.scrubber, process=process,
            request_preview=request_preview, response_preview=response_preview, decode_error=decode_error,
            conn_type=("wss" if flow.request.scheme == "https" else "ws") if socket and socket.turns.messages else None,
            trace_id=trace, error=error,
            bytes_sent=socket.sent if socket is not None else None,
            bytes_received=socket.received if socket is not None else None,
        )  # fmt: skip
        self._write([net, *rows])  # the net row first: its headers teach the scrubber before bodies are kept
        if rows and isinstance(rows[0], ModelCall) and state is not None:
            self._keep_bodies(rows[0], flow, request_body, state.reader.body, state.reader.body_truncated, fresh,
                              delivered=flow.delivered_body)  # fmt: skip
            if state.chunks:
                self._write([ResponseChunksRow(rows[0].id, chunks_json(state.chunks))])
        if flow.substitutions:
            self._write(build.substitution_events(flow, net_event_id=net_id, process=process))
        if flow.approval is not None:
            self._write([build.approval_row(flow, net_event_id=net_id, process=process)])
        if flow.mcp:  # its answer is kept up to content_max_bytes, cut clear of a secret (`BodyStore.cut`)
            body = (
                flow.response_body
                if flow.response_body is not None
                else flow.stream_preview or stream_preview
            )
            encoding = flow.response.header("content-encoding") if flow.response else None
            response_body, _ = build.decode(body, encoding, settings.content_max_bytes + CUT_MARGIN)
            answer = self.bodies.cut(response_body, settings.content_max_bytes)
            for row in self.mcp.record(flow, net_id, request_body, response_body, process):
                self._write([row])
                self._keep_bodies(row, flow, request_body, answer, len(answer) < len(response_body))

    def _keep_bodies(self, owner: ModelCall | McpCall, flow: FlowEnded | None, request: bytes, response: bytes,
                     response_truncated: bool, items: list[Item] | None = None,
                     response_type: str | None = None, delivered: bytes | None = None) -> None:  # fmt: skip
        """The whole decoded request and response of a model or MCP call (up to `max_body_bytes`), the
        answer the agent got when not the model's (`delivered`), its new items, in one content frame."""
        limit = self.settings.max_body_bytes
        request_type = flow.request.header("content-type") if flow is not None else "application/json"
        if flow is not None and flow.response is not None:
            response_type = flow.response.header("content-type")
        request_cut = flow is not None and flow.request_truncated
        kept = self.bodies.cut  # at `limit`, before a secret that crosses it
        bodies = (
            Body("request", kept(request, limit), request_cut or len(request) > limit, request_type),
            Body(
                "response", kept(response, limit), response_truncated or len(response) > limit, response_type
            ),
        ) + (
            (Body("delivered", kept(delivered, limit), len(delivered) > limit, response_type),)
            if delivered
            else ()
        )
        self._write(self.bodies.keep(owner=owner.event_id, source_table=owner.TABLE, row_id=owner.id, bodies=bodies,
                                     items=items or ()))  # fmt: skip

    # -- websockets ----------------------------------------------------------------------------

    def _lost_stream(self, flow: FlowEnded) -> FlowEnded:
        """A streamed response whose start went to the recorder that died: its row says so, and it
        counts as missed."""
        assert self.restart_missed is not None
        self.restart_missed += 1
        self.writer.set_meta(capture_missed_flows=str(self.restart_missed))
        return _with_error(
            flow, "the recorder process died while this response streamed: its body was not recorded"
        )

    def _ws_opened(self, msg: WsOpened) -> None:
        # the upgrade's net_events row is written when the socket ends, after its turns: the
        # credentials its headers carry are learned now, so the turns' bodies are scrubbed of them
        learn_credentials(msg.request.headers, self.writer.scrubber)
        learn_credentials(msg.response.headers, self.writer.scrubber)
        self.sockets[msg.request.key] = _Socket(self.ids.next("net_events"), msg.request,
                                                process=msg.process or (None, None))  # fmt: skip

    def _ws_message(self, msg: WsMessage) -> None:
        socket = self.sockets.get(msg.key)
        if socket is None:
            return
        if msg.from_client:
            socket.sent += len(msg.content)
        elif msg.side != "agent":  # the upstream's (the tool gate's own messages are not counted)
            socket.received += len(msg.content)
            socket.server_messages += 1
        socket.tool_decisions += msg.tool_decisions
        self._ws_turns(
            socket, socket.turns.message(msg.from_client, msg.content, msg.is_text, msg.at, msg.side)
        )
        if self.spend is not None and not msg.from_client and not socket.turns.waiting:
            self.spend.counted(msg.key + WS_TURN, socket.server_messages)  # a turn it ended is counted

    def _ws_end(self, flow: FlowEnded, socket: _Socket) -> None:
        current = socket.turns.current
        at = flow.ended or (current.last_at if current else None) or 0.0
        self._ws_turns(socket, socket.turns.close(at, flow.error))

    def _ws_turns(self, socket: _Socket, turns: list[Turn]) -> None:
        head = socket.request
        for turn in turns:
            obj = _json_object(turn.request_body)
            request = request_of(obj) if obj is not None else None
            call = build.CallInput(
                request=head, route=websocket_route(head.host), info=turn.request, summary=turn.summary,
                started=turn.started, ended=turn.ended, status=turn.status, request_size=turn.request_bytes,
                response_size=turn.response_bytes,
                request_preview=previews.request_preview(turn.request_body, KEPT_PREVIEW_BYTES, self.writer.scrubber),
                streamed=True, first_content=turn.first_content, error=None,
                process=socket.process, net_event_id=socket.net_id,
                items=tuple(request_items("openai_responses", request or b"")),
                previous_response_id=_previous_response(request), websocket=True,
            )  # fmt: skip
            rows, socket.trace, fresh = build.model_call(
                call, ids=self.ids, traces=self.traces, mcp=self.mcp, settings=self.settings,
                conversations=self.conversations, scrub=self.writer.scrubber.scrub,
            )  # fmt: skip
            apply_tool_decisions(rows, socket.tool_decisions)
            self._write(rows)
            self._keep_bodies(rows[0], None, turn.request_body, turn.response_body, False, fresh,  # type: ignore[arg-type]
                              response_type="application/x-ndjson", delivered=turn.delivered_body)  # fmt: skip
            if turn.chunks:
                self._write([ResponseChunksRow(rows[0].id, chunks_json(turn.chunks))])


_HANDLERS: dict[type, Callable[[Recorder, Any], None]] = {
    Chunk: Recorder._chunk,
    Chunks: Recorder._chunks,
    FlowEnded: Recorder._flow_ended,
    StreamOpened: Recorder._stream_opened,
    WsOpened: Recorder._ws_opened,
    WsMessage: Recorder._ws_message,
}


def _json_object(body: bytes) -> dict | None:
    """A request body as a JSON object (None when it is not one)."""
    try:
        obj = msgspec.json.decode(body) if body else None
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def _previous_response(obj: dict | None) -> str | None:
    """The `previous_response_id` a Responses request continues, if any."""
    value = obj.get("previous_response_id") if obj else None
    return value if isinstance(value, str) and value else None


def _with_error(flow: FlowEnded, error: str) -> FlowEnded:
    return msgspec.structs.replace(flow, error=error)


def _dropped(flow: FlowEnded) -> str | None:
    if not flow.dropped_chunks:
        return None
    return f"capture overflow: {flow.dropped_chunks} body chunks not recorded (the recorder fell behind)"
