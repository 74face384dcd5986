"""The capsem mitmproxy addon: hooks that copy what they see to the recorder thread.

Every hook is cheap: it copies references into a `FlowData`, and the recorder thread does
the decoding, parsing, pricing and writing. Streamed responses (every `text/event-stream`,
and anything mitmproxy was told to stream) get a `ResponseTap` that returns each chunk
unchanged. Every flow ends in `response` or `error`; both finish its row, and `done`
finishes the ones still open, stops the recorder, rolls the session up and marks it
`stopped`. Nothing raised here may reach mitmproxy: a capture failure is logged and
recorded, the flow goes on.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, Optional, TypeVar
from urllib.parse import urlsplit

from mitmproxy import connection, exceptions, http, tls
from mitmproxy.addonmanager import Loader
from mitmproxy.log import ALERT

from addons import mcp
from addons.body import is_event_stream, stream_framing
from addons.flowdata import FlowData
from addons.policy import Policy, PolicyError
from addons.process import ProcessResolver
from addons.providers import detect, parser_for
from addons.providers.sniff import sniff_route
from addons.recorder import CaptureSettings, Recorder
from addons.session import Session
from addons.store import SessionStore
from addons.tap import RequestTap, ResponseTap
from addons.worker import RecorderThread
from capsem import __version__
from capsem.config import ConfigError, load_settings
from capsem.ids import SESSION_ID, utc_now
from capsem.redact import Scrubber

logger = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


def guarded(hook: F) -> F:
    """Never let a capture bug escape a hook: log it and carry on."""

    @functools.wraps(hook)
    def wrapper(self: Capsem, *args: Any) -> Any:
        try:
            return hook(self, *args)
        except Exception as exc:
            self.hook_failures += 1
            logger.warning("capsem: %s hook failed: %r", hook.__name__, exc, exc_info=True)
            return None

    return wrapper  # type: ignore[return-value]


class Capsem:
    """Records every flow into the session database."""

    def __init__(self) -> None:
        self.settings: dict[str, Any] = {}
        self.capture: CaptureSettings = CaptureSettings()
        self.session: Session | None = None
        self.worker: RecorderThread | None = None
        self.resolver: ProcessResolver | None = None
        self.scrubber = Scrubber()
        self.flows: dict[str, FlowData] = {}
        self.taps: dict[str, ResponseTap] = {}
        self.request_taps: dict[str, RequestTap] = {}
        self.processes: dict[str, Any] = {}
        self.policy = Policy()
        self.mcp_names: dict[str, str] = {}
        """MCP endpoint -> initialize name, filled by the recorder thread, read by the policy."""
        self.hook_failures = 0

    # -- lifecycle ------------------------------------------------------------------------

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "capsem_session_id",
            Optional[str],  # noqa: UP045 (mitmproxy needs typing.Optional)
            None,
            "Session id (YYYYMMDD-HHMMSS-xxxx); default: new.",
        )
        loader.add_option(
            "capsem_mode", str, "mitmdump", "Session mode stored in main.db (mitmdump, run...)."
        )
        loader.add_option(
            "capsem_command",
            Optional[str],  # noqa: UP045
            None,
            "Command line stored with the session.",
        )
        loader.add_option(
            "capsem_preview_bytes",
            Optional[int],  # noqa: UP045
            None,
            "Body preview size (default from config).",
        )

    def configure(self, updated: set[str]) -> None:
        from mitmproxy import ctx

        sid = ctx.options.capsem_session_id
        if "capsem_session_id" in updated and sid and not SESSION_ID.fullmatch(sid):
            raise exceptions.OptionsError(f"capsem_session_id {sid!r} is not YYYYMMDD-HHMMSS-xxxx")
        if not self.settings:
            try:
                self.settings = load_settings()
            except ConfigError as exc:
                raise exceptions.OptionsError(str(exc)) from exc
        self.capture = CaptureSettings.from_settings(self.settings)
        try:
            self.policy = Policy.from_settings(self.settings)
        except PolicyError as exc:
            raise exceptions.OptionsError(str(exc)) from exc
        if ctx.options.capsem_preview_bytes is not None:
            if ctx.options.capsem_preview_bytes < 0:
                raise exceptions.OptionsError("capsem_preview_bytes must be >= 0")
            self.capture = CaptureSettings(
                **{**self.capture.__dict__, "preview_bytes": ctx.options.capsem_preview_bytes}
            )

    def running(self) -> None:
        if self.session is not None:
            return
        from mitmproxy import ctx

        self.start(
            session_id=ctx.options.capsem_session_id,
            mode=ctx.options.capsem_mode,
            command=ctx.options.capsem_command,
        )

    def start(
        self, session_id: str | None = None, mode: str = "mitmdump", command: str | None = None
    ) -> None:
        """Open the session and start the recorder (called by `running`; tests call it directly)."""
        if not self.settings:
            self.settings = load_settings()
            self.capture = CaptureSettings.from_settings(self.settings)
        self.session = Session.start(session_id, mode=mode, command=command)
        session = self.session
        interval = int(self.settings.get("capture", {}).get("commit_interval_ms", 250)) / 1000

        def make_recorder() -> Recorder:
            store = SessionStore(session.db_path, self.scrubber)
            store.set_meta(session_id=session.id, capsem_version=__version__, started_at=utc_now(), mode=mode)
            return Recorder(store, self.capture, self.scrubber, mcp_names=self.mcp_names)

        def warm_up(recorder: Recorder) -> None:
            """Load prices and the tokenizer on the recorder thread once the session is open, so
            mitmdump listens without waiting for them (the first flows wait in the queue)."""
            from pricing import current_table
            from pricing.estimate import warm

            warm()
            recorder.store.set_meta(price_source=current_table().source)

        self.worker = RecorderThread(make_recorder, commit_interval=interval, warm_up=warm_up)
        self.worker.start()
        self.resolver = ProcessResolver()
        logger.log(ALERT, f"capsem: recording session {session.id} into {session.db_path}")

    def done(self) -> None:
        if self.session is None or self.worker is None:
            return
        now = time.time()
        for key in list(self.flows):
            fd = self.flows.pop(key)
            fd.error = fd.error or "capture stopped before the flow finished"
            self._collect_stream(fd)
            fd.response_ended = fd.response_ended or now
            # an upgraded websocket still open: end it like websocket_end would (turns in flight included)
            self.worker.put(("ws", key, "end", fd) if fd.status == 101 else ("close", fd))
        self.worker.stop()
        if self.resolver is not None:
            self.resolver.close()
        try:
            self.session.stop()
        except Exception as exc:
            logger.warning("capsem: rolling up session %s failed: %r", self.session.id, exc)
        logger.log(ALERT, f"capsem: session {self.session.id} stopped; database {self.session.db_path}")
        self.session = None
        self.worker = None

    # -- connections ------------------------------------------------------------------------

    @guarded
    def client_connected(self, client: connection.Client) -> None:
        if self.resolver is not None:
            self.processes[client.id] = self.resolver.lookup(client.peername)

    @guarded
    def client_disconnected(self, client: connection.Client) -> None:
        self.processes.pop(client.id, None)

    @guarded
    def tls_failed_client(self, data: tls.TlsData) -> None:
        """A client that refused our certificate never makes a flow: record the attempt."""
        if self.worker is None:
            return
        client = data.context.client
        host = client.sni or (data.context.server.address or ("?", 0))[0]
        port = (data.context.server.address or ("", 443))[1]
        now = time.time()
        fd = FlowData(
            key=f"tls-{uuid.uuid4().hex[:12]}",
            started=client.timestamp_start or now,
            scheme="https",
            host=host,
            port=port,
            method="CONNECT",
            path="",
            query="",
            http_version="",
            request_headers=[],
            client_addr=_addr(client.peername),
            process=self.processes.get(client.id),
            response_ended=now,
            error=f"client TLS handshake failed: {data.conn.error or 'unknown error'}",
        )
        self.worker.put(("close", fd))

    # -- flows ------------------------------------------------------------------------------

    @guarded
    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if self.worker is None:
            return
        req = flow.request
        parts = urlsplit(req.path if req.path.startswith("/") else "/" + req.path)
        fd = FlowData(
            key=flow.id,
            started=req.timestamp_start or time.time(),
            scheme=req.scheme,
            host=req.host,
            port=req.port,
            method=req.method,
            path=parts.path,
            query=parts.query,
            http_version=req.http_version,
            request_headers=list(req.headers.items(multi=True)),
            client_addr=_addr(flow.client_conn.peername),
            process=self.processes.get(flow.client_conn.id),
            route=detect(req.host, parts.path, req.method, req.port),
        )
        if fd.process is None and self.resolver is not None:
            fd.process = self.resolver.lookup(flow.client_conn.peername)
        self.flows[flow.id] = fd
        if self.policy.rules and (req.stream or not self.policy.has_mcp_rules):
            self._apply_policy(flow, fd, mcp.header_call(fd.request_headers))  # before any body byte goes up
            if req.stream and flow.response is not None:
                # mitmproxy cannot answer a request whose body it streams (stream_large_bodies):
                # refuse it by closing the connection; nothing is sent upstream either way
                flow.response = None
                flow.kill()
                return
        if req.stream:  # mitmproxy will stream this request body (e.g. stream_large_bodies)
            tap = RequestTap(self.capture.max_parse_bytes if fd.route else self.capture.preview_bytes)
            req.stream = _chain(tap, req.stream)
            self.request_taps[flow.id] = tap

    @guarded
    def request(self, flow: http.HTTPFlow) -> None:
        fd = self.flows.get(flow.id)
        if fd is None:
            return
        self._collect_request(flow, fd)
        if fd.route is None and fd.method == "POST":  # an unknown path: does the body look like a model call?
            fd.route = sniff_route(fd.host, fd.path, fd.header("content-type"), fd.header("content-encoding"),
                                   fd.request_body, port=fd.port)  # fmt: skip
        fd.mcp = (
            fd.route is None
            and fd.method == "POST"
            and mcp.looks_like_mcp(fd.request_headers, fd.request_body)
        )
        if self.policy.has_mcp_rules and not flow.request.stream and flow.response is None:
            body = flow.request.get_content(strict=False) or b""  # decoded (gzip...) when it can be
            calls = mcp.parse_request(body, dict(flow.request.headers)) if fd.mcp else None
            self._apply_policy(flow, fd, calls or [])

    def _apply_policy(self, flow: http.HTTPFlow, fd: FlowData, calls: list[mcp.McpRequest]) -> None:
        """Decide the flow (first matching rule; a batch is judged by its strictest tools/call):
        record the decision, log a warning, or answer 403 so nothing reaches the upstream."""
        endpoint = mcp.server_name(fd.host, fd.port, fd.path)
        names = (endpoint, self.mcp_names[endpoint]) if endpoint in self.mcp_names else (endpoint,)
        targets = [(names, c.tool_name) for c in calls if c.method == "tools/call" and c.tool_name]
        verdicts = [self.policy.decide(fd.host, fd.port, fd.path, fd.method, t) for t in targets or [None]]
        order = ("denied", "warned", "allowed")
        verdict = min(verdicts, key=lambda v: order.index(v.decision))
        fd.decision, fd.matched_rule = verdict.decision, verdict.rule
        if verdict.decision == "warned":
            logger.warning(
                "capsem: policy rule %s warns: %s %s:%s%s", verdict.rule, fd.method, fd.host, fd.port, fd.path
            )
        elif verdict.decision == "denied":
            message = f"blocked by capsem policy rule {verdict.rule!r}"
            ids = [c.raw_id for c in calls if c.id is not None]
            body: dict[str, Any] = {"error": {"type": "policy_denied", "message": message}}
            if ids:  # an MCP client gets a JSON-RPC error it can show
                body = {"jsonrpc": "2.0", "id": ids[0], "error": {"code": -32001, "message": message}}
            flow.response = http.Response.make(
                403,
                json.dumps(body),
                {"content-type": "application/json", "x-capsem-policy": str(verdict.rule)},
            )

    @guarded
    def responseheaders(self, flow: http.HTTPFlow) -> None:
        fd = self.flows.get(flow.id)
        resp = flow.response
        if fd is None or resp is None or self.worker is None:
            return
        fd.status = resp.status_code
        fd.response_headers = list(resp.headers.items(multi=True))
        fd.response_started = resp.timestamp_start
        content_type = resp.headers.get("content-type")
        framed = fd.route is not None and stream_framing(parser_for(fd.route.protocol), content_type, fd.path)
        if framed or is_event_stream(content_type) or resp.stream:
            # a GET event stream may carry MCP answers (HTTP+SSE transport): the recorder reads it
            fd.mcp_stream = fd.route is None and fd.method == "GET" and is_event_stream(content_type)
            keep = (
                self.capture.content_max_bytes if fd.mcp else self.capture.preview_bytes
            )  # MCP: whole answers
            sink = self.worker.put if fd.route is not None or fd.mcp_stream else None
            tap = ResponseTap(flow.id, sink, keep)
            resp.stream = _chain(tap, resp.stream)
            self.taps[flow.id] = tap
            fd.streamed = True
            if sink is not None:
                self.worker.put(("open", fd))

    @guarded
    def response(self, flow: http.HTTPFlow) -> None:
        if flow.websocket is not None:  # a 101 upgrade: the flow's rows are written at websocket_end
            self._upgraded(flow)
            return
        self._finish(flow, None)

    @guarded
    def error(self, flow: http.HTTPFlow) -> None:
        fd = self.flows.get(flow.id)
        if fd is not None and fd.decision == "denied" and flow.response is None:
            self._finish(flow, f"denied by capsem policy rule {fd.matched_rule!r}: connection closed")
            return
        self._finish(flow, flow.error.msg if flow.error else "unknown error")

    # -- websockets (Responses over WebSocket: Codex CLI) ----------------------------------------

    def _upgraded(self, flow: http.HTTPFlow) -> None:
        fd, resp = self.flows.get(flow.id), flow.response
        if fd is None or resp is None:
            return
        self._collect_request(flow, fd)
        fd.status = resp.status_code
        fd.response_headers = list(resp.headers.items(multi=True))
        fd.response_started = resp.timestamp_start

    @guarded
    def websocket_message(self, flow: http.HTTPFlow) -> None:
        fd = self.flows.get(flow.id)
        if fd is None or self.worker is None or flow.websocket is None:
            return
        msg = flow.websocket.messages[-1]
        message = (msg.from_client, msg.content, msg.is_text, msg.timestamp)
        self.worker.put(("ws", flow.id, "message", fd, *message))

    @guarded
    def websocket_end(self, flow: http.HTTPFlow) -> None:
        ws = flow.websocket
        error = flow.error.msg if flow.error else None
        if error is None and ws is not None and ws.close_code not in (None, 1000, 1001, 1005):
            reason = f": {ws.close_reason}" if ws.close_reason else ""
            error = f"websocket closed with code {ws.close_code}{reason}"
        self._finish(flow, error)

    def _finish(self, flow: http.HTTPFlow, error: str | None) -> None:
        fd = self.flows.pop(flow.id, None)
        if fd is None or self.worker is None:
            return
        self._collect_request(flow, fd)
        resp = flow.response
        fd.error = error
        if resp is not None:
            if fd.status is None:
                fd.status = resp.status_code
                fd.response_headers = list(resp.headers.items(multi=True))
                fd.response_started = resp.timestamp_start
            fd.response_ended = resp.timestamp_end or time.time()
            if not fd.streamed:
                fd.response_body = resp.raw_content
                fd.response_size = len(resp.raw_content or b"")
        else:
            fd.response_ended = time.time()
        self._collect_stream(fd)
        if fd.mcp and self.policy.has_mcp_rules:
            self._learn_mcp_name(flow, fd)
        if flow.websocket is not None and flow.response is not None and flow.response.status_code == 101:
            if flow.websocket.timestamp_end:
                fd.response_ended = flow.websocket.timestamp_end
            self.worker.put(("ws", fd.key, "end", fd))
            return
        self.worker.put(("close", fd))

    def _learn_mcp_name(self, flow: http.HTTPFlow, fd: FlowData) -> None:
        """An initialize answer names its server: learn it here, before the client's next call
        reaches a policy rule (the recorder thread, which learns it too, may lag behind)."""
        if b"initialize" not in (fd.request_body or b"") or flow.response is None:
            return
        body = fd.stream_preview if fd.streamed else flow.response.get_content(strict=False)
        for answer in mcp.parse_response(body or b"", fd.header("content-type", response=True)):
            name = mcp.initialize_name(answer)
            if name:
                self.mcp_names[mcp.server_name(fd.host, fd.port, fd.path)] = name

    def _collect_request(self, flow: http.HTTPFlow, fd: FlowData) -> None:
        tap = self.request_taps.pop(flow.id, None)
        if tap is not None:
            fd.request_body, fd.request_size = bytes(tap.body), tap.bytes
            fd.request_truncated = tap.bytes > len(tap.body)
        elif fd.request_body is None and flow.request.raw_content is not None:
            fd.request_body = flow.request.raw_content
            fd.request_size = len(fd.request_body)

    def _collect_stream(self, fd: FlowData) -> None:
        tap = self.taps.pop(fd.key, None)
        if tap is not None:
            fd.response_size = tap.bytes
            fd.first_chunk_at = tap.first_at
            fd.tap_failure = tap.failure
            if tap.preview:
                fd.stream_preview = bytes(tap.preview)


def _addr(peer: Any) -> str | None:
    if not peer:
        return None
    return f"{peer[0]}:{peer[1]}"


def _chain(tap: Callable[[bytes], bytes], existing: Any) -> Callable[[bytes], bytes]:
    """Our tap sees the original bytes; a stream function set by another addon runs after it."""
    if callable(existing):
        return lambda chunk: existing(tap(chunk))
    return tap
