"""Spend budgets: which budgets a model call falls under, how much of each is spent, what to do,
and the answer capsem gives when a budget is exhausted. Pure: no I/O, no mitmproxy.

Spend is kept as rows `(session_id, day, provider, model, host, cost)`: the ledger in main.db
(`spend`, one row per session, UTC day, provider, model and host) and this session's own rows
as the recorder reports them (`addons/proxy/spend.py`). A budget's spend is the cost of the rows it
matches within its scope: this session (`session`), today (`day`) or this month (`month`).

A call is `denied` when a budget it matches is spent (spend >= limit), `warned` when one is at
its warn fraction, else `allowed`; the strictest budget decides, the first declared among equals.
While this session's spend cannot be confirmed (its recorder is not answering), a matched budget
that is not already spent decides by its `on_unconfirmed`: `deny` (the default: refused, saying
why) or `allow` (let through unchecked, recorded `warned` with matched_rule
`budget:<name> (unconfirmed)`).
Before a matched call goes upstream, its most expensive outcome is reserved (`Worst`: its tokens
bounded by `addons/reservation.py`, priced by `pricing/worst.py`): it is `denied` when what is
spent, plus what the calls in flight hold, plus its own reservation passes the limit; the
reservation is replaced by the real cost when the call ends (`addons/proxy/spend.py`). A call
whose model has no known price decides by the budget's `on_unpriced`: `deny` (the default) or
`allow` (let through uncounted, recorded `warned` with matched_rule `budget:<name> (unpriced)`).
A denied call is answered by capsem in the provider's own error shape, status 402 (Payment
Required: the SDKs raise it at once and never retry it, unlike 429 and 5xx), with
`x-should-retry: false` for the SDKs that read it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any

import msgspec

from capsem.settings import Budget

SpendRow = tuple[str, str, str, str, str, float]
"""(session_id, day `YYYY-MM-DD` UTC, provider, model ('' unknown), host, estimated cost in USD)."""

STATUS = 402
RULE_PREFIX = "budget:"
"""`matched_rule` of a call a budget warned or denied: `budget:<name>`."""
UNCONFIRMED = " (unconfirmed)"
"""Suffix of the `matched_rule` of a call decided while the budget's spend could not be confirmed."""
UNPRICED = " (unpriced)"
"""Suffix of the `matched_rule` of a call whose model has no known price."""
SLACK = 1e-12
"""Sums of float costs may land a hair past a limit they meet exactly."""
CANNOT_CONFIRM = "capsem cannot confirm this budget's spend: its recorder is not answering"
TEAM_CANNOT_CONFIRM = "capsem cannot confirm this team budget's spend: the team database is not answering"
_ORDER = ("denied", "warned", "allowed")


def today(now: float | None = None) -> str:
    """The UTC day `YYYY-MM-DD` (budgets' days and months are UTC, like provider billing)."""
    moment = datetime.now(UTC) if now is None else datetime.fromtimestamp(now, UTC)
    return moment.strftime("%Y-%m-%d")


def usd(amount: float) -> str:
    """`$5.00`, `$0.0123`, `$0.000002`: cents from a dollar on, more decimals below."""
    if amount >= 1 or amount == 0:
        return f"${amount:,.2f}"
    return f"${amount:.4f}" if amount >= 0.0001 else f"${amount:.8f}".rstrip("0")


def matches(budget: Budget, provider: str, model: str | None, host: str) -> bool:
    """Whether a call to `host` for `model` of `provider` counts against `budget`."""
    if budget.provider is not None and not fnmatchcase(provider.lower(), budget.provider.lower()):
        return False
    if budget.model is not None and (not model or not fnmatchcase(model, budget.model)):
        return False
    return budget.host is None or fnmatchcase(host.lower(), budget.host.lower())


def in_scope(budget: Budget, row: SpendRow, *, day: str, session_id: str | None) -> bool:
    """Whether a spend row falls in the budget's scope: this session, `day`, or the month of `day`
    (a team budget: this session's rows of its period; the team's other spend comes from its lease)."""
    if budget.scope == "session":
        return row[0] == session_id
    if budget.scope == "team":
        return row[0] == session_id and (row[1] == day if budget.period == "day" else row[1][:7] == day[:7])
    return row[1] == day if budget.scope == "day" else row[1][:7] == day[:7]


def spent(budget: Budget, rows: Iterable[SpendRow], *, day: str, session_id: str | None) -> float:
    """The cost of the rows that `budget` matches within its scope."""
    return sum(
        r[5]
        for r in rows
        if in_scope(budget, r, day=day, session_id=session_id) and matches(budget, r[2], r[3] or None, r[4])
    )


@dataclass(frozen=True, slots=True)
class Worst:
    """What a call could cost at most: the amount a budget reserves for it."""

    usd: float | None
    """None: the price table has no price for its model."""
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    output_from: str = ""
    """Where the output bound comes from (`its max_tokens`...)."""
    referenced: str | None = None
    """What the request brings in beyond its body (its input is then bounded by the context window)."""

    @property
    def tokens(self) -> str:
        """`1,234 input tokens at most and 200 output tokens (its max_tokens)`, for messages."""
        inputs = f"{self.input_tokens:,} input tokens at most" + (
            f" (the model's context window: the request brings in {self.referenced})"
            if self.referenced
            else ""
        )
        return f"{inputs} and {self.output_tokens:,} output tokens ({self.output_from})"


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: str
    """allowed | warned | denied"""
    budget: Budget | None = None
    spent: float = 0.0
    unconfirmed: bool = False
    """Decided while this session's spend could not be confirmed (by the budget's `on_unconfirmed`)."""
    reserved: float = 0.0
    """What the calls in flight hold of the budget."""
    worst: Worst | None = None
    """This call's reservation, when it decided (it did not fit, or its model has no price)."""
    lease: bool = False
    """Unconfirmed because a team budget's lease could not grow (the team database is not answering)."""

    @property
    def unpriced(self) -> bool:
        """Decided by the budget's `on_unpriced`."""
        return self.worst is not None and self.worst.usd is None

    @property
    def rule(self) -> str | None:
        if self.budget is None:
            return None
        return (
            RULE_PREFIX
            + self.budget.name
            + (UNCONFIRMED if self.unconfirmed else UNPRICED if self.unpriced else "")
        )

    @property
    def message(self) -> str:
        """What the agent (and its user) reads: the budget, its limit and the spend."""
        if self.budget is None:
            return ""
        b = self.budget
        if self.worst is not None:
            return self._reservation_message(b, self.worst)
        why = TEAM_CANNOT_CONFIRM if self.lease else CANNOT_CONFIRM
        if self.unconfirmed:
            known = f"{usd(self.spent)} of its {usd(b.limit_usd)} limit per {per(b)} is counted so far"
            if self.decision == "denied":
                return (f"{why} (capsem budget {b.name!r}; {known}); this call was not sent to "
                        f"the provider. Retry in a moment, or set budgets.{b.name}.on_unconfirmed: allow in "
                        "the capsem config to let calls through unchecked")  # fmt: skip
            return (f"{why} (capsem budget {b.name!r}; {known}); the call goes through "
                    f"unchecked (budgets.{b.name}.on_unconfirmed: allow)")  # fmt: skip
        used = f"{usd(self.spent)} used {when(b)} of its {usd(b.limit_usd)} limit per {per(b)}"
        if self.decision == "warned":
            share = self.spent / b.limit_usd if b.limit_usd else 1.0
            return f"capsem budget {b.name!r} is at {share:.0%}: {used}"
        renew = "start a new session" if b.scope == "session" else f"wait for the next {per(b)} (UTC)"
        return (f"capsem budget {b.name!r} is spent: {used}; this call was not sent to the provider. "
                f"Raise budgets.{b.name}.limit_usd in the capsem config, or {renew}")  # fmt: skip

    def _reservation_message(self, b: Budget, worst: Worst) -> str:
        if worst.usd is None:
            what = f"model {worst.model!r}" if worst.model else "a model capsem cannot read from the request"
            if self.decision == "denied":
                return (f"capsem budget {b.name!r} cannot count this call's cost: capsem's price table has no "
                        f"price for {what}; this call was not sent to the provider. Set "
                        f"budgets.{b.name}.on_unpriced: allow in the capsem config to let such calls through "
                        "uncounted, or narrow the budget (provider, model, host)")  # fmt: skip
            return (f"capsem budget {b.name!r} cannot count the cost of {what} (no price in capsem's price "
                    f"table): the call goes through uncounted (budgets.{b.name}.on_unpriced: allow)")  # fmt: skip
        return (f"capsem budget {b.name!r} cannot cover this call: it could cost up to {usd(worst.usd)} "
                f"({worst.tokens}), and {usd(self.spent)} is used {when(b)} and {usd(self.reserved)} held by calls "
                f"in flight, of its {usd(b.limit_usd)} limit per {per(b)}; this call was not sent to the provider. "
                "Give the call a lower output limit, wait for the calls in flight to end, or raise "
                f"budgets.{b.name}.limit_usd in the capsem config")  # fmt: skip


def per(budget: Budget) -> str:
    """What the limit is per: `session`, `day`, `month` (a team budget: its period)."""
    return budget.period if budget.scope == "team" else budget.scope


def when(budget: Budget) -> str:
    """Where the spend is counted, for messages: `today (UTC)`, `by the team this day (UTC)`..."""
    if budget.scope == "team":
        return f"by the team this {budget.period} (UTC, spent or held by its sessions)"
    return {"session": "in this session", "day": "today (UTC)", "month": "this month (UTC)"}[budget.scope]


ALLOWED = Verdict("allowed")


def decide(budgets: Iterable[Budget], provider: str, model: str | None, host: str,
           spent_of: Callable[[Budget], float], *, confirmed: bool = True,
           reserved_of: Callable[[Budget], float] | None = None, worst: Worst | None = None,
           unreachable: Callable[[Budget], bool] | None = None,
           cap_of: Callable[[Budget], float] | None = None) -> Verdict:  # fmt: skip
    """The strictest verdict of the budgets the call matches (`spent_of(budget)`: its spend so far;
    `confirmed`: whether this session's spend is known to be whole; `reserved_of(budget)`: what
    the calls in flight hold of it; `worst`: this call's reservation, None to check the spend only;
    `unreachable(budget)`: a team budget whose lease cannot grow now, so that a call beyond it
    decides by `on_unconfirmed`; `cap_of(budget)`: how far the spend may go, when less than the
    limit: a team budget's is what the team's other sessions hold plus this session's lease; the
    warning still comes at `warn_at` of the limit)."""
    verdict = ALLOWED
    for budget in budgets:
        if not matches(budget, provider, model, host):
            continue
        amount = spent_of(budget)
        held = reserved_of(budget) if reserved_of is not None else 0.0
        cap = min(cap_of(budget), budget.limit_usd) if cap_of is not None else budget.limit_usd
        over = amount >= cap or (worst is not None and worst.usd is not None
                                 and amount + held + worst.usd > cap + SLACK)  # fmt: skip
        if over and unreachable is not None and unreachable(budget):
            verdict = _unconfirmed(budget, amount, verdict, lease=True)
            if verdict.decision == "denied":
                return verdict
            continue
        if amount >= cap:
            return Verdict("denied", budget, amount)
        if worst is not None and worst.usd is None:
            if budget.on_unpriced == "deny":
                return Verdict("denied", budget, amount, reserved=held, worst=worst)
            if verdict is ALLOWED or not (verdict.unconfirmed or verdict.unpriced):
                verdict = Verdict("warned", budget, amount, reserved=held, worst=worst)
            continue
        if not confirmed:
            verdict = _unconfirmed(budget, amount, verdict)
            if verdict.decision == "denied":
                return verdict
            continue  # let through unchecked: its reservation is not checked either
        if worst is not None and worst.usd is not None and amount + held + worst.usd > cap + SLACK:
            return Verdict("denied", budget, amount, reserved=held, worst=worst)
        if budget.warn_at is not None and amount >= budget.warn_at * budget.limit_usd and verdict is ALLOWED:
            verdict = Verdict("warned", budget, amount)
    return verdict


def _unconfirmed(budget: Budget, amount: float, verdict: Verdict, *, lease: bool = False) -> Verdict:
    """A matched budget whose spend cannot be confirmed decides by its `on_unconfirmed`: refused, or
    let through unchecked (recorded `warned`, unless a stricter verdict came first)."""
    if budget.on_unconfirmed == "deny":
        return Verdict("denied", budget, amount, unconfirmed=True, lease=lease)
    if verdict is ALLOWED or not (verdict.unconfirmed or verdict.unpriced):
        return Verdict("warned", budget, amount, unconfirmed=True, lease=lease)
    return verdict


def strictest(first: str, second: str) -> str:
    """Of two decisions, the stricter (denied > warned > allowed)."""
    return min(first, second, key=_ORDER.index)


class _Model(msgspec.Struct):
    model: str | None = None


class _WsMessage(msgspec.Struct):
    type: str | None = None
    model: str | None = None
    response: _Model | None = None


_MODEL = msgspec.json.Decoder(_Model)
_WS_MESSAGE = msgspec.json.Decoder(_WsMessage)


def model_of(body: bytes | None) -> str | None:
    """The top-level `model` of a JSON request body (msgspec skips the rest at C speed), or None."""
    if not body:
        return None
    try:
        return _MODEL.decode(body).model
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def ws_request(content: bytes) -> tuple[bool, str | None]:
    """Whether a client WebSocket message asks for a response (Responses `response.create`, the
    model call of Codex's WebSocket transport), and the model it names."""
    if b"response.create" not in content:
        return False, None
    try:
        message = _WS_MESSAGE.decode(content)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False, None
    if message.type != "response.create":
        return False, None
    return True, message.model or (message.response.model if message.response else None)


WS_TURN_END = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})
"""The Responses event types that end a turn on a WebSocket (the parser's terminal events and `error`)."""


class _WsType(msgspec.Struct):
    type: Any = None


_WS_TYPE = msgspec.json.Decoder(_WsType)


def ws_turn_ended(content: bytes | str) -> bool:
    """Whether a server WebSocket message ends a Responses turn: the one definition, used by the
    budgets in mitmdump (a turn's cost is then on its way) and by `WebSocketTurns` in the recorder
    (the turn becomes a model call). msgspec reads only `type` (the rest is skipped at C speed, so
    it costs the event loop about what a byte search did); what msgspec refuses, json decides,
    as the parser's `load_json` does."""
    try:
        kind = _WS_TYPE.decode(content).type
    except (msgspec.DecodeError, msgspec.ValidationError):
        try:
            obj = json.loads(content.decode("utf-8", "replace") if isinstance(content, bytes) else content)
        except (ValueError, RecursionError):
            return False
        kind = obj.get("type") if isinstance(obj, dict) else None
    return isinstance(kind, str) and kind in WS_TURN_END


def ws_refusal(verdict: Verdict) -> bytes:
    """The answer to a denied `response.create` on a WebSocket: an `error` event with its status."""
    error = {"type": "budget_exceeded", "code": "budget_exceeded", "message": verdict.message}
    return json.dumps({"type": "error", "status": STATUS, "error": error}).encode()


def refusal(protocol: str, provider: str, verdict: Verdict) -> tuple[int, bytes, dict[str, str]]:
    """The answer to a denied call, in the error shape of its API: (status, JSON body, headers)."""
    message = verdict.message
    body: object
    if provider == "bedrock":
        body = {"message": message}
    elif protocol == "anthropic":
        body = {"type": "error", "error": {"type": "billing_error", "message": message}}
    elif protocol == "gemini":
        body = {"error": {"code": STATUS, "message": message, "status": "FAILED_PRECONDITION"}}
    elif protocol == "ollama":
        body = {"error": message}
    else:  # OpenAI Chat Completions and Responses, and everything OpenAI-compatible
        body = {"error": {"message": message, "type": "budget_exceeded", "param": None,
                          "code": "budget_exceeded"}}  # fmt: skip
    headers = {"content-type": "application/json", "x-should-retry": "false",
               "x-capsem-policy": verdict.rule or ""}  # fmt: skip
    return STATUS, json.dumps(body).encode(), headers
