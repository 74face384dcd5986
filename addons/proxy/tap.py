"""Stream callables: copy each body chunk for the recorder, return it unchanged.

mitmproxy calls `flow.response.stream` (and `flow.request.stream`) directly, outside its
addon error handling, so an exception here would break the agent's connection. The
callables therefore catch everything, record the failure, and stop copying; the chunk is
always returned as it came, so the agent sees exactly what the provider sent, when it sent
it.

A tap keeps `CUT_MARGIN` bytes past the limit it is given: the recorder's scrubber reads a
preview across its cut (`Preview.text`), so that a secret straddling it is redacted whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from addons.messages import CUT_MARGIN


class ResponseTap:
    """Hands each chunk to the recorder (`put(key, time, chunk)`: `Outbox.put_chunk`, or
    `put_lone_chunk` for an MCP event stream), or keeps a preview."""

    __slots__ = ("bytes", "failure", "first_at", "key", "preview", "preview_limit", "put")

    def __init__(self, key: str, put: Callable[[str, float, bytes], None] | None, preview_limit: int) -> None:
        self.key = key
        self.put = put
        self.bytes = 0
        self.first_at: float | None = None
        self.failure: str | None = None
        self.preview = bytearray()
        self.preview_limit = 0 if put is not None else preview_limit + CUT_MARGIN

    def __call__(self, chunk: bytes) -> bytes:
        try:
            if chunk:
                now = time.time()
                if self.first_at is None:
                    self.first_at = now
                self.bytes += len(chunk)
                if self.put is not None:
                    self.put(self.key, now, chunk)
                elif len(self.preview) < self.preview_limit:
                    self.preview += chunk[: self.preview_limit - len(self.preview)]
        except Exception as exc:  # never let capture break the flow
            self.failure = f"stream tap failed: {exc!r}"
            self.put = None
        return chunk


class RequestTap:
    """Keeps a bounded copy of a streamed request body."""

    __slots__ = ("body", "bytes", "failure", "limit")

    def __init__(self, limit: int) -> None:
        self.body = bytearray()
        self.bytes = 0
        self.limit = limit + CUT_MARGIN
        self.failure: str | None = None

    def __call__(self, chunk: bytes) -> bytes:
        try:
            self.bytes += len(chunk)
            if len(self.body) < self.limit:
                self.body += chunk[: self.limit - len(self.body)]
        except Exception as exc:
            self.failure = f"request tap failed: {exc!r}"
        return chunk
