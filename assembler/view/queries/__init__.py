"""What the pages show, read from main.db and a session.db into typed data.

Every function takes an open read-only connection (`capsem.store.schema.connect`, through
`assembler.sessiondb`) and returns dataclasses; nothing here knows about HTML. Item content is
read only with `SELECT content FROM item_contents WHERE hash = ?`. Costs are the stored
`estimated_cost_usd` values, never recomputed.
"""

from __future__ import annotations

from assembler.view.queries.call import (
    CallView,
    DiffLine,
    Item,
    call_view,
    item_content,
    readable,
)
from assembler.view.queries.common import (
    PAGE_SIZE,
    PARTS,
    IncompleteDatabase,
    break_sentence,
    check_session_db,
    columns,
    tables,
)
from assembler.view.queries.live import live_state
from assembler.view.queries.session import CallNode, Event, McpCall, SessionView, ToolCall, Turn, session_view
from assembler.view.queries.sessions import (
    SessionSummary,
    anomaly_counts,
    cost_by_day,
    models_by_session,
    summaries,
)

__all__ = [
    "PAGE_SIZE",
    "PARTS",
    "CallNode",
    "CallView",
    "DiffLine",
    "Event",
    "IncompleteDatabase",
    "Item",
    "McpCall",
    "SessionSummary",
    "SessionView",
    "ToolCall",
    "Turn",
    "anomaly_counts",
    "break_sentence",
    "call_view",
    "check_session_db",
    "columns",
    "cost_by_day",
    "item_content",
    "live_state",
    "models_by_session",
    "readable",
    "session_view",
    "summaries",
    "tables",
]
