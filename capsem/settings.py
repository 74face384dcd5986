"""Typed settings (placeholder until the settings tree lands): the capture section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CaptureSettings:
    preview_bytes: int = 65536
    content_max_bytes: int = 1024 * 1024
    max_parse_bytes: int = 64 * 1024 * 1024
    header_allowlist: frozenset[str] = frozenset()
    query_params: frozenset[str] = frozenset()
    max_pending_calls: int = 10000
    commit_interval_ms: int = 250

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> CaptureSettings:
        cap = settings.get("capture", {})
        return cls(
            preview_bytes=int(cap.get("preview_bytes", cls.preview_bytes)),
            content_max_bytes=int(cap.get("content_max_bytes", cls.content_max_bytes)),
            max_parse_bytes=int(cap.get("max_parse_bytes", cls.max_parse_bytes)),
            header_allowlist=frozenset(h.lower() for h in settings.get("headers", {}).get("allowlist", [])),
            query_params=frozenset(q.lower() for q in settings.get("redaction", {}).get("query_params", [])),
            max_pending_calls=int(cap.get("max_pending_calls", cls.max_pending_calls)),
            commit_interval_ms=int(cap.get("commit_interval_ms", cls.commit_interval_ms)),
        )
