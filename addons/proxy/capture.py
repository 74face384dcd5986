"""The capsem mitmproxy addon that captures: last in the chain it builds (`Capsem.chain`).

`Capsem` owns the session and the recorder (`running`, `done`) and turns each flow into
messages (`addons/messages.py`) on the outbox (`addons/proxy/outbox.py`), which a sender thread
passes to the recorder process; decoding, parsing, pricing and writing happen there. The addons
before it in the chain have already opened the flow's state and decided its route
(`addons/proxy/flows.py`), its policy verdict (`policy_gate.py`) and its budgets and credentials
(`guard.py`). Here: the framing of a streamed response and the `ResponseTap` that returns each
chunk unchanged, the tap on a streamed request body, one `FlowEnded` for every flow (`response`,
`error`, `websocket_end`). `done` ends the open flows, stops the recorder (it rolls the session up),
marks the session `crashed` if the recorder died. A capture failure is logged and counted, never
raised to mitmproxy: the flow goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Optional

from mitmproxy import http
from mitmproxy.addonmanager import Loader
from mitmproxy.log import ALERT

from addons.budgets import RULE_PREFIX
from addons.memory import freeze_startup, return_large_blocks
from addons.messages import (
    FlowEnded,
    StreamOpened,
    WsMessage,
    WsOpened,
)
from addons.providers import is_event_stream, stream_framing
from addons.proxy.approvals import Approvals
from addons.proxy.connection_hooks import Connections
from addons.proxy.connections import describe
from addons.proxy.flows import Flows, collect_request, response_head
from addons.proxy.guard import Guard
from addons.proxy.guardrails import Guardrails
from addons.proxy.handover import RecorderProcess
from addons.proxy.hooks import guarded
from addons.proxy.outbox import Barriers, Outbox
from addons.proxy.policy import Policy, PolicyError
from addons.proxy.policy_gate import PolicyGate
from addons.proxy.session import Session
from addons.proxy.tap import RequestTap, ResponseTap
from addons.proxy.tool_gate import ToolGate, released
from addons.spec import RecorderSpec, otlp_of, spec_of
from capsem.ids import SESSION_ID
from capsem.paths import main_db_path
from capsem.redact import scrubber_for
from capsem.settings import Settings, SettingsError, defaults, load
from capsem.team.config import team_of

logger = logging.getLogger(__name__)


def _yaml_value(text: str) -> Any:
    """A `--set` value read as YAML (`4096` -> 4096), as `capsem config --set` reads it; the text
    itself when it is not YAML (the settings then refuse it, naming it)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


class Capsem:
    """Records every flow into the session database (through the recorder)."""

    def __init__(self, *, recorder: Callable[[Outbox, RecorderSpec], Barriers] | None = None) -> None:
        """`recorder`: what runs the recorder instead of a child process (in-process tests pass
        `addons/recorder/thread.py: RecorderThread`; the proxy side never imports the recorder side)."""
        self.make_recorder = recorder
        self.settings: Settings = defaults()
        self.session: Session | None = None
        self.outbox: Outbox | None = None
        self.recorder: Barriers | None = None
        self.flows = Flows(self)
        """Each open flow's state (the first addon of the chain)."""
        self.policy = Policy()
        self.guard = Guardrails()
        """Brokered credentials and budgets (`addons/proxy/guardrails.py`)."""
        self.hook_failures = 0
        self.connections = Connections(self)
        self.approvals = Approvals(self)
        """Requests an `ask` rule holds for a person (`addons/proxy/approvals.py`)."""
        self.chain = [self.flows, self.connections, PolicyGate(self), Guard(self), ToolGate(self), self]
        """The addons in the order mitmproxy must call them (`addons/capsem_addon.py` registers them):
        each open flow's state first, then the connections, the policy, the guardrails, the tool
        rules on the answer (`tool_gate.py`), capture last (its tap sees the upstream's bytes)."""

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
            "capsem_emulated",
            bool,
            False,
            "The session's answers cost nothing (run --emulator, demo, replay): no budget counts it.",
        )
        loader.add_option(
            "capsem_preview_bytes",
            Optional[str],  # noqa: UP045 (text, checked by the settings: a bad value is refused in one line)
            None,
            "Body preview size in bytes (default from config).",
        )

    def configure(self, updated: set[str]) -> None:
        from mitmproxy import ctx

        # A bad value is logged as one line, never raised: mitmproxy prints a traceback for an
        # exception raised while it loads a script; an ERROR at start-up makes mitmdump exit 1.
        sid = ctx.options.capsem_session_id
        if "capsem_session_id" in updated and sid and not SESSION_ID.fullmatch(sid):
            logger.error("capsem: --set: capsem_session_id must be YYYYMMDD-HHMMSS-xxxx, got %r", sid)
        overrides = {}
        if ctx.options.capsem_preview_bytes is not None:
            overrides["capture.preview_bytes"] = _yaml_value(ctx.options.capsem_preview_bytes)
        try:
            self.configure_settings(load(overrides=overrides))
        except (SettingsError, PolicyError) as exc:
            logger.error("capsem: %s", exc)

    def configure_settings(self, settings: Settings) -> None:
        """Use `settings` (configure's job; in-process tests call it directly)."""
        self.policy = Policy.from_settings(settings)
        guard = Guardrails.from_settings(settings)  # reads the credentials' sources
        if self.session is not None and self.recorder is not None:  # options changed while running
            self.guard.stop()
            guard.start(self.recorder, self.session.id, main_db_path())
        self.guard = guard
        self.settings = settings

    def running(self) -> None:
        if self.session is not None:
            return
        from mitmproxy import ctx

        return_large_blocks()  # a long WebSocket's growing messages must not keep mitmdump's RSS up
        self.start(
            session_id=ctx.options.capsem_session_id,
            mode=ctx.options.capsem_mode,
            command=ctx.options.capsem_command,
            emulated=ctx.options.capsem_emulated,
        )
        freeze_startup()  # its state, started, left out of the collector's full collections

    def start(
        self,
        session_id: str | None = None,
        mode: str = "mitmdump",
        command: str | None = None,
        emulated: bool = False,
    ) -> None:
        """Register the session and start the recorder (called by `running`; tests call it directly).
        An `emulated` session's answers cost nothing: its budgets count its own calls (a budget can
        be tried on the emulator), but no other session's budget counts them (main.db's `spend`)."""
        session = self.session = Session.register(session_id, mode=mode, command=command, emulated=emulated,
                                                  scrubber=scrubber_for(self.settings.capture))  # fmt: skip
        spec = spec_of(self.settings.capture, session_id=session.id, db_path=str(session.db_path),
                       main_db_path=str(main_db_path()), mode=mode, track_spend=bool(self.guard.budgets),
                       learn=self.guard.broker.secrets, otlp=otlp_of(self.settings.export),
                       team=team_of(self.settings) is not None, emulated=emulated)  # fmt: skip
        self.outbox = Outbox()
        self.connections.start()

        def announce() -> None:
            logger.log(ALERT, f"capsem: recording session {session.id} into {session.db_path}")
            if guarded := self.guard.describe():
                logger.log(ALERT, f"capsem: guarding with {guarded}")

        if self.make_recorder is not None:
            self.recorder = self.make_recorder(self.outbox, spec)
            self.recorder.start()
            announce()
        else:
            import msgspec

            process = RecorderProcess(self.outbox, msgspec.json.encode(spec))
            process.on_ready = announce  # session.db is open
            self.recorder = process
            process.start()
        self.guard.start(self.recorder, session.id, main_db_path())
        # `capsem run` starts the agent on this line; flows wait in the outbox for session.db
        logger.info(f"capsem: session {session.id} registered; capture started")

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything handed over so far is committed (tests, the CLI)."""
        return self.recorder is not None and self.recorder.flush(timeout)

    def done(self) -> None:
        if self.session is None or self.recorder is None or self.outbox is None:
            return
        self.approvals.stop()  # held requests are denied and recorded before their flows end
        now = time.time()
        for key in list(self.flows.open):
            self._end(key, None, "capture stopped before the flow finished", now)
        self.connections.close(now)
        self.guard.stop()
        failure = self.recorder.stop()
        stats = self.outbox.stats
        if failure is None and (stats.dropped_chunks or stats.dropped_messages):
            logger.warning("capsem: the recorder fell behind: %d chunks and %d messages not recorded",
                           stats.dropped_chunks, stats.dropped_messages)  # fmt: skip
        if failure is not None:
            self._mark_failed(failure)
        else:
            logger.log(ALERT, f"capsem: session {self.session.id} stopped; database {self.session.db_path}")
        self.session = None
        self.recorder = None

    def _mark_failed(self, failure: str) -> None:
        """The recorder did not end the session: say what was lost, in main.db when it can be
        written, in the log (and `capsem run`'s summary) in any case."""
        assert self.session is not None and self.outbox is not None
        health = getattr(self.recorder, "health", {})
        rows_lost = int(health.get("capture_rows_lost") or 0)
        stats = self.outbox.stats
        lost = [f"{n} {what}" for n, what in (
            (stats.dropped_messages, "messages dropped by the hand-over (no recorder to take them)"),
            (stats.dropped_chunks, "body chunks dropped"), (rows_lost, "rows could not be written"),
            (getattr(self.recorder, "missed_flows", 0), "flows missed by recorders that died"),
        ) if n]  # fmt: skip
        reason = failure + (f"; not recorded: {', '.join(lost)}" if lost else "")
        try:
            self.session.mark_failed(reason, rows_lost)
        except Exception as exc:
            logger.log(ALERT, f"capsem: the end of session {self.session.id} could not be recorded in main.db "
                              f"({exc!r}); its record is incomplete")  # fmt: skip
        logger.log(ALERT, f"capsem: session {self.session.id} crashed: {reason}")

    def put(self, message: Any) -> None:
        if self.outbox is not None:
            self.outbox.put(message)

    # -- flows ------------------------------------------------------------------------------

    @guarded
    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Last in the chain: the policy and the guardrails have decided on the headers."""
        state = self.flows.get(flow)
        req = flow.request
        if state is None or not req.stream:
            return
        if flow.response is not None:
            # mitmproxy cannot answer a request whose body it streams (stream_large_bodies):
            # refuse it by closing the connection; nothing is sent upstream either way
            flow.response = None
            flow.kill()
            return
        # mitmproxy will stream this request body (e.g. stream_large_bodies)
        limit = self.settings.capture.max_parse_bytes if state.route else self.settings.capture.preview_bytes
        state.request_tap = RequestTap(limit)
        req.stream = _chain(state.request_tap, req.stream)

    @guarded
    def responseheaders(self, flow: http.HTTPFlow) -> None:
        state = self.flows.get(flow)
        resp = flow.response
        if state is None or resp is None or self.outbox is None:
            return
        state.response = response_head(resp)
        if state.tool_whole:  # read whole for the tool rules: recorded as a whole body
            return
        content_type = state.response.header("content-type")  # as the recorder reads it: the first
        framing = (
            stream_framing(state.route.protocol, content_type, state.request.path) if state.route else None
        )
        event_stream = is_event_stream(content_type)
        if not (framing or event_stream or resp.stream):
            return
        # a GET event stream may carry MCP answers (HTTP+SSE transport): the recorder reads it
        mcp_stream = state.route is None and state.head.method == "GET" and event_stream
        put = self.outbox.put_chunk if state.route else self.outbox.put_lone_chunk if mcp_stream else None
        capture = self.settings.capture
        keep = capture.content_max_bytes if state.mcp else capture.preview_bytes  # MCP: whole answers
        state.response_tap = ResponseTap(flow.id, put, keep)
        resp.stream = _chain(state.response_tap, resp.stream)
        if put is not None:  # to the recorder
            self.outbox.put(StreamOpened(state.head, state.response, state.route, framing, mcp_stream))

    @guarded
    def response(self, flow: http.HTTPFlow) -> None:
        state = self.flows.get(flow)
        if flow.websocket is not None and state is not None and flow.response is not None:
            # a 101 upgrade: its messages follow; the flow ends at websocket_end
            collect_request(flow, state)
            state.response = response_head(flow.response)
            self.put(WsOpened(state.head, state.response, self.connections.process(state.head.conn)))
            return
        self._finish(flow, None)

    @guarded
    def error(self, flow: http.HTTPFlow) -> None:
        state = self.flows.get(flow)
        refused_ask = (
            state is not None and state.approval is not None and state.approval.decision != "approved"
        )
        if state is not None and (state.decision == "denied" or refused_ask) and flow.response is None:
            rule = state.matched_rule or ""
            what = (
                f"budget {rule[len(RULE_PREFIX) :]!r}"
                if rule.startswith(RULE_PREFIX)
                else f"policy rule {rule!r}"
            )
            if refused_ask:  # a streamed request an `ask` rule held: not approved
                what += f" ({state.approval.decision.replace('_', ' ')} by {state.approval.decided_by})"  # type: ignore[union-attr]
            self._finish(flow, f"denied by capsem {what}: connection closed")
            return
        message = flow.error.msg if flow.error else "unknown error"
        server = flow.server_conn
        if (
            flow.response is None
            and server.address
            and not server.timestamp_tcp_setup
            and not message.startswith(("Client", "client", "Connection killed"))
        ):  # the upstream connection was never made: say why as for a CONNECT tunnel
            message = describe(server.address[0], server.address[1], message, tls=False, waited=0.0)
        self._finish(flow, message)

    # -- websockets (Responses over WebSocket: Codex CLI) ----------------------------------------

    @guarded
    def websocket_message(self, flow: http.HTTPFlow) -> None:
        """After the guardrails (which may have waited for a budget and dropped a refused turn)."""
        state = self.flows.get(flow)
        if state is None or flow.websocket is None:
            return
        msg = flow.websocket.messages[-1]
        side = "agent" if msg.injected and released(state, msg.content, take=True) else (  # the tool gate's
            "model" if msg.dropped and not msg.from_client else "both")  # fmt: skip  # held or replaced by it
        decided = tuple(state.tool_decisions)
        state.tool_decisions.clear()  # each goes with the message it came with (the turn's rows)
        self.put(WsMessage(flow.id, msg.from_client, msg.content, msg.is_text, msg.timestamp, decided, side))
        # mitmproxy keeps every message of a socket until it ends (its issue #6620: a Codex session's
        # whole traffic, never freed); capsem has its copy, and mitmproxy sends the message it holds
        # apart, so only the current one stays for the addons after this one
        del flow.websocket.messages[:-1]

    @guarded
    def websocket_end(self, flow: http.HTTPFlow) -> None:
        ws = flow.websocket
        code = ws.close_code if ws is not None else None
        reason = ws.close_reason if ws is not None else None
        # whether the close code is an error of the flow is the recorder's decision (close_error)
        self._finish(flow, flow.error.msg if flow.error else None, close=(code, reason or None))

    # -- the end of a flow ---------------------------------------------------------------------

    def _finish(
        self, flow: http.HTTPFlow, error: str | None, close: tuple[int | None, str | None] = (None, None)
    ) -> None:
        state = self.flows.get(flow)
        if state is None:
            return
        collect_request(flow, state)
        resp = flow.response
        if resp is not None and state.response is None:
            state.response = response_head(resp)
        ended = (resp.timestamp_end if resp is not None else None) or time.time()
        if flow.websocket is not None and flow.websocket.timestamp_end:
            ended = flow.websocket.timestamp_end
        body = resp.raw_content if resp is not None and state.response_tap is None else None
        if body is not None and state.upstream_body is not None:
            body = state.upstream_body  # the record keeps what the model sent
        # a reply that failed before its body was whole, and was not streamed, never reached the
        # client: mitmproxy answered it with 502 itself (unless the client had gone first)
        refused = error is not None and resp is not None and state.response_tap is None and body is None
        client_status = 502 if refused and not error.lower().startswith("client") else None
        if error is not None:
            self.connections.attempts.flow_failed(flow.client_conn.id)
        self._end(flow.id, body, error, ended, client_status, close)

    def _end(self, key: str, body: bytes | None, error: str | None, ended: float,
             client_status: int | None = None, close: tuple[int | None, str | None] = (None, None)) -> None:  # fmt: skip
        """Hand the flow over as one `FlowEnded`; the hook side forgets it."""
        state = self.flows.close(key)
        tap = state.response_tap
        self.put(
            FlowEnded(
                request=state.head, ended=ended, route=state.route, request_body=state.request_body,
                request_size=state.request_size, request_truncated=state.request_truncated,
                response=state.response, response_body=body,
                response_size=tap.bytes if tap is not None else len(body or b""),
                streamed=tap is not None, first_chunk_at=tap.first_at if tap else None,
                stream_preview=bytes(tap.preview) if tap is not None and tap.preview else None,
                error=error, decision=state.decision, matched_rule=state.matched_rule,
                tap_failure=tap.failure if tap is not None else None, mcp=state.mcp,
                websocket=state.response is not None and state.response.status == 101,
                client_status=client_status, substitutions=state.substitutions, close_code=close[0],
                close_reason=close[1], approval=state.approval, tool_decisions=tuple(state.tool_decisions),
                delivered_body=state.delivered_body or (state.tool_hold.delivered if state.tool_hold else None),
                process=self.connections.process(state.head.conn),
            )
        )  # fmt: skip


def _chain(tap: Callable[[bytes], bytes], existing: Any) -> Callable[[bytes], bytes]:
    """Our tap sees the original bytes; a stream function set by another addon runs after it."""
    if callable(existing):
        return lambda chunk: existing(tap(chunk))
    return tap
