"""How a tool rule's verdict on a tool call is read and said, for every place that shows one:
`inspect-session`, the run summary, `show-call`, the session and call pages.

`tool_calls.decision` is `allowed` when nothing decided (m005's default, as Capsem writes it);
`decision_rule` (m018) names the rule that decided. A call that was `denied`, or `asked` and never
answered, never reached the agent: it was not run, and no result is shown for it (one recorded
anyway is a warning of `inspect-session`). Sessions recorded before m018 have no `decision_rule`:
`columns` reads NULL for it there.
"""

from __future__ import annotations

import sqlite3

NOT_RUN = ("denied", "asked")
"""Verdicts under which the agent never got the call."""
PHRASES = {
    "denied": "denied by {rule}: not run",
    "asked": "asked by {rule}: no answer, not run",
    "approved": "approved (asked by {rule})",
    "warned": "warned by {rule}",
    "allowed": "allowed by {rule}",
}


def columns(conn: sqlite3.Connection, alias: str = "tc") -> str:
    """The SELECT list of a tool call's verdict: `decision, decision_rule, approval_id` (NULL for a
    column an older session.db lacks)."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(tool_calls)")}
    return ", ".join(
        f"{alias}.{c} AS {c}" if c in have else f"NULL AS {c}"
        for c in ("decision", "decision_rule", "approval_id")
    )


def said(decision: str | None, rule: str | None) -> str | None:
    """The verdict in words (`denied by no-rm-rf: not run`); None when nothing decided."""
    if decision in (None, "allowed") and rule is None:
        return None
    return PHRASES.get(decision or "", (decision or "") + " by {rule}").format(rule=rule or "a rule")


def not_run(decision: str | None) -> bool:
    return decision in NOT_RUN
