"""What the hooks hand to the recorder: typed, frozen messages.

Hooks run on mitmproxy's event loop. Each copies what it needs out of a flow into one of these
messages, puts it on the hand-over (`addons/proxy/handover.py`) and never touches it again. The
recorder (`addons/recorder/recorder.py`), in its own process, reads them in order and turns them into
rows. Every decision that depends on the live flow is taken in the hook and travels in the
message (the route, the framing of a streamed body, the policy verdict); the recorder never
decides them again.

A flow produces, in order: at most one `StreamOpened` (its response body is streamed and read
chunk by chunk) and its chunks (`Chunks`: a model call's chunks of one batch, packed by the
outbox; `Chunk`: one chunk of an MCP event stream), or a `WsOpened` (a WebSocket after a 101) and its
`WsMessage`s; then exactly one `FlowEnded`, which names the local process that opened the
client connection (looked up by the hook side when the client connected). `Barrier` and `Stop`
are control messages.

They are msgspec Structs: immutable, typed, and encoded to msgpack in well under a
microsecond each, which matters for the per-chunk messages.
"""

from __future__ import annotations

from typing import Union

import msgspec

__all__ = [
    "ABNORMAL_CLOSURE",
    "CUT_MARGIN",
    "Approval",
    "Barrier",
    "Chunk",
    "Chunks",
    "FlowEnded",
    "Message",
    "RequestHead",
    "ResponseHead",
    "Route",
    "Stop",
    "StreamOpened",
    "Substitution",
    "ToolDecision",
    "WsMessage",
    "WsOpened",
    "decode",
    "encode",
]

CUT_MARGIN = 4096
"""Bytes or characters past a cut that are read with the text before it: a tap keeps this many
past its preview's limit, and the recorder scrubs them with the text before it is cut
(`addons/body.py`: `cap_text`, `Preview.text`). A secret across the cut is then found whole and
redacted, not kept in part (the first 15 characters of a `ghp_` token are no token to a rule
that wants 36). A PEM block is found by its first line."""

Headers = tuple[tuple[str, str], ...]

ABNORMAL_CLOSURE = 1006
"""A WebSocket dropped without a close frame: an error only if a turn was open (the recorder knows)."""


def _find(headers: Headers, name: str) -> str | None:
    name = name.lower()
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


class Route(msgspec.Struct, frozen=True, array_like=True):
    """How to read a model call: `provider` serves it, `protocol` names the parser."""

    provider: str
    protocol: str
    model: str | None = None
    """Model named in the URL (Gemini, Bedrock, Azure deployments), if any."""


class RequestHead(msgspec.Struct, frozen=True, array_like=True):
    """The request line and headers of a flow."""

    key: str
    """mitmproxy's flow id."""
    conn: str | None
    """mitmproxy's client connection id."""
    started: float
    """Wall-clock time the request started (Unix seconds)."""
    scheme: str
    host: str
    port: int
    method: str
    path: str
    """The path exactly as sent, without the query string (split at its first `?` only)."""
    query: str
    http_version: str
    headers: Headers
    client_addr: str | None = None
    canonical_path: str | None = None
    """The path the policy decided on (`addons/canonical.py`), computed once by the hook."""

    def header(self, name: str) -> str | None:
        return _find(self.headers, name)


class ResponseHead(msgspec.Struct, frozen=True, array_like=True):
    status: int
    headers: Headers
    started: float | None = None

    def header(self, name: str) -> str | None:
        return _find(self.headers, name)


class StreamOpened(msgspec.Struct, frozen=True, array_like=True, tag=2):
    """A response body is streamed to the recorder chunk by chunk."""

    request: RequestHead
    response: ResponseHead
    route: Route | None
    """The model call's route; None for an MCP event stream (`mcp_stream`)."""
    framing: str | None
    """How the body is framed (`sse`, `ndjson`, `json-array`, `eventstream`), or None: a whole
    body, parsed when it ends. Decided once, in the hook."""
    mcp_stream: bool = False
    """A GET event stream that may carry answers to MCP POSTs (HTTP+SSE transport)."""


class Chunk(msgspec.Struct, frozen=True, array_like=True, tag=3):
    """Body bytes of a streamed response, as they left the proxy (still content-encoded)."""

    key: str
    at: float
    data: bytes


class Chunks(msgspec.Struct, frozen=True, array_like=True, tag=9):
    """Consecutive body chunks of one streamed model call, packed by the outbox
    (`addons/proxy/outbox.py: Outbox.take`) into one message per flow and batch: the recorder
    needs only their bytes and where and when each ended, and one message costs one step where
    a `Chunk` each cost one per chunk (msgpack's objects, the recorder's dispatch)."""

    key: str
    data: bytes
    """The chunks' bytes, joined, as they left the proxy (still content-encoded)."""
    sizes: list[int]
    """The length of each chunk in `data`, in order (each > 0)."""
    times: list[float]
    """When each chunk came (Unix seconds)."""


class WsOpened(msgspec.Struct, frozen=True, array_like=True, tag=8):
    """A flow was upgraded to a WebSocket (101): its messages follow as `WsMessage`s."""

    request: RequestHead
    response: ResponseHead
    process: tuple[str | None, int | None] | None = None
    """(name, pid) of the local process that opened the connection, when known."""


class ToolDecision(msgspec.Struct, frozen=True, array_like=True):
    """What a tool rule decided about one tool call of the model's answer (`Policy.decide_tool`),
    written onto its `tool_calls` row (by `call_id`) as `decision` and `decision_rule`."""

    call_id: str
    """The call's id as the provider gave it (`toolu_...`, `call_...`)."""
    name: str
    """The tool's name as the model called it."""
    decision: str
    """`allowed`, `warned`, `denied`, `asked` (still waiting, or timed out) or `approved`."""
    rule: str | None
    """The rule that decided; None when no tool rule matched (`allowed`)."""
    approval_id: str | None = None
    """The `approvals.approval_id` of the person's answer to an `ask`."""


class WsMessage(msgspec.Struct, frozen=True, array_like=True, tag=4):
    """One WebSocket message of an upgraded flow."""

    key: str
    from_client: bool
    content: bytes
    is_text: bool
    at: float
    tool_decisions: tuple[ToolDecision, ...] = ()
    """Decisions on the tool calls of the socket's current turn, made up to this message (a
    turn's rows are written when it ends, long before the socket's `FlowEnded`)."""
    side: str = "both"
    """Who saw it: `both`; `model` (a server message the tool gate dropped: the agent did not get
    it as it came) or `agent` (one the tool gate sent: held bytes released, or their replacement)."""


class Substitution(msgspec.Struct, frozen=True, array_like=True):
    """A credential's placeholder in a request, and what capsem did with it (never the value)."""

    credential: str
    """The `credentials:` entry whose placeholder it was."""
    location: str
    """Where it was: `header x-api-key`, `query key`, `path`."""
    outcome: str
    """`substituted` (the real value went upstream in its place) or `refused` (it did not)."""
    reason: str | None = None
    """Why it was refused."""


class Approval(msgspec.Struct, frozen=True, array_like=True):
    """A request an `ask` rule held for a person, and the answer (`addons/proxy/approvals.py`)."""

    id: str
    """The id `capsem approvals` shows and `capsem approve ID` takes."""
    rule: str
    asked_at: float
    decided_at: float
    decision: str
    """`approved`, `denied` or `timed_out`."""
    decided_by: str
    """`cli`, `view`, `rule` (an earlier `--always` answer), `timeout`, `shutdown` or `error`."""
    reason: str | None = None
    always: bool = False
    """The answer became a rule for the rest of the session."""
    mcp_server: str | None = None
    tool: str | None = None
    arguments: str | None = None
    """The MCP tool's arguments as JSON (scrubbed by the writer like every text)."""


class FlowEnded(msgspec.Struct, frozen=True, array_like=True, tag=5):
    """A flow is over (response, error, WebSocket end, or shutdown): everything about it."""

    request: RequestHead
    ended: float
    route: Route | None = None
    request_body: bytes | None = None
    """The request body as sent (still content-encoded); None when not captured."""
    request_size: int = 0
    request_truncated: bool = False
    response: ResponseHead | None = None
    response_body: bytes | None = None
    """The body of a response that was not streamed (still content-encoded)."""
    response_size: int = 0
    streamed: bool = False
    first_chunk_at: float | None = None
    stream_preview: bytes | None = None
    """First bytes of a streamed body that went to no reader (neither a model call nor MCP)."""
    error: str | None = None
    decision: str = "allowed"
    matched_rule: str | None = None
    tap_failure: str | None = None
    mcp: bool = False
    """The request looks like MCP JSON-RPC: the recorder writes mcp_calls rows for it."""
    websocket: bool = False
    """An upgraded flow whose messages came as `WsMessage`s."""
    client_status: int | None = None
    """The status the client got when it differs from the upstream's (mitmproxy answered 502)."""
    dropped_chunks: int = 0
    """Streamed chunks the hand-over dropped because the recorder had fallen behind."""
    process: tuple[str | None, int | None] | None = None
    """(name, pid) of the local process that opened the client connection, when known."""
    substitutions: tuple[Substitution, ...] = ()
    """Credential placeholders the request carried (brokered credentials)."""
    close_code: int | None = None
    """A WebSocket's close code (1006: the connection ended without a close frame)."""
    close_reason: str | None = None
    """The reason its close frame gave. Whether the close is an error of the flow is the
    recorder's decision (`addons/recorder/websocket.py: close_error`): only it knows whether a turn
    was open."""
    approval: Approval | None = None
    """The person's (or the timeout's) answer to a request an `ask` rule held."""
    tool_decisions: tuple[ToolDecision, ...] = ()
    """What the tool rules decided about the tool calls of the answer (empty with no tool rule)."""
    delivered_body: bytes | None = None
    """What the agent received, decoded, when it differs from what the model sent (a tool call
    denied and replaced, `addons/proxy/tool_gate.py`); None when it got the upstream's bytes."""


class Barrier(msgspec.Struct, frozen=True, array_like=True, tag=6):
    """Everything before it is committed when the recorder acknowledges `token`."""

    token: int


class Stop(msgspec.Struct, frozen=True, array_like=True, tag=7):
    """Shutdown: write what is open, commit, roll the session up and mark it `status`."""

    status: str = "stopped"
    dropped_chunks: int = 0
    """Streamed chunks the hand-over dropped during the session (the recorder had fallen behind)."""
    dropped_messages: int = 0
    """Other messages it dropped."""


Message = Union[StreamOpened, Chunk, Chunks, WsOpened, WsMessage, FlowEnded, Barrier, Stop]  # noqa: UP007

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(list[Message])


def encode(batch: list[Message]) -> bytes:
    """A batch of messages as msgpack."""
    return _ENCODER.encode(batch)


def decode(data: bytes) -> list[Message]:
    """A batch encoded by `encode`."""
    return _DECODER.decode(data)
