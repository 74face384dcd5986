"""What went wrong in a session, with the stored error text: failed model calls, requests that
failed before (or without) a model call, and tool results the agent marked as errors.

The run summary, `capsem tail` and `inspect-session` show the same list. A failed model call
has both a `model_calls` row and a `net_events` row; it is listed once, as the model call.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from capsem.outcomes import FAILED_MODEL_CALL, FAILED_REQUEST, FAILED_TOOL, INTERVENED, NOT_EMULATED

Kind = Literal["model", "network", "tool"]


@dataclass(frozen=True)
class Failure:
    kind: Kind
    """`model` (a model call failed), `network` (a request or connection failed without a model
    call: DNS, refused, TLS, timeout, HTTP error of another request), `tool` (a tool result the
    agent marked as an error)."""
    row_id: int
    """The id of its row in model_calls, net_events or tool_responses."""
    where: str
    """What failed, e.g. `#4 anthropic/claude-sonnet-4-5 HTTP 529` or `CONNECT api.x.invalid:443`."""
    message: str
    """The stored error text (one line)."""


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def model_failures(conn: sqlite3.Connection) -> list[Failure]:
    """Model calls that got an HTTP error, no answer, or an error event in their stream."""
    out = []
    for r in conn.execute(
        "SELECT id, provider, model, status_code, error_type, error_message FROM model_calls "
        f"WHERE {FAILED_MODEL_CALL} ORDER BY id"
    ):
        status = f"HTTP {r['status_code']}" if r["status_code"] else "no response"
        what = ": ".join(x for x in (r["error_type"], _one_line(r["error_message"])) if x)
        out.append(Failure("model", r["id"], f"#{r['id']} {r['provider']}/{r['model'] or '?'} {status}",
                           what or "(no error text recorded)"))  # fmt: skip
    return out


def network_failures(conn: sqlite3.Connection, where: str = FAILED_REQUEST) -> list[Failure]:
    """Requests and connections that failed (`decision='error'`, or an HTTP error from upstream) and
    are not a model call (`where`: another condition on `net_events n`)."""
    out = []
    for r in conn.execute(
        "SELECT n.id, n.method, n.domain, n.port, n.path, n.status_code, n.error, n.response_body_preview "
        "FROM net_events n "
        f"WHERE {where} ORDER BY n.id"
    ):
        target = f"{r['domain']}:{r['port']}" + ("" if r["method"] == "CONNECT" else r["path"] or "")
        status = f" HTTP {r['status_code']}" if r["status_code"] else ""
        out.append(Failure("network", r["id"], f"{r['method']} {target}{status}",
                           _one_line(r["error"]) or _said(r["response_body_preview"]) or
                           "(no error text recorded)"))  # fmt: skip
    return out


def not_emulated(conn: sqlite3.Connection) -> list[Failure]:
    """Requests capsem's provider emulator answered with "not emulated" (a host it does not play, under
    `capsem run --emulator` or a replay of such a run): listed apart, never counted as errors."""
    return network_failures(conn, NOT_EMULATED)


def tool_failures(conn: sqlite3.Connection) -> list[Failure]:
    """Tool results the agent sent back marked as errors."""
    return [
        Failure(
            "tool", r["id"], f"tool {r['tool_name'] or '?'} ({r['call_id']})", _one_line(r["content_preview"])
        )
        for r in conn.execute(
            f"SELECT id, tool_name, call_id, content_preview FROM tool_responses WHERE {FAILED_TOOL} ORDER BY id"
        )
    ]


def failures(conn: sqlite3.Connection) -> list[Failure]:
    """Every failure of a session: model calls, then other requests, then tool results."""
    return model_failures(conn) + network_failures(conn) + tool_failures(conn)


@dataclass(frozen=True)
class Intervention:
    """A request capsem denied, warned or asked about, or a credential placeholder it refused."""

    kind: str
    """`denied`, `warned`, `asked` (a request, or a tool call a tool rule decided; `approved` too for
    a tool call), `refused` (a placeholder)."""
    row_id: int
    """The id of its row in net_events, tool_calls or substitution_events."""
    where: str
    """`POST api.anthropic.com/v1/messages`; for a placeholder, where it was and the host."""
    rule: str
    """What decided it: `budget daily`, `policy rule no-paste`, `credential anthropic`."""
    reason: str
    """Why, in capsem's words (one line)."""

    @property
    def why(self) -> str:
        """The reason, after the rule unless the reason names it already."""
        name = self.rule.rsplit(" ", 1)[-1]
        named = f"'{name}'" in self.reason or f"{name} budget" in self.reason
        return self.reason if named else f"{self.rule}: {self.reason}"


def _rule(matched: str | None) -> str:
    parts = []
    for rule in (matched or "").split(", "):
        if rule.startswith("budget:"):
            parts.append(f"budget {rule[len('budget:') :]}")
        elif rule:
            parts.append(f"policy rule {rule}")
    return ", ".join(parts) or "policy"


def _said(preview: str | None) -> str | None:
    """The message of capsem's own refusal body (any provider's error shape), if there is one."""
    import json

    try:
        body = json.loads(preview or "")
    except ValueError:
        return None
    for path in (("error", "message"), ("message",), ("error",)):
        value = body
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and value:
            return _one_line(value)
    return None


def _budget_reason(matched: str | None) -> str | None:
    """`budget daily: limit $20 a day reached` from the settings as they are now (the refusal's own
    words are not stored), or None when no budget decided or it is gone from the settings."""
    names = [r[len("budget:") :] for r in (matched or "").split(", ") if r.startswith("budget:")]
    if not names:
        return None
    try:
        from capsem.settings import load

        budgets = {b.name: b for b in load().budgets.entries}
    except Exception:  # a settings problem is reported elsewhere; the page still shows the rule
        return None
    said = []
    for name in names:
        if (b := budgets.get(name)) is not None:
            scope = {"session": "this session", "day": "a UTC day", "month": "a UTC month"}.get(
                b.scope, b.scope
            )
            limit = format(Decimal(repr(float(b.limit_usd))), "f")  # $0.000001, never $1e-06
            said.append(
                f"the {name} budget of ${limit} for {scope} could not cover it (spent, or no room for its reservation)"
            )
    return "; ".join(said) or None


def interventions(conn: sqlite3.Connection) -> list[Intervention]:
    """Every place capsem stepped in: requests denied, warned, asked, then placeholders refused."""
    marks = ", ".join(f"'{d}'" for d in INTERVENED)
    answers = approval_answers(conn)
    out = []
    for r in conn.execute(
        "SELECT id, decision, method, domain, port, path, status_code, matched_rule, error, response_body_preview "
        f"FROM net_events WHERE decision IN ({marks}) ORDER BY id"
    ):
        rule = _rule(r["matched_rule"])
        reason = answers.get(r["id"]) if r["decision"] == "asked" else None
        reason = reason or (
            _said(r["response_body_preview"]) or _budget_reason(r["matched_rule"]) or _one_line(r["error"])
        )
        if not reason:
            reason = {"denied": f"answered HTTP {r['status_code']} by capsem" if r["status_code"] else "blocked",
                      "warned": "allowed, with a warning", "asked": "held for approval"}.get(r["decision"], "")  # fmt: skip
        path = (r["path"] or "").split("?", 1)[0]
        out.append(Intervention(r["decision"], r["id"], f"{r['method']} {r['domain']}{path}", rule, reason))
    try:
        refused = conn.execute(
            "SELECT id, credential, host, location, reason FROM substitution_events WHERE outcome = 'refused' "
            "ORDER BY id"
        ).fetchall()
    except sqlite3.OperationalError:  # a session.db older than brokered credentials
        refused = []
    for r in refused:
        out.append(Intervention("refused", r["id"], f"placeholder in {r['location']} to {r['host']}",
                                f"credential {r['credential']}", _one_line(r["reason"])))  # fmt: skip
    return out + tool_interventions(conn)


TOOL_REASONS = {
    "denied": "not run (the agent was told the rule stopped it)",
    "asked": "held for approval; no answer came (not run)",
    "approved": "held for approval, then approved",
    "warned": "let through, with a warning",
}


def tool_interventions(conn: sqlite3.Connection) -> list[Intervention]:
    """The tool calls of the models' answers a tool rule denied, asked about (approved or not) or
    warned about (`tool_calls.decision` with its `decision_rule`, m018)."""
    from assembler.tool_decision import columns

    try:
        found = conn.execute(
            f"SELECT tc.id, tc.model_call_id, tc.tool_name, tc.arguments, {columns(conn)} FROM tool_calls tc "
            "WHERE tc.decision IN ('denied', 'asked', 'approved', 'warned') AND NOT EXISTS (SELECT 1 FROM mcp_calls m "
            "WHERE m.id = tc.mcp_call_id AND m.decision = tc.decision) ORDER BY tc.id"  # the MCP call's: shown as a request
        ).fetchall()
    except sqlite3.OperationalError:
        return []
    return [
        Intervention(r["decision"], r["id"], f"tool {r['tool_name']} {_one_line(r['arguments'])[:80]} "
                     f"(model call #{r['model_call_id']})", f"tool rule {r['decision_rule'] or '?'}",
                     TOOL_REASONS[r["decision"]])
        for r in found
    ]  # fmt: skip


def approval_answers(conn: sqlite3.Connection) -> dict[int, str]:
    """net_events id -> what became of a request an `ask` rule held (`denied by view after 4.2 s`)."""
    try:
        found = conn.execute(
            "SELECT net_event_id, decision, decided_by, waited_ms, reason FROM approvals"
        ).fetchall()
    except sqlite3.OperationalError:  # a session.db older than `ask`
        return {}
    out = {}
    for net_id, decision, by, waited_ms, reason in found:
        answer = "timed out" if decision == "timed_out" else f"{decision} by {by}"
        out[net_id] = f"held for approval: {answer} after {waited_ms / 1000:.1f} s" + (
            f" ({reason})" if reason else ""
        )
    return out


def intervention_counts(items: list[Intervention]) -> dict[str, int]:
    """{kind: n} in a fixed order, kinds with none left out."""
    counts = {
        k: sum(i.kind == k for i in items) for k in ("denied", "warned", "asked", "approved", "refused")
    }
    return {k: n for k, n in counts.items() if n}
