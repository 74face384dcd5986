"""Incremental framing of decoded response bodies into events.

(Stub: the interface below is fixed; the implementation is being written.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class SSEEvent:
    """One dispatched Server-Sent Event."""

    event: str | None
    """The `event:` field, or None when the event had no `event:` line."""
    data: str
    """The `data:` lines joined with newlines."""
    id: str | None = None


class SSEDecoder:
    """Split a byte stream into SSE events, whatever the chunking (WHATWG rules)."""

    def feed(self, data: bytes) -> list[SSEEvent]:
        raise NotImplementedError

    def flush(self) -> list[SSEEvent]:
        raise NotImplementedError
