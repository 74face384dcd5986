"""What a route handler returns to the server: status, headers, body or events, the truth."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    """One request as a route handler sees it."""

    method: str
    host: str
    path: str
    query: str
    headers: dict[str, str]
    """Lower-cased names."""
    body: bytes
    """Decoded (Content-Encoding undone) body."""
    json: Any
    """The body parsed as JSON (None if it is not JSON)."""
    controls: dict[str, str]
    """`x-emulator` controls merged over the emulator's defaults."""
    match: re.Match[str] | None = None
    """The route pattern's match on the path (named groups such as the model)."""


@dataclass
class Reply:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | None = None
    """Whole body (non-streamed)."""
    events: list[bytes] | None = None
    """Streamed body, one wire event (or garbage piece) per item, uncompressed."""
    expected: dict[str, Any] = field(default_factory=dict)
    complete: bool = True


def parse_controls(value: str | None, defaults: dict[str, str]) -> dict[str, str]:
    """An `x-emulator: key=value; ...` header merged over the defaults (keys lower-cased)."""
    out = dict(defaults)
    for part in (value or "").split(";"):
        key, eq, val = part.partition("=")
        if eq and key.strip():
            out[key.strip().lower()] = val.strip()
    return out


def json_reply(status: int, obj: Any, *, pretty: bool = False, headers: list[tuple[str, str]] | None = None,
               expected: dict[str, Any] | None = None) -> Reply:  # fmt: skip
    text = json.dumps(
        obj, indent=2 if pretty else None, ensure_ascii=False, separators=None if pretty else (",", ":")
    )
    return Reply(status, [("content-type", "application/json"), *(headers or [])], text.encode(), None,
                 expected or {})  # fmt: skip


def sse(event: str | None, data: Any, *, pad: str = "") -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    if pad and payload.endswith("}"):
        payload = payload[:-1] + pad + "}"
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def base_expected(protocol: str, model: str | None, stream: bool) -> dict[str, Any]:
    return {
        "protocol": protocol, "model": model, "response_model": model, "message_id": None, "text": "",
        "thinking": "", "stop_reason": None, "tool_calls": [], "usage_raw": None, "input_tokens": None,
        "output_tokens": None, "cache_read": None, "cache_write": None, "cache_write_1h": None,
        "reasoning": None, "error_type": None, "stream": stream, "malformed": None,
    }  # fmt: skip
