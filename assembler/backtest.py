"""`capsem policy test`: what a policy and its budgets would have done to recorded traffic (pure).

Recorded requests in, findings out. Each request is decided by `Policy.decide_request`, the code
the proxy runs (`addons/proxy/policy_gate.py`), on the same canonical request
(`addons/canonical.py`, from the recorded path as sent, its host and its Host header): host, port,
path, method and, for an MCP request,
each of its `tools/call`s (the names its server went by, the tool, the arguments). Each model
call is decided by `addons.budgets.decide`, the code the guardrails run, over the spend of the
calls before it that would still have been made (in start order, across the sessions tested: a
day or month budget counts every session of its day or month, a call the policy or a budget
would have refused spends nothing). As live, a call is refused when the spend before it plus its
own reservation passes a limit: its most expensive outcome, bounded from its stored request by
the code the proxy runs (`addons/reservation.py`) and priced by `pricing/worst.py`, or its
recorded cost when its request body was not stored; calls replayed one after the other hold no
reservation of each other (each is settled at its real cost before the next). A model with no
price decides by the budget's `on_unpriced`. Each tool call the model asked for (a `tool_calls`
row) is decided by `Policy.decide_tool`, the code the proxy runs on each answer, on its name, its
arguments as stored (`tool_arguments`), the session's agent (`agent_name` of its command) and the
process that made the call. Decisions are kept as the policy returns them (`denied`, `warned`,
`asked`...): a finding is any decision but `allowed`. Every rule that decided nothing (no request,
MCP call or tool call it was the first to match, an `allow` included) is reported as unmatched:
a rule that can never match is a mistake a person should hear about.

Reading the sessions is `assembler/backtest_source.py`; printing is `assembler/backtest_cli.py`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from addons.budgets import Worst, decide, matches
from addons.canonical import CanonicalRequest
from addons.proxy.policy import McpTarget, Policy, ToolTarget
from addons.reservation import Bound, worst_of
from capsem.settings import Budget

ALLOWED = "allowed"


@dataclass(frozen=True, slots=True)
class McpCall:
    """A recorded MCP `tools/call`."""

    id: int
    servers: tuple[str, ...]
    """The names its server went by when it was made: endpoint, initialize name."""
    tool: str
    arguments: Mapping[str, Any] | None
    """Its arguments (scrubbed as stored; may be read only when a rule asks for them)."""


@dataclass(frozen=True, slots=True)
class Request:
    """A recorded request (a `net_events` row) and the MCP tools/calls it carried."""

    id: int
    timestamp: str
    host: str
    port: int
    path: str
    method: str
    process: str | None
    pid: int | None
    live: str
    """The decision recorded when it was made."""
    calls: tuple[McpCall, ...] = ()
    names: tuple[str, ...] = ()
    """The other names it carried, as recorded (its Host header)."""

    def canonical(self) -> CanonicalRequest:
        """What the policy decides on, computed as the proxy computes it."""
        return CanonicalRequest.of(self.method, self.port, self.path, (self.host, *self.names))


@dataclass(frozen=True, slots=True)
class ModelCall:
    """A recorded model call (a `model_calls` row): what a budget counts."""

    id: int
    net_id: int | None
    timestamp: str
    provider: str
    model: str | None
    host: str
    cost: float
    tokens: Bound | None = None
    """The most its stored request could use (None: no body stored)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A recorded tool call of a model's answer (a `tool_calls` row)."""

    id: int
    model_call_id: int
    timestamp: str
    call_id: str
    name: str
    arguments: Mapping[str, Any] | None
    """Its arguments as stored (`tool_arguments`: a free-form input as `{"input": text}`)."""
    agent: str | None
    """The session's agent (`agent_name` of its command in main.db)."""
    process: str | None
    live: str
    """The decision recorded when it was made (`allowed` when no tool rule was in force)."""
    live_rule: str | None = None


Pricer = tuple[Callable[[str, str | None], Any], Callable[[Any, int, int], float]]
"""`pricing.worst`'s `rates` and `worst_cost`: the budgets' prices."""


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    requests: tuple[Request, ...] = ()
    model_calls: tuple[ModelCall, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    tool_names: Mapping[str, int] = field(default_factory=dict)
    """How often the model called each tool (read when a rule names an MCP tool: the hint of
    `Report.hints`)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """A request the policy would not simply have allowed."""

    session: str
    rule: str
    decision: str
    request: Request
    call: McpCall | None
    """The tools/call that decided (the strictest of the request's calls), if any."""


@dataclass(frozen=True, slots=True)
class ToolFinding:
    """A tool call of a model's answer the tool rules would not simply have let through."""

    session: str
    rule: str
    decision: str
    call: ToolCall


@dataclass(slots=True)
class Refusal:
    """A model call a budget would have refused."""

    session: str
    call: ModelCall
    spent: float
    """The budget's spend when the call came."""


@dataclass(slots=True)
class BudgetOutcome:
    budget: Budget
    refused: list[Refusal] = field(default_factory=list)
    warned: int = 0
    first_warned: Refusal | None = None

    @property
    def saved(self) -> float:
        """The spend of the calls it would have refused (never sent, never billed)."""
        return sum(r.call.cost for r in self.refused)


@dataclass(slots=True)
class Report:
    sessions: list[str] = field(default_factory=list)
    requests: int = 0
    mcp_calls: int = 0
    model_calls: int = 0
    findings: list[Finding] = field(default_factory=list)
    budgets: list[BudgetOutcome] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)
    """Sessions that could not be read (damaged, or culled meanwhile) -> why."""
    arguments: dict[tuple[str, int], str] = field(default_factory=dict)
    """(session, MCP call id) -> the arguments of a finding's call as stored (JSON text), for showing."""
    tool_calls: int = 0
    tool_findings: list[ToolFinding] = field(default_factory=list)
    decided: Counter[str] = field(default_factory=Counter)
    """Rule name -> how many requests, MCP calls and tool calls it decided (allowed ones too)."""
    tool_names: Counter[str] = field(default_factory=Counter)
    """Tool name -> how often the model called it (when a rule names an MCP tool)."""
    unmatched: list[Unmatched] = field(default_factory=list)
    """The rules that decided nothing (set by `Backtest.report`)."""

    def decisions(self) -> set[str]:
        """Every decision other than `allowed` that a rule or budget would have taken."""
        found = {f.decision for f in self.findings} | {f.decision for f in self.tool_findings}
        found |= {"denied" for b in self.budgets if b.refused} | {"warned" for b in self.budgets if b.warned}
        return found


@dataclass(frozen=True, slots=True)
class Unmatched:
    """A rule that decided nothing in the sessions tested."""

    rule: str
    action: str
    kind: str
    """`request`, `mcp` (names an MCP field) or `tool` (a tool rule)."""
    hint: str | None = None
    """Why, when it can be told (an MCP rule on a tool the agent runs itself)."""


def _period(budget: Budget, session: str, day: str) -> str:
    return session if budget.scope == "session" else day if budget.scope == "day" else day[:7]


class Backtest:
    """Sessions go in one by one (`add`); `report()` decides the budgets over all of them."""

    def __init__(self, policy: Policy, budgets: Iterable[Budget] = (), pricer: Pricer | None = None) -> None:
        self.policy = policy
        self.budgets = tuple(budgets)
        self.pricer = pricer
        """None: the budgets decide on the spend only, as before reservations (no price table)."""
        self._report = Report(budgets=[BudgetOutcome(b) for b in self.budgets])
        self._calls: list[tuple[str, str, ModelCall]] = []  # (timestamp, session, call) still sent

    @property
    def findings(self) -> list[Finding]:
        """The findings so far (in the order of the sessions added)."""
        return self._report.findings

    @property
    def arguments(self) -> dict[tuple[str, int], str]:
        return self._report.arguments

    def unreadable(self, session_id: str, reason: str) -> None:
        """A session that could not be read: reported, the others still tested."""
        self._report.unreadable[session_id] = reason

    @property
    def tool_findings(self) -> list[ToolFinding]:
        return self._report.tool_findings

    def add(self, session: Session) -> None:
        report = self._report
        report.sessions.append(session.id)
        report.requests += len(session.requests)
        refused: set[int] = set()
        for request in session.requests:
            report.mcp_calls += len(request.calls)
            finding = self.decide(session.id, request) if self.policy.rules else None
            if finding is None:
                continue
            report.findings.append(finding)
            if finding.decision == "denied":
                refused.add(request.id)
        report.tool_calls += len(session.tool_calls)
        for call in session.tool_calls:
            found = self.decide_tool(session.id, call)
            if found is not None:
                report.tool_findings.append(found)
        report.tool_names.update(session.tool_names)
        report.model_calls += len(session.model_calls)
        if self.budgets:
            self._calls += [
                (c.timestamp, session.id, c) for c in session.model_calls if c.net_id not in refused
            ]

    def decide(self, session: str, request: Request) -> Finding | None:
        """The policy's finding on one request (None: allowed)."""
        targets = [McpTarget(c.servers, c.tool, c.arguments) for c in request.calls]
        canonical = request.canonical()
        verdict = self.policy.decide_request(canonical, targets)
        each = [self.policy.decide(canonical, target) for target in targets]
        self._report.decided.update({v.rule for v in [verdict, *each] if v.rule is not None})
        if verdict.decision == ALLOWED or verdict.rule is None:
            return None
        deciding = next((c for c, v in zip(request.calls, each, strict=True) if v == verdict), None)
        return Finding(session, verdict.rule, verdict.decision, request, deciding)

    def decide_tool(self, session: str, call: ToolCall) -> ToolFinding | None:
        """The tool rules' finding on one recorded tool call (None: allowed)."""
        verdict = self.policy.decide_tool(ToolTarget(call.name, call.arguments, call.agent, call.process))
        if verdict.rule is not None:
            self._report.decided[verdict.rule] += 1
        if verdict.decision == ALLOWED or verdict.rule is None:
            return None
        return ToolFinding(session, verdict.rule, verdict.decision, call)

    def unmatched(self) -> list[Unmatched]:
        """The rules that decided nothing in the sessions tested, in the policy's order."""
        return [
            Unmatched(r.name, r.action, "tool" if r.is_tool_rule else "mcp" if r.needs_mcp else "request",
                      self._hint(r.mcp_tool) if r.mcp_tool and not r.is_tool_rule else None)
            for r in self.policy.rules
            if self._report.decided[r.name] == 0
        ]  # fmt: skip

    def _hint(self, mcp_tool: str) -> str | None:
        """A rule on an MCP tool named like a tool the model calls itself (`mcp_tool: Bash`): the
        agent runs that tool, no MCP server does; a tool rule sees it."""
        from fnmatch import fnmatchcase

        names = sorted(n for n in self._report.tool_names if fnmatchcase(n.lower(), mcp_tool.lower()))
        if not names:
            return None
        times = sum(self._report.tool_names[n] for n in names)
        calls = f"{times:,} call{'s' if times != 1 else ''}"
        return (f"{', '.join(names)} is a tool the agent runs itself ({calls} in answers), not an MCP "
                f"tool: use `tool: {mcp_tool}`")  # fmt: skip

    def report(self) -> Report:
        """The report: the policy's findings, and each budget's refusals in start order."""
        if self.budgets:
            self._budgets()
        self._report.unmatched = self.unmatched()
        return self._report

    def _budgets(self) -> None:
        spend: dict[tuple[str, str], float] = {}  # (budget, session / day / month) -> spend
        outcomes = {o.budget.name: o for o in self._report.budgets}
        for timestamp, session, call in sorted(self._calls, key=lambda c: (c[0], c[1], c[2].id)):
            day = timestamp[:10]

            def spent_of(budget: Budget, session: str = session, day: str = day) -> float:
                return spend.get((budget.name, _period(budget, session, day)), 0.0)

            verdict = decide(
                self.budgets, call.provider, call.model, call.host, spent_of, worst=self._worst(call)
            )
            if verdict.budget is not None:
                outcome = outcomes[verdict.budget.name]
                seen = Refusal(session, call, verdict.spent)
                if verdict.decision == "denied":
                    outcome.refused.append(seen)
                    continue  # never sent: it spends nothing
                outcome.warned += 1
                outcome.first_warned = outcome.first_warned or seen
            for budget in self.budgets:
                if matches(budget, call.provider, call.model, call.host):
                    key = (budget.name, _period(budget, session, day))
                    spend[key] = spend.get(key, 0.0) + call.cost

    def _worst(self, call: ModelCall) -> Worst | None:
        """The call's reservation, as the proxy would have made it (None: no budget matches)."""
        matched = [b for b in self.budgets if matches(b, call.provider, call.model, call.host)]
        if self.pricer is None or not matched:
            return None
        rates, price = self.pricer
        found = rates(call.provider, call.model)
        if call.tokens is None:
            return Worst(call.cost if found is not None else None, call.model)
        return worst_of(matched, call.tokens, call.model, found, price)


def evaluate(policy: Policy, budgets: Iterable[Budget], sessions: Iterable[Session],
             pricer: Pricer | None = None) -> Report:  # fmt: skip
    """What `policy` and `budgets` would have done to `sessions` had they been in force."""
    backtest = Backtest(policy, budgets, pricer)
    for session in sessions:
        backtest.add(session)
    return backtest.report()
