"""What `capsem replay` sends back, pure: a recorded body cut into the chunks it arrived in, and a
replay miss as an error in the provider's own shape."""

from __future__ import annotations

import json
import re
from typing import Any

MISS_STATUS = 400
"""A replay miss is a client error: SDKs do not retry it."""

_SSE_END = re.compile(rb"\r?\n\r?\n")


def pieces(body: bytes, content_type: str | None, chunks: list[tuple[int, int]] | None,
           websocket: bool = False) -> list[tuple[bytes, int | None]]:  # fmt: skip
    """`body` cut as it was received: at the recorded chunk ends (with their ms after the request),
    else at its framing units (one SSE event, one NDJSON line, one WebSocket message each)."""
    if chunks:
        out, start = [], 0
        for end, ms in chunks:
            end = min(max(end, start), len(body))
            if end > start:
                out.append((body[start:end], ms))
            start = end
        if start < len(body):
            out.append((body[start:], chunks[-1][1]))
        if websocket:  # each message's end counts the newline that follows it in the stored body
            out = [
                (p[:-1] if n < len(out) - 1 and p.endswith(b"\n") else p, ms) for n, (p, ms) in enumerate(out)
            ]
        return out
    kind = (content_type or "").lower()
    if websocket:
        return [(line, None) for line in body.split(b"\n")]
    if "event-stream" in kind:
        ends = [m.end() for m in _SSE_END.finditer(body)]
    elif "ndjson" in kind or "json" in kind:
        ends = [i + 1 for i, byte in enumerate(body) if byte == 0x0A]
    else:
        ends = []
    out, start = [], 0
    for end in [*ends, len(body)]:
        if end > start:
            out.append((body[start:end], None))
            start = end
    return out


def protocol_of(path: str, body: Any) -> str:
    """Whose error shape a request gets: `anthropic`, `openai`, `gemini`, `ollama` or `mcp`."""
    if isinstance(body, dict) and body.get("jsonrpc") == "2.0":
        return "mcp"
    if path.endswith("/messages") or "/anthropic/" in path or "/invoke" in path or "rawPredict" in path:
        return "anthropic"
    if "enerateContent" in path:
        return "gemini"
    if path.startswith("/api/"):
        return "ollama"
    return "openai"


def miss_error(protocol: str, message: str, request: Any = None) -> tuple[int, bytes]:
    """(status, JSON body) of a replay miss as `protocol` writes its errors."""
    message = f"capsem replay miss: {message}"
    if protocol == "mcp":
        rpc_id = request.get("id") if isinstance(request, dict) else None
        return 200, _json({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32000, "message": message}})
    if protocol == "anthropic":
        body: dict[str, Any] = {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": message},
        }
    elif protocol == "gemini":
        body = {"error": {"code": MISS_STATUS, "message": message, "status": "INVALID_ARGUMENT"}}
    elif protocol == "ollama":
        body = {"error": message}
    else:
        body = {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": "replay_miss",
            }
        }
    return MISS_STATUS, _json(body)


def websocket_miss(message: str) -> bytes:
    """A replay miss on a Responses WebSocket: an `error` event (Codex ends the turn with it)."""
    return _json({"type": "error", "status": MISS_STATUS, "error": {"type": "invalid_request_error",
                  "code": "replay_miss", "message": f"capsem replay miss: {message}"}})  # fmt: skip


def not_replayed(method: str, host: str, path: str) -> bytes:
    """The answer to a request that is neither a model nor an MCP call (telemetry, model lists…)."""
    return _json({"error": {"type": "not_found_error", "message": f"capsem replay: {method} {host}{path} is not a "
                            "model or MCP call; it is not replayed and nothing left the machine"}})  # fmt: skip


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()
