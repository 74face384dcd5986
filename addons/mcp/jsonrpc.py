"""Which requests are MCP: decided once, in mitmdump, by parsing the decoded body.

A request is MCP when its body, decoded (any content-encoding `addons/decode.py` reads, any
content type, up to `capture.max_body_bytes`), is a JSON-RPC 2.0 message or batch, whatever its
key order, escapes (`"\\u006asonrpc"`) or extra keys (a `model` beside `jsonrpc` does not make
it a model call); or when it is a POST with an MCP header (`Mcp-Session-Id`,
`Mcp-Protocol-Version`, `Mcp-Method`). A message without `"jsonrpc": "2.0"` whose `method` is
an MCP method (`tools/call`…) counts too: a lenient server may take it. The hook hands the
decision over on `FlowEnded.mcp`; the recorder's ledger and the policy read the messages with
`addons/mcp/wire.py: parse_request` and never decide again.

Cheap on the event loop: a body that holds neither `jsonrpc`, `method` nor a `\\u` escape cannot
be JSON-RPC and is not parsed; any other is read by msgspec into a Struct of the two fields
(the rest is skipped at C speed). What msgspec refuses but Python's json reads (NaN, lone
surrogates) is read by json. JSON text in UTF-16/32 or with a BOM is transcoded first.

A body that looks like JSON-RPC but cannot be read whole (nested deeper than the parsers go, or
decoded larger than the limit) is `UNREADABLE`: it could hold any call, so the policy decides it
as one that matches every MCP condition (`addons/proxy/policy.py`).
"""

from __future__ import annotations

import json
import re
from enum import Enum
from typing import Any

import msgspec

from addons.decode import decode_body

MCP_METHODS = (
    "initialize", "ping", "notifications/", "tools/", "resources/", "prompts/", "completion/", "logging/",
    "sampling/", "elicitation/", "roots/", "server/", "subscriptions/", "tasks/",
)  # fmt: skip
"""Methods of the MCP specification (2025-11-25 and 2026-07-28), by prefix."""
MCP_HEADERS = ("mcp-session-id", "mcp-protocol-version", "mcp-method")


class Kind(Enum):
    NOT_MCP = "not-mcp"
    MCP = "mcp"
    UNREADABLE = "unreadable"
    """Looks like JSON-RPC, cannot be read whole: could hold any call."""


class _Probe(msgspec.Struct):
    """The two fields read of each message; every other field is skipped unparsed."""

    jsonrpc: Any = None
    method: Any = None


_DECODER = msgspec.json.Decoder(_Probe | list[_Probe])
_JSON_START = re.compile(rb"\s*[\[{]")


def _qualifies(jsonrpc: Any, method: Any) -> bool:
    return jsonrpc == "2.0" or (isinstance(method, str) and method.startswith(MCP_METHODS))


def _utf8(body: bytes) -> bytes:
    """The JSON text as UTF-8 (RFC 8259's encoding; a BOM or UTF-16/32 text, as some parsers take it)."""
    encoding = json.detect_encoding(body[:4])  # by its first bytes: cheap
    if encoding == "utf-8":
        return body
    try:
        return body.decode(encoding).encode("utf-8", "surrogatepass")
    except (UnicodeError, LookupError):
        return body


def classify(body: bytes) -> Kind:
    """Whether a decoded body is JSON-RPC (one message or a batch)."""
    body = _utf8(body)
    if not _JSON_START.match(body) or not (b"jsonrpc" in body or b"method" in body or b"\\u" in body):
        return Kind.NOT_MCP
    try:
        probe = _DECODER.decode(body)
        items: list[Any] = probe if isinstance(probe, list) else [probe]
        return Kind.MCP if any(_qualifies(p.jsonrpc, p.method) for p in items) else Kind.NOT_MCP
    except RecursionError:
        return Kind.UNREADABLE
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    try:  # what msgspec refuses: NaN, lone surrogates, a batch with items that are not objects
        value = json.loads(body)
    except RecursionError:
        return Kind.UNREADABLE
    except ValueError:
        return Kind.NOT_MCP
    items = value if isinstance(value, list) else [value]
    found = any(isinstance(m, dict) and _qualifies(m.get("jsonrpc"), m.get("method")) for m in items)
    return Kind.MCP if found else Kind.NOT_MCP


def read_request(
    headers: list[tuple[str, str]], method: str, raw: bytes | None, limit: int, *, cut: bool = False
) -> tuple[Kind, bytes | None]:
    """(what the request is, its decoded body when it is MCP). `raw` is the body as sent (`cut`:
    only its start, as a streamed body's copy is), decoded here up to `limit` bytes
    (`capture.max_body_bytes`)."""
    lowered = {name.lower(): value for name, value in headers}
    by_header = method == "POST" and any(name in lowered for name in MCP_HEADERS)
    if not raw:
        return (Kind.MCP, b"") if by_header else (Kind.NOT_MCP, None)
    body, error = decode_body(raw, lowered.get("content-encoding"), max_output=limit)
    cut = cut or bool(error and "exceeds" in error)
    kind = classify(body)
    if kind is Kind.NOT_MCP and cut and _JSON_START.match(_utf8(body[:64])):
        kind = Kind.UNREADABLE  # JSON cut at the limit: what follows could be any call
    if kind is Kind.NOT_MCP and by_header:
        kind = Kind.MCP
    return kind, body if kind is not Kind.NOT_MCP else None
