"""Guardrails in the path: brokered credentials and spend budgets, as the hooks use them.

The `Guard` addon (`addons/proxy/guard.py`) calls this in `requestheaders` and `request`, before anything
goes upstream: `substitute` puts the real keys in place of their placeholders (where allowed:
`addons/proxy/credentials.py`), `verdict` says whether a model call is within its budgets
(`addons/budgets.py`, over the spend in `addons/proxy/spend.py`) and `refusal` is the provider-shaped
answer to a call that is not. A call let through holds its reservation (`reserve`, its most
expensive outcome: `addons/reservation.py` for the tokens, `pricing/worst.py` for the price) until
its cost is counted. Nothing here blocks the event loop: the spend of other sessions is read by a
background thread, the price table is loaded by another when the budgets start (genai-prices is
imported there, never at mitmdump's start), and waiting for either, or for the cost of calls that
have just ended, is `await`ed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from addons.budgets import (
    Verdict,
    Worst,
    decide,
    matches,
    refusal,
    usd,
    ws_refusal,
    ws_request,
    ws_turn_ended,
)
from addons.messages import Route, Substitution
from addons.proxy.credentials import REFUSED, Broker, Brokered, load_secrets
from addons.proxy.spend import SETTLE_SECONDS, SpendView
from addons.proxy.team_budget import TeamLeases
from addons.reservation import Bound, bound, worst_of, ws_bound
from addons.spec import WS_TURN
from capsem.settings import Budget, Settings
from capsem.team.config import Team, team_of

if TYPE_CHECKING:
    from mitmproxy import http

    from addons.proxy.outbox import Barriers
    from pricing.worst import Rates

logger = logging.getLogger(__name__)


class Guardrails:
    """The budgets and the credential broker of one addon."""

    def __init__(self, budgets: Sequence[Budget] = (), brokered: Sequence[Brokered] = (),
                 team: Team | None = None) -> None:  # fmt: skip
        self.budgets = tuple(budgets)
        self.team = team
        self.leases: TeamLeases | None = None
        self.broker = Broker(brokered)
        self.view: SpendView | None = None
        self._expedite: Callable[[], None] = lambda: None
        """Sends what waits for the recorder now (`Outbox.expedite`, once started)."""
        self._prices: (
            Future[tuple[Callable[[str, str | None], Rates | None], Callable[[Rates, int, int], float]]]
            | None
        ) = None  # pricing.worst: rates, worst_cost
        self._announced: dict[str, str] = {}  # budget name -> the decision last logged
        self._ws_received: dict[str, int] = {}  # WebSocket flow key -> server messages seen
        self._ws_turns: dict[str, list[str]] = {}  # WebSocket flow key -> reservations of its open turns
        self._ws_count = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> Guardrails:
        """The guardrails `settings` configure; reads the credentials' real values (SettingsError)."""
        return cls(settings.budgets.entries, load_secrets(settings), team_of(settings))

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
        self.view = view = SpendView(self.budgets, session_id, main_db)
        leases = TeamLeases(self.budgets, self.team, session_id, view.own_spent, view.held_now)
        self.leases = leases if leases else None
        recorder.on_spend = self.view.on_report
        self._expedite = recorder.outbox.expedite
        recorder.on_down = self.view.recorder_down
        if recorder.exit_reason is not None:  # it died for good: nothing will confirm the spend
            self.view.recorder_down()
        self._prices = Future()
        threading.Thread(target=_load_prices, args=(self._prices,), name="capsem-prices", daemon=True).start()
        self.view.start()
        if self.leases is not None:
            self.leases.start()

    def stop(self) -> None:
        if self.leases is not None:  # closing them returns what this session did not use to the team
            view = self.view
            # what the calls hold first (it takes in the counted calls' reports), then the spend: a
            # report in between counts a call twice, never not at all
            used = (
                {b.name: view.reserved(b) + view.spent(b) for b in self.budgets if b.scope == "team"}
                if view
                else {}
            )
            self.leases.stop(used)
            self.leases = None
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
        """Whether the prices are loaded and the cost of every model call that has ended is counted."""
        return self.view is None or (
            self._prices is not None
            and self._prices.done()
            and self.view.settled()
            and (self.leases is None or self.leases.ready())
        )

    async def settle(self) -> None:
        """Wait (without blocking the event loop) for the prices, then until `settled`, at most
        SETTLE_SECONDS."""
        if self.view is not None and not self.view.settled():
            self._expedite()  # the ended calls wait in the outbox for the next round: send them now
        if self._prices is not None and not self._prices.done():
            await asyncio.wrap_future(self._prices)
        deadline = time.monotonic() + SETTLE_SECONDS + 0.1
        while not self.settled() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    def spent(self, budget: Budget) -> float:
        """A budget's spend for `decide`: a team budget's is this session's plus what the team's
        other sessions spent or hold (`addons/proxy/team_budget.py`)."""
        assert self.view is not None
        own = self.view.spent(budget)
        if budget.scope == "team" and self.leases is not None:
            return own + self.leases.others(budget)
        return own

    def _cap(self, budget: Budget) -> float:
        """How far a budget's spend may go for this session: a team budget's lease (with the others' part)."""
        if budget.scope == "team":
            return self.leases.cap(budget) if self.leases is not None else 0.0
        return budget.limit_usd

    def lease_wanted(self, verdict: Verdict, worst: Worst | None, ask: bool = True) -> Any:
        """When a team budget refused a call only because this session's lease is too small (and the
        team database answers), what to await for a larger one before deciding again (`ask`
        False: only whether there is one)."""
        b = verdict.budget
        if (verdict.decision != "denied" or b is None or b.scope != "team" or self.leases is None
                or verdict.unconfirmed or worst is None or worst.usd is None):  # fmt: skip
            return None
        assert self.view is not None
        if not ask:
            return True
        need = self.view.spent(b) + self.view.reserved(b) + worst.usd
        return self.leases.more(b, need)

    def ended(self, route: Route | None, flow_key: str, decision: str, counted: bool = True) -> None:
        """A flow ended: if it was a model call that went upstream, its cost is on its way (unless
        no recorder will count it: `counted`), and what it held is released once it is counted."""
        self._ws_received.pop(flow_key, None)
        turns = self._ws_turns.pop(flow_key, [])  # a socket's turns still open: recorded as it ends
        if self.view is None or (route is None and not turns):
            return
        held = [flow_key, *turns]
        if counted and (turns or decision != "denied"):
            self.view.ended(flow_key, reservations=held)
        else:
            for key in held:
                self.view.release(key)

    def ws_message(self, flow_key: str, content: bytes, injected: bool = False) -> None:
        """A server WebSocket message: if it ends a turn, that turn's cost is on its way (counted
        once the recorder has handled as many of the socket's server messages), and the oldest
        open turn's reservation is released then. capsem's own `error` for a refused turn
        (`injected`) ends no turn that went upstream."""
        if self.view is None:
            return
        seq = self._ws_received[flow_key] = self._ws_received.get(flow_key, 0) + 1
        if ws_turn_ended(content):
            turns = self._ws_turns.get(flow_key)
            held = [turns.pop(0)] if turns and not injected else []
            self.view.ended(flow_key + WS_TURN, seq, held)

    def tokens_of(self, flow: http.HTTPFlow, route: Route) -> Bound:
        """The tokens the call can use at most, from its body (or its headers, when the body
        streams upstream unread)."""
        req = flow.request
        if req.stream:
            size = req.headers.get("content-length", "")
            known = size.isdigit() and "content-encoding" not in req.headers
            return bound(route.protocol, None, size=int(size) if known else None)
        return bound(route.protocol, req.get_content(strict=False) or b"")

    def worst(self, route: Route, model: str | None, host: str, tokens: Bound) -> Worst | None:
        """The most the call can cost (`usd` None: its model has no known price); None when no
        budget matches it."""
        matched = [b for b in self.budgets if matches(b, route.provider, model, host)]
        if not matched:
            return None
        prices = self._prices
        if prices is None or not prices.done() or prices.exception() is not None:
            return worst_of(
                matched, tokens, model, None, _no_price
            )  # no table (logged): every model unpriced
        rates, worst_cost = prices.result()
        return worst_of(matched, tokens, model, rates(route.provider, model), worst_cost)

    def reserve(self, key: str, route: Route, host: str, verdict: Verdict, worst: Worst | None) -> None:
        """Hold the call's reservation, when the budgets let it through and it has a price."""
        if self.view is not None and worst is not None and worst.usd and verdict.decision != "denied":
            self.view.reserve(key, route.provider, worst.model, host, worst.usd)

    def ws_reserve(
        self, flow_key: str, route: Route, host: str, verdict: Verdict, worst: Worst | None
    ) -> None:
        """As `reserve`, for a turn on a WebSocket: held until the turn ends and is counted."""
        if verdict.decision == "denied" or worst is None or not worst.usd:
            return
        turns = self._ws_turns.setdefault(flow_key, [])
        self._ws_count += 1
        key = f"{flow_key}{WS_TURN}#{self._ws_count}"
        turns.append(key)
        self.reserve(key, route, host, verdict, worst)

    def verdict(self, route: Route, model: str | None, host: str, what: str = "",
                worst: Worst | None = None, lease_first: bool = False) -> Verdict:  # fmt: skip
        """The budgets' verdict on a model call (logged when a budget changes state, and every call
        let through unchecked); `what` names the call in that log line; `worst`: its reservation;
        `lease_first`: a refusal that a larger team lease may lift is asked again after it, and
        logged then."""
        assert self.view is not None
        confirmed = self.view.confirmed()
        verdict = decide(self.budgets, route.provider, model, host, self.spent, confirmed=confirmed,
                         reserved_of=self.view.reserved, worst=worst,
                         unreachable=self.leases and (lambda b: bool(self.leases.unreachable(b))),
                         cap_of=self.leases and self._cap)  # fmt: skip
        if verdict.unpriced and verdict.decision != "denied":
            key = f"{verdict.budget.name if verdict.budget else ''} {model}"
            if self._announced.get(key) != "unpriced":
                self._announced[key] = "unpriced"
                logger.warning("capsem: %s", verdict.message)
            return verdict
        if verdict.worst is not None:  # refused: its reservation does not fit
            if not (lease_first and self.lease_wanted(verdict, worst, ask=False)):
                logger.warning("capsem: %s: %s", what or host, verdict.message)
            return verdict
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
    def ws_bound(content: bytes) -> Bound:
        """The tokens a `response.create` can use at most."""
        return ws_bound(content)

    @staticmethod
    def ws_turn(content: bytes) -> tuple[bool, str | None]:
        """Whether a client WebSocket message is a model call (`response.create`), and its model."""
        return ws_request(content)

    @staticmethod
    def ws_refusal(verdict: Verdict) -> bytes:
        """The `error` event that answers a denied WebSocket turn."""
        return ws_refusal(verdict)


def _load_prices(future: Future) -> None:
    """The prices' thread: genai-prices and the price table loaded off the event loop."""
    try:
        from pricing.worst import rates, warm, worst_cost

        warm()
        future.set_result((rates, worst_cost))
    except Exception as exc:
        logger.warning("capsem: the price table could not be loaded (%r): budgets count every model as "
                       "unpriced (their on_unpriced decides)", exc)  # fmt: skip
        future.set_exception(exc)


def _no_price(rates: object, inputs: int, outputs: int) -> float:
    raise AssertionError("never called: no rates")
