"""How a finished flow's failure shows in its rows: one rule each, for every builder.

`net_events` and `model_calls` (`build.py`, from `Recorder._flow_ended`) and `mcp_calls`
(`mcp_ledger.py`) all take a row's error and decision from here; `tool_calls` their tool rules'
verdicts (`apply_tool_decisions`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from addons.messages import ToolDecision
from capsem.store.rows import Row, ToolCall


def call_error(connection_error: str | None, *, answered: bool) -> str | None:
    """The connection's error (`FlowEnded.error`) as an error of the call it carried: none once
    the answer arrived whole (a client that closes a stream once it has its answer did not fail)."""
    return None if answered else connection_error


def row_decision(flow_decision: str, failed: bool) -> str:
    """A row's `decision`: the policy's verdict (`denied`, `asked`, `warned`) stands; an allowed
    flow that failed is `error`."""
    if flow_decision != "allowed":
        return flow_decision
    return "error" if failed else "allowed"


def tool_call_decision(mcp_decision: str) -> str:
    """A model's tool call run by an MCP call: the policy's verdict on that call, else `allowed`
    (its failure is the tool's result, not a decision). When the MCP call is written after the
    tool call, the trigger `mcp_calls_tool_call_decision` (`capsem/store/session_schema.py`, a migration
    and so frozen) applies the same rule in SQL."""
    return mcp_decision if mcp_decision in ("warned", "denied") else "allowed"


def apply_tool_decisions(rows: Sequence[Row], decisions: Iterable[ToolDecision]) -> None:
    """Write the tool rules' verdicts onto the `tool_calls` rows of one answer, by `call_id`,
    before they are inserted. A verdict of the MCP call that already ran it (warned or denied,
    set by the MCP ledger) is kept: that call did run, under that verdict."""
    by_id = {d.call_id: d for d in decisions}
    if not by_id:
        return
    for row in rows:
        decided = by_id.get(row.call_id) if isinstance(row, ToolCall) else None
        if decided is not None and row.decision not in ("warned", "denied"):  # type: ignore[union-attr]
            row.decision, row.decision_rule = decided.decision, decided.rule  # type: ignore[union-attr]
            row.approval_id = decided.approval_id  # type: ignore[union-attr]
