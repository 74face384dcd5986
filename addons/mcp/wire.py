"""MCP over HTTP: JSON-RPC messages in a POST body, their answers as JSON or as an SSE stream.

Pure functions (bytes in, records out) for the recorder. Both Streamable-HTTP generations are
read: 2025-11-25 (session-based: `initialize`, `Mcp-Session-Id`) and 2026-07-28 (stateless:
`Mcp-Method` / `Mcp-Name` headers, `_meta` instead of a session). A body may hold one message
or a batch (an array); a request POSTed without an `id` is a notification; a POSTed response
(to a server's request) is recorded as such. Tool failures are `result.isError`, protocol
failures JSON-RPC `error` objects.

An answer may also arrive on a separate GET event stream: the old HTTP+SSE transport
(2024-11-05: the stream's `endpoint` event names the URL to POST to, every POST gets 202 and
its answer comes on the stream) and resumed Streamable-HTTP streams. `StreamReader` reads such a
stream; `exchange_key` names what ties a POST to it (the `Mcp-Session-Id`, else the POST URL).

Model tool names that follow an MCP naming scheme (`mcp__server__tool` as Claude Code and
Codex CLI name them, `server__tool` as older Codex CLI and Goose do) are split by `mcp_tool_name`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from addons.decode import BodyDecoder
from addons.framing import SSEDecoder

_TOOL_NAMES = (
    re.compile(r"^mcp__(?P<server>[^_].*?)__(?P<tool>.+)$"),  # Claude Code, Codex CLI
    re.compile(
        r"^(?P<server>[A-Za-z0-9][A-Za-z0-9-]*(?:_[A-Za-z0-9-]+)*)__(?P<tool>[^_].*)$"
    ),  # older Codex CLI, Goose
)


@dataclass(slots=True)
class McpRequest:
    """One JSON-RPC message the client sent."""

    method: str | None
    """None for a response the client POSTed back (to a server request)."""
    id: str | None
    """The JSON-RPC id as text (`"7"`, `"abc"`); None for notifications."""
    params: Any
    size: int
    """Bytes of this message's JSON (its share of the body)."""
    tool_name: str | None = None
    """`params.name` of tools/call (and prompts/get), `params.uri` of resources/read."""
    raw_id: Any = None
    """The id as sent (number or string), to answer with."""


@dataclass(slots=True)
class McpResponse:
    id: str | None
    result: Any = None
    error: dict[str, Any] | None = None
    size: int = 0

    @property
    def is_error(self) -> bool:
        return self.error is not None or (
            isinstance(self.result, dict) and self.result.get("isError") is True
        )

    @property
    def error_message(self) -> str | None:
        if self.error is not None:
            code, message = self.error.get("code"), self.error.get("message")
            return f"{code}: {message}" if code is not None else str(message)
        if isinstance(self.result, dict) and self.result.get("isError") is True:
            texts = [c.get("text") for c in self.result.get("content") or [] if isinstance(c, dict)]
            return " ".join(t for t in texts if isinstance(t, str)) or "tool returned isError"
        return None


def _id(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _messages(value: Any) -> list[dict[str, Any]] | None:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(m, dict) and m.get("jsonrpc") == "2.0" for m in items):
        return None
    return items


def _objects(value: Any) -> list[dict[str, Any]]:
    """The messages of a request body already decided to be MCP: its objects (a batch's items that
    are not objects are skipped; a message may lack `jsonrpc`, see `addons/mcp/jsonrpc.py`)."""
    items = value if isinstance(value, list) else [value]
    return [m for m in items if isinstance(m, dict)]


def _size(message: Any) -> int:
    return len(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode())


def parse_request(body: bytes) -> list[McpRequest] | None:
    """The messages of a request body that is MCP (decided once, in mitmdump, by
    `addons/mcp/jsonrpc.py`: this does not decide again), or None when it cannot be read."""
    try:
        messages = _objects(json.loads(body))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    out = []
    for message in messages:
        method = message.get("method") if isinstance(message.get("method"), str) else None
        params = message.get("params")
        tool = None
        if isinstance(params, dict):
            name = params.get("name") if method in ("tools/call", "prompts/get") else params.get("uri")
            tool = (
                name
                if isinstance(name, str) and method in ("tools/call", "prompts/get", "resources/read")
                else None
            )
        out.append(
            McpRequest(method, _id(message.get("id")), params, _size(message), tool, message.get("id"))
        )
    return out


def _responses(payload: str) -> list[McpResponse]:
    """The JSON-RPC responses in one JSON text; server requests and notifications are skipped."""
    try:
        messages = _messages(json.loads(payload))
    except (ValueError, RecursionError):
        return []
    out = []
    for m in messages or []:
        if "method" in m or not ("result" in m or "error" in m):
            continue
        error = m.get("error") if isinstance(m.get("error"), dict) else None
        out.append(McpResponse(_id(m.get("id")), m.get("result"), error, _size(m)))
    return out


def header_call(headers: list[tuple[str, str]]) -> list[McpRequest]:
    """The tools/call a 2026-07-28 client names in its `Mcp-Method` / `Mcp-Name` headers (for a
    decision before the body is read), else nothing."""
    values = {name.lower(): value for name, value in headers if name.lower() in ("mcp-method", "mcp-name")}
    if values.get("mcp-method") != "tools/call" or not values.get("mcp-name"):
        return []
    return [McpRequest("tools/call", None, None, 0, values["mcp-name"])]


def parse_response(body: bytes, content_type: str | None) -> list[McpResponse]:
    """JSON-RPC responses in a JSON body (one or a batch) or in an SSE stream's `data:` events.

    Server requests and notifications sent on the stream (progress, logging) are skipped.
    """
    if "event-stream" in (content_type or "").lower():
        decoder = SSEDecoder()
        payloads = [e.data for e in decoder.feed(body) + decoder.flush() if e.data.strip()]
    else:
        payloads = [body.decode("utf-8", "replace")] if body.strip() else []
    return [r for payload in payloads for r in _responses(payload)]


def exchange_key(session_id: str | None, host: str, port: int, path: str, query: str) -> str:
    """What ties a POSTed request to an answer on a GET stream: its Mcp-Session-Id, else its URL."""
    return f"session:{session_id}" if session_id else f"url:{host}:{port}{path}?{query}"


class StreamReader:
    """Reads a GET event stream for MCP: `endpoint` events (HTTP+SSE) and JSON-RPC responses.

    Gives up (and costs nothing more) when the first `give_up` bytes held neither: then it
    is some other event stream.
    """

    def __init__(self, content_encoding: str | None, url: str, give_up: int = 64 * 1024) -> None:
        self.url = url
        """The stream's own URL (`scheme://host:port/path`), to resolve a relative endpoint."""
        self.give_up = give_up
        self.active = True
        self.is_mcp = False
        self.failure: str | None = None
        self._seen = 0
        self._body = BodyDecoder(content_encoding, max_output=1 << 62)
        self._sse = SSEDecoder()

    def feed(self, data: bytes, final: bool = False) -> tuple[list[str], list[McpResponse]]:
        """Endpoint URLs (absolute) and responses in `data`; `final` flushes the last event."""
        if not self.active:
            return [], []
        self._seen += len(data)
        text = self._body.decode(data) + (self._body.flush() if final else b"")
        events = self._sse.feed(text) + (self._sse.flush() if final else [])
        endpoints: list[str] = []
        responses: list[McpResponse] = []
        for event in events:
            if event.event == "endpoint" and event.data.strip():
                endpoints.append(urljoin(self.url, event.data.strip()))
            elif event.data.strip():
                responses += _responses(event.data)
            self.is_mcp = self.is_mcp or bool(endpoints or responses) or '"jsonrpc"' in event.data
        self.failure = self._body.error
        if not self.is_mcp and self._seen > self.give_up:
            self.active = False
        return endpoints, responses


def url_key(url: str) -> str:
    """`exchange_key` of a POST to `url` without a session id (the HTTP+SSE message endpoint)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return exchange_key(None, parts.hostname or "", port, parts.path or "/", parts.query)


def server_name(host: str, port: int, path: str) -> str:
    """A server's name from its URL when it never told us (no initialize seen): host[:port]/path."""
    default = port in (80, 443)
    return f"{host}{'' if default else f':{port}'}{path.rstrip('/') or '/'}"


def initialize_name(response: McpResponse) -> str | None:
    """`serverInfo.name` from an initialize result."""
    info = response.result.get("serverInfo") if isinstance(response.result, dict) else None
    name = info.get("name") if isinstance(info, dict) else None
    return name if isinstance(name, str) and name else None


def learned_name(requests: list[McpRequest], answers: dict[Any, McpResponse]) -> str | None:
    """The server name an exchange teaches: `serverInfo.name` of the answer to its `initialize`
    (the last one that names it), else None. The one rule by which the policy (in mitmdump, for
    its MCP rules) and the ledger (in the recorder, for `mcp_calls.server_name`) learn names."""
    name = None
    for call in requests:
        if call.method == "initialize" and call.id in answers:
            name = initialize_name(answers[call.id]) or name
    return name


def mcp_tool_name(name: str) -> tuple[str, str] | None:
    """(server, tool) of a model tool name in an MCP naming scheme, else None: `mcp__server__tool`
    (Claude Code, Codex CLI) or `server__tool` (older Codex CLI, Goose)."""
    for pattern in _TOOL_NAMES:
        match = pattern.match(name)
        if match:
            return match["server"], match["tool"]
    return None


def preview(value: Any) -> str | None:
    """Compact JSON of params / result / error for the *_preview columns."""
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
