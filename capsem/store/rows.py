"""The rows capsem writes to session.db, one dataclass per table, ids minted before the write.

The record builders (`addons/recorder/build.py`, `addons/recorder/mcp_ledger.py`) return these; the writer
(`capsem/store/writer.py`) inserts them, scrubbing every string. Every row carries an `event_id`
(12 lowercase hex, like Capsem's) and the tables other rows point at get their integer `id`
from `IdMinter`, so every link (a tool call to its model call, a model call to its flow, an
MCP call to the tool call it ran) is known when the row is built: rows are only ever
inserted, never updated afterwards.

Field names are column names (tests check them against the schema); `None` is NULL.

Over 400 lines on purpose: one dataclass per table and a field per column, the schema's mirror;
split, the rows of one write would be looked for in several places.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar


def new_event_id() -> str:
    """12 lowercase hex characters (48 random bits), Capsem's `event_id` format."""
    return secrets.token_hex(6)


class IdMinter:
    """Integer primary keys for the tables that other rows point at.

    Only one process writes these tables (the recorder), so counting up from the largest id
    already stored is safe.
    """

    def __init__(self, start: dict[str, int] | None = None) -> None:
        self._last = dict(start or {})

    def next(self, table: str) -> int:
        value = self._last.get(table, 0) + 1
        self._last[table] = value
        return value


@dataclass(slots=True)
class NetEvent:
    TABLE: ClassVar[str] = "net_events"
    id: int
    event_id: str
    timestamp: str
    domain: str
    port: int
    decision: str
    method: str
    path: str
    flow_id: str
    http_version: str
    conn_type: str
    process_name: str | None = None
    pid: int | None = None
    query: str | None = None
    status_code: int | None = None
    bytes_sent: int = 0
    bytes_received: int = 0
    duration_ms: int = 0
    matched_rule: str | None = None
    request_headers: str | None = None
    response_headers: str | None = None
    request_body_preview: str | None = None
    response_body_preview: str | None = None
    error: str | None = None
    client_addr: str | None = None
    ttfb_ms: int | None = None
    request_content_type: str | None = None
    response_content_type: str | None = None
    request_content_encoding: str | None = None
    response_content_encoding: str | None = None
    decode_error: str | None = None
    streamed: int = 0
    provider: str | None = None
    trace_id: str | None = None
    canonical_path: str | None = None


@dataclass(slots=True)
class ModelCall:
    TABLE: ClassVar[str] = "model_calls"
    id: int
    event_id: str
    timestamp: str
    provider: str
    method: str
    path: str
    flow_id: str
    protocol: str
    host: str
    model: str | None = None
    process_name: str | None = None
    pid: int | None = None
    stream: int = 0
    system_prompt_preview: str | None = None
    messages_count: int = 0
    tools_count: int = 0
    request_bytes: int = 0
    request_body_preview: str | None = None
    message_id: str | None = None
    status_code: int | None = None
    text_content: str | None = None
    thinking_content: str | None = None
    stop_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    duration_ms: int = 0
    response_bytes: int = 0
    estimated_cost_usd: float | None = None
    trace_id: str | None = None
    usage_details: str | None = None
    net_event_id: int | None = None
    response_model: str | None = None
    ttft_ms: int | None = None
    complete: int = 0
    error_type: str | None = None
    error_message: str | None = None
    price_source: str | None = None
    cost_details: str | None = None
    parse_errors: int = 0
    system_hash: str | None = None
    """`item_contents.hash` of the call's exact system instructions."""
    tools_hash: str | None = None
    """One hash of all its tool definitions (equal between calls: the same tool surface)."""
    items_count: int | None = None
    """Input items the request carried (system, tool definitions, messages)."""
    items_new: int | None = None
    """How many of them are new since the previous call of its conversation."""
    turn_id: str | None = None
    """The turn: one user-visible input and every call and tool result needed to answer it."""
    parent_tool_call_id: int | None = None
    """For a subagent's calls: the parent's tool call (Task/Agent) that started the subagent."""


@dataclass(slots=True)
class ToolCall:
    TABLE: ClassVar[str] = "tool_calls"
    id: int
    event_id: str
    model_call_id: int
    call_index: int
    call_id: str
    tool_name: str
    arguments: str | None
    origin: str
    timestamp: str
    trace_id: str | None
    complete: int = 1
    mcp_call_id: int | None = None
    provider: str | None = None
    transport: str = "unknown"
    """`sse` (a streamed response), `websocket` or `http` (Capsem's words; m005 says more)."""
    status: str = "observed"
    """`observed`; a trigger sets `responded` or `error` when its result is recorded."""
    decision: str = "allowed"
    """The policy's verdict on it: a tool rule's (`allowed`, `warned`, `denied`, `asked`,
    `approved`) or the MCP call's that ran it (`warned`, `denied`); `allowed` when none decided."""
    server_name: str | None = None
    """The MCP server that ran it. (`duration_ms` is only ever set by a trigger.)"""
    decision_rule: str | None = None
    """The rule that decided (m018)."""
    approval_id: str | None = None
    """The person's answer to an `ask` (`approvals.approval_id`)."""


@dataclass(slots=True)
class ToolResponse:
    TABLE: ClassVar[str] = "tool_responses"
    id: int
    event_id: str
    model_call_id: int
    call_id: str
    content_preview: str | None
    is_error: int
    timestamp: str
    trace_id: str | None
    tool_name: str | None
    content_bytes: int


@dataclass(slots=True)
class McpCall:
    TABLE: ClassVar[str] = "mcp_calls"
    id: int
    event_id: str
    timestamp: str
    server_name: str
    method: str
    decision: str
    endpoint: str
    flow_id: str
    tool_name: str | None = None
    request_id: str | None = None
    request_preview: str | None = None
    response_preview: str | None = None
    duration_ms: int = 0
    error_message: str | None = None
    process_name: str | None = None
    pid: int | None = None
    bytes_sent: int = 0
    bytes_received: int = 0
    net_event_id: int | None = None
    matched_rule: str | None = None
    is_error: int | None = None
    status_code: int | None = None
    mcp_session: str | None = None
    protocol_version: str | None = None
    response_framing: str | None = None
    tool_call_id: int | None = None
    """The model's tool call this MCP call ran, when that tool call was recorded first (a
    trigger then fills `tool_calls.mcp_call_id`, the seed's column, in the same insert)."""


@dataclass(slots=True)
class FsEvent:
    TABLE: ClassVar[str] = "fs_events"
    event_id: str
    timestamp: str
    action: str
    path: str
    size: int | None


@dataclass(slots=True)
class SubstitutionEvent:
    TABLE: ClassVar[str] = "substitution_events"
    event_id: str
    timestamp: str
    credential: str
    host: str
    location: str
    outcome: str
    port: int | None = None
    reason: str | None = None
    flow_id: str | None = None
    net_event_id: int | None = None
    process_name: str | None = None
    pid: int | None = None


@dataclass(slots=True)
class ApprovalRow:
    """A request an `ask` rule held, and the answer (`addons/proxy/approvals.py`)."""

    TABLE: ClassVar[str] = "approvals"
    event_id: str
    approval_id: str
    rule: str
    asked_at: str
    decided_at: str
    waited_ms: int
    decision: str
    decided_by: str
    net_event_id: int | None = None
    flow_id: str | None = None
    reason: str | None = None
    always: int = 0
    method: str | None = None
    host: str | None = None
    path: str | None = None
    mcp_server: str | None = None
    tool: str | None = None
    arguments: str | None = None
    process_name: str | None = None
    pid: int | None = None


@dataclass(slots=True)
class BodyChunk:
    """One piece of one or more bodies, stored once per session (see addons/recorder/bodies.py)."""

    TABLE: ClassVar[str] = "body_chunks"
    hash: bytes
    """The first 16 bytes of the SHA-256 of the piece as it crossed the proxy (decoded)."""
    size: int
    """Bytes of the piece as stored (after scrubbing)."""
    frame: int
    """The `content_frames` row that holds it."""
    start: int
    """Where it starts in its frame (decompressed)."""


@dataclass(slots=True)
class ContentFrame:
    """What one call added to the session (new items, new body pieces), zstd-compressed together."""

    TABLE: ClassVar[str] = "content_frames"
    id: int
    size: int
    """Bytes before compression."""
    data: bytes


@dataclass(slots=True)
class BodyBlob:
    """A whole decoded body of a model or MCP call: the list of its pieces."""

    TABLE: ClassVar[str] = "event_body_blobs"
    id: int
    event_id: str
    owner_event_id: str
    """`event_id` of the row the body belongs to."""
    source_table: str
    row_id: int | None
    """`id` of that row in `source_table`."""
    direction: str
    """`request` or `response`."""
    size: int
    """Bytes of the decoded body as it crossed the proxy (as far as it was kept)."""
    sha256: str
    """SHA-256 of those bytes (before scrubbing)."""
    truncated: int
    content_type: str | None
    chunks: bytes
    """The 16-byte keys of the pieces this row lists itself, in order."""
    runs: str
    """The whole list of piece keys, as JSON: an integer n takes the next n keys of `chunks`,
    `[base_id, start, count]` takes keys start..start+count of the list of body `base_id`."""


@dataclass(slots=True)
class ItemContent:
    """The content of a conversation item, stored once per session (see addons/items.py)."""

    TABLE: ClassVar[str] = "item_data"
    hash: str
    kind: str
    size: int
    """Bytes of the normalized JSON as stored (after scrubbing); read it from the `item_contents` view."""
    frame: int
    start: int


@dataclass(slots=True)
class ModelItem:
    """An item of a model call: an input item new in it, or an output item."""

    TABLE: ClassVar[str] = "model_items"
    event_id: str
    model_call_id: int
    timestamp: str
    provider: str
    model: str | None
    path: str
    trace_id: str | None
    turn_id: str | None
    kind: str
    direction: str
    """`input` (what the call was given) or `output` (what it gave back)."""
    item_index: int
    """Position among the call's input items, or among its output items."""
    role: str | None
    call_id: str | None
    tool_name: str | None
    content_hash: str
    new: int
    """1: not in the previous call of the conversation (always 1 for outputs)."""


@dataclass(slots=True)
class ItemList:
    """A call's whole list of input items: the first `shared` items of `base_call_id`'s list, then `hashes`."""

    TABLE: ClassVar[str] = "model_item_lists"
    model_call_id: int
    base_call_id: int | None
    shared: int
    hashes: bytes
    """16-byte item hashes, in order."""


@dataclass(slots=True)
class InputPart:
    """One source of a call's input tokens (see addons/recorder/breakdown.py): estimated, scaled to the total."""

    TABLE: ClassVar[str] = "input_breakdown"
    event_id: str
    model_call_id: int
    part: str
    tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float | None
    estimated: int = 1


@dataclass(slots=True)
class CacheBreakRow:
    """A call that read less from the prompt cache than its conversation had cached (capsem/cache_breaks.py)."""

    TABLE: ClassVar[str] = "cache_breaks"
    event_id: str
    model_call_id: int
    earlier_call_id: int
    """The earlier call of the conversation it is compared with."""
    cached_tokens: int
    """What the earlier call left cached (it read plus it wrote)."""
    read_tokens: int
    cause: str
    """`changed`, `expired`, `model` or `unknown`."""
    item_index: int | None
    item: str | None
    """With `changed`: the first item that differs inside the cached prefix (`tool definition Bash`)."""
    before: str | None
    after: str | None
    extra_cost_usd: float | None
    """What the call paid over reading the lost prefix from the cache (None: unpriced)."""


@dataclass(slots=True)
class ResponseChunksRow:
    """How a streamed answer arrived: each chunk's end in the stored (decoded) response body and
    when it arrived, in ms after the request was sent, as a JSON list of [end, ms] (`capsem replay
    --speed`). Offsets and times only: nothing of the body."""

    TABLE: ClassVar[str] = "response_chunks"
    model_call_id: int
    chunks: str


@dataclass(slots=True)
class CompactionRow:
    """A call whose history is much shorter than its predecessor's: the agent summarized it."""

    TABLE: ClassVar[str] = "compactions"
    event_id: str
    model_call_id: int
    earlier_call_id: int
    tokens_before: int
    tokens_after: int


Row = (
    NetEvent
    | ModelCall
    | ToolCall
    | ToolResponse
    | McpCall
    | FsEvent
    | BodyChunk
    | ContentFrame
    | BodyBlob
    | ItemContent
    | ModelItem
    | ItemList
    | InputPart
    | SubstitutionEvent
    | CacheBreakRow
    | CompactionRow
    | ResponseChunksRow
)
LINKED_TABLES = (
    "net_events",
    "model_calls",
    "tool_calls",
    "tool_responses",
    "mcp_calls",
    "event_body_blobs",
    "content_frames",
)
"""Tables whose ids are minted by `IdMinter` (the others get SQLite's own)."""


def table_counts(rows: Iterable[Row]) -> dict[str, int]:
    """How many rows per table (for logs and tests)."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.TABLE] = counts.get(row.TABLE, 0) + 1
    return counts
