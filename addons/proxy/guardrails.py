"""Guardrails in the path: brokered credentials and spend budgets, as the hooks use them.

The `Guard` addon (`addons/proxy/guard.py`) calls this in `requestheaders` and `request`, before anything
goes upstream: `substitute` puts the real keys in place of their placeholders (where allowed:
`addons/proxy/credentials.py`), `verdict` says whether a model call is within its budgets
(`addons/budgets.py`, over the spend in `addons/proxy/spend.py`) and `refusal` is the provider-shaped
answer to a call that is not. Nothing here blocks the event loop: the spend of other sessions is
read by a background thread, and waiting for the cost of calls that have just ended is `await`ed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from addons.budgets import Verdict, decide, model_of, refusal, usd, ws_refusal, ws_request, ws_turn_ended
from addons.messages import Route, Substitution
from addons.proxy.credentials import REFUSED, Broker, Brokered, load_secrets
from addons.proxy.spend import SETTLE_SECONDS, SpendView
from addons.spec import WS_TURN
from capsem.settings import Budget, Settings

if TYPE_CHECKING:
    from mitmproxy import http

    from addons.proxy.outbox import Barriers

logger = logging.getLogger(__name__)


class Guardrails:
    """The budgets and the credential broker of one addon."""

    def __init__(self, budgets: Sequence[Budget] = (), brokered: Sequence[Brokered] = ()) -> None:
        self.budgets = tuple(budgets)
        self.broker = Broker(brokered)
        self.view: SpendView | None = None
        self._needs_model = any(b.model is not None for b in self.budgets)
        self._announced: dict[str, str] = {}  # budget name -> the decision last logged
        self._ws_received: dict[str, int] = {}  # WebSocket flow key -> server messages seen

    @classmethod
    def from_settings(cls, settings: Settings) -> Guardrails:
        """The guardrails `settings` configure; reads the credentials' real values (SettingsError)."""
        return cls(settings.budgets.entries, load_secrets(settings))

    # -- lifecycle ------------------------------------------------------------------------------

    def describe(self) -> str | None:
        """One line on what is guarded (None when nothing is)."""
        parts = []
        if self.budgets:
            parts.append(
                "budgets " + ", ".join(f"{b.name} ({b.scope}, {usd(b.limit_usd)})" for b in self.budgets)
            )
        if self.broker:
            parts.append("brokered credentials " + ", ".join(b.entry.name for b in self.broker.brokered))
        return "; ".join(parts) or None

    def start(self, recorder: Barriers, session_id: str, main_db: Path) -> None:
        """Follow the spend of this session (from the recorder) and of the others (main.db)."""
        if not self.budgets:
            return
        self.view = SpendView(self.budgets, session_id, main_db)
        recorder.on_spend = self.view.on_report
        recorder.on_down = self.view.recorder_down
        if recorder.exit_reason is not None:  # it died for good: nothing will confirm the spend
            self.view.recorder_down()
        self.view.start()

    def stop(self) -> None:
        if self.view is not None:
            self.view.stop()
            self.view = None

    # -- credentials ----------------------------------------------------------------------------

    def substitute(self, flow: http.HTTPFlow) -> tuple[Substitution, ...]:
        """Put the real keys in place of their placeholders where allowed; what was done, per placeholder."""
        req = flow.request
        path, _, query = req.path.partition("?")
        plan = self.broker.plan(scheme=req.scheme, host=req.host, path=path, query=query,
                                headers=req.headers.items(multi=True))  # fmt: skip
        if plan is None:
            return ()
        for name, values in plan.headers.items():
            req.headers.set_all(name, values)
        if plan.query is not None:
            req.path = f"{path}?{plan.query}"
        for event in plan.events:
            if event.outcome == REFUSED:
                logger.warning("capsem: the placeholder of credential %s was not replaced (%s %s:%s): %s",
                               event.credential, req.method, req.host, req.port, event.reason)  # fmt: skip
        return plan.events

    # -- budgets --------------------------------------------------------------------------------

    def checks(self, route: Route | None) -> bool:
        """Whether a flow is a model call some budget must check."""
        return route is not None and self.view is not None

    def settled(self) -> bool:
        """Whether the cost of every model call that has ended is counted."""
        return self.view is None or self.view.settled()

    async def settle(self) -> None:
        """Wait (without blocking the event loop) until `settled`, at most SETTLE_SECONDS."""
        deadline = time.monotonic() + SETTLE_SECONDS + 0.1
        while not self.settled() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    def ended(self, route: Route | None, flow_key: str, decision: str) -> None:
        """A flow ended: if it was a model call that went upstream, its cost is on its way."""
        self._ws_received.pop(flow_key, None)
        if self.view is not None and route is not None and decision != "denied":
            self.view.ended(flow_key)

    def ws_message(self, flow_key: str, content: bytes) -> None:
        """A server WebSocket message: if it ends a turn, that turn's cost is on its way (counted
        once the recorder has handled as many of the socket's server messages)."""
        if self.view is None:
            return
        seq = self._ws_received[flow_key] = self._ws_received.get(flow_key, 0) + 1
        if ws_turn_ended(content):
            self.view.ended(flow_key + WS_TURN, seq)

    def model_of(self, flow: http.HTTPFlow, route: Route) -> str | None:
        """The model of a call: from its URL, else (when a budget needs it) from its JSON body."""
        if route.model is None and self._needs_model and not flow.request.stream:
            return model_of(flow.request.get_content(strict=False))
        return route.model

    def verdict(self, route: Route, model: str | None, host: str, what: str = "") -> Verdict:
        """The budgets' verdict on a model call (logged when a budget changes state, and every call
        let through unchecked); `what` names the call in that log line."""
        assert self.view is not None
        confirmed = self.view.confirmed()
        verdict = decide(self.budgets, route.provider, model, host, self.view.spent, confirmed=confirmed)
        if verdict.unconfirmed and verdict.decision != "denied":
            logger.warning("capsem: %s: %s", what or host, verdict.message)
        elif verdict.budget is not None:
            state = verdict.decision + (" unconfirmed" if verdict.unconfirmed else "")
            if self._announced.get(verdict.budget.name) != state:
                self._announced[verdict.budget.name] = state
                logger.warning("capsem: %s", verdict.message)
        elif confirmed and self._announced:
            for name in [n for n, state in self._announced.items() if state.endswith("unconfirmed")]:
                del self._announced[name]
                logger.warning("capsem: budget %r: this session's spend is confirmed again", name)
        return verdict

    @staticmethod
    def refusal(route: Route, verdict: Verdict) -> tuple[int, bytes, dict[str, str]]:
        """The provider-shaped answer to a call the budgets deny."""
        return refusal(route.protocol, route.provider, verdict)

    @staticmethod
    def ws_turn(content: bytes) -> tuple[bool, str | None]:
        """Whether a client WebSocket message is a model call (`response.create`), and its model."""
        return ws_request(content)

    @staticmethod
    def ws_refusal(verdict: Verdict) -> bytes:
        """The `error` event that answers a denied WebSocket turn."""
        return ws_refusal(verdict)
