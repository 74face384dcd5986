"""What the hooks copy out of a mitmproxy flow for the recorder thread.

Hooks run on mitmproxy's event loop, so they only copy references (bytes are immutable)
into a `FlowData` and hand it over; all decoding, parsing, pricing and writing happens in
the recorder thread.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from addons.providers import Route

ProcessInfo = tuple[str | None, int | None]


@dataclass(slots=True)
class FlowData:
    key: str
    """mitmproxy's flow id."""
    started: float
    """Wall-clock time the request started (Unix seconds)."""
    scheme: str
    host: str
    port: int
    method: str
    path: str
    """Path without the query string."""
    query: str
    http_version: str
    request_headers: list[tuple[str, str]]
    client_addr: str | None = None
    process: Future[ProcessInfo] | None = None
    route: Route | None = None
    request_body: bytes | None = None
    """Raw request body as sent on the wire (still content-encoded); None if not captured."""
    request_size: int = 0
    request_truncated: bool = False
    status: int | None = None
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    response_started: float | None = None
    response_ended: float | None = None
    response_body: bytes | None = None
    """Raw body of a non-streamed response (None when streamed or absent)."""
    response_size: int = 0
    streamed: bool = False
    first_chunk_at: float | None = None
    error: str | None = None
    decision: str = "allowed"
    matched_rule: str | None = None
    tap_failure: str | None = None
    mcp: bool = False
    """The request looks like MCP JSON-RPC: the recorder writes mcp_calls rows for it."""
    mcp_stream: bool = False
    """A GET event stream that may carry MCP answers (HTTP+SSE transport): chunks go to the recorder."""
    stream_preview: bytes | None = None
    """First bytes of a streamed body that the recorder did not parse (non-model streams)."""

    def header(self, name: str, *, response: bool = False) -> str | None:
        name = name.lower()
        for key, value in self.response_headers if response else self.request_headers:
            if key.lower() == name:
                return value
        return None
