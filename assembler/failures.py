"""What went wrong in a session, with the stored error text: failed model calls, requests that
failed before (or without) a model call, and tool results the agent marked as errors.

The run summary, `capsem tail` and `inspect-session` show the same list. A failed model call
has both a `model_calls` row and a `net_events` row; it is listed once, as the model call.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Literal

Kind = Literal["model", "network", "tool"]


@dataclass(frozen=True)
class Failure:
    kind: Kind
    """`model` (a model call failed), `network` (a request or connection failed without a model
    call: DNS, refused, TLS, timeout, HTTP error of another request), `tool` (a tool result the
    agent marked as an error)."""
    row_id: int
    """The id of its row in model_calls, net_events or tool_responses."""
    where: str
    """What failed, e.g. `#4 anthropic/claude-sonnet-4-5 HTTP 529` or `CONNECT api.x.invalid:443`."""
    message: str
    """The stored error text (one line)."""


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def model_failures(conn: sqlite3.Connection) -> list[Failure]:
    """Model calls that got an HTTP error, no answer, or an error event in their stream."""
    out = []
    for r in conn.execute(
        "SELECT id, provider, model, status_code, error_type, error_message FROM model_calls "
        "WHERE status_code IS NULL OR status_code >= 400 OR error_type IS NOT NULL OR error_message IS NOT NULL "
        "ORDER BY id"
    ):
        status = f"HTTP {r['status_code']}" if r["status_code"] else "no response"
        what = ": ".join(x for x in (r["error_type"], _one_line(r["error_message"])) if x)
        out.append(Failure("model", r["id"], f"#{r['id']} {r['provider']}/{r['model'] or '?'} {status}",
                           what or "(no error text recorded)"))  # fmt: skip
    return out


def network_failures(conn: sqlite3.Connection) -> list[Failure]:
    """Requests and connections that failed (`decision='error'`) and are not a model call."""
    out = []
    for r in conn.execute(
        "SELECT n.id, n.method, n.domain, n.port, n.path, n.status_code, n.error FROM net_events n "
        "WHERE n.decision = 'error' AND NOT EXISTS (SELECT 1 FROM model_calls m WHERE m.net_event_id = n.id) "
        "ORDER BY n.id"
    ):
        target = f"{r['domain']}:{r['port']}" + ("" if r["method"] == "CONNECT" else r["path"] or "")
        status = f" HTTP {r['status_code']}" if r["status_code"] else ""
        out.append(Failure("network", r["id"], f"{r['method']} {target}{status}",
                           _one_line(r["error"]) or "(no error text recorded)"))  # fmt: skip
    return out


def tool_failures(conn: sqlite3.Connection) -> list[Failure]:
    """Tool results the agent sent back marked as errors."""
    return [
        Failure(
            "tool", r["id"], f"tool {r['tool_name'] or '?'} ({r['call_id']})", _one_line(r["content_preview"])
        )
        for r in conn.execute(
            "SELECT id, tool_name, call_id, content_preview FROM tool_responses WHERE is_error = 1 ORDER BY id"
        )
    ]


def failures(conn: sqlite3.Connection) -> list[Failure]:
    """Every failure of a session: model calls, then other requests, then tool results."""
    return model_failures(conn) + network_failures(conn) + tool_failures(conn)
