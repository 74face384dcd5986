"""Session ids: `YYYYMMDD-HHMMSS-xxxx` (UTC time, 4 lowercase hex)."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

SESSION_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{4}")


def new_session_id(now: datetime | None = None) -> str:
    """A fresh session id for `now` (default: the current UTC time)."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def is_session_id(value: str) -> bool:
    return bool(SESSION_ID.fullmatch(value))


def utc_now() -> str:
    """RFC 3339 UTC timestamp with microseconds, as stored in session.db."""
    return rfc3339(datetime.now(UTC))


def rfc3339(moment: datetime | float) -> str:
    """Format a datetime or a Unix timestamp as `2026-03-01T12:00:00.123456Z`."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
