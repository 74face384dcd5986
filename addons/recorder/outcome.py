"""How a finished flow's failure shows in its rows: one rule each, for every builder.

`net_events` and `model_calls` (`build.py`, from `Recorder._flow_ended`) and `mcp_calls`
(`mcp_ledger.py`) all take a row's error and decision from here.
"""

from __future__ import annotations


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
