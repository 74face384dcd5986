"""Sending a session's spans over OTLP/HTTP (protobuf), from its watermark in main.db on.

`export_session` is one loop for both senders: the recorder's live thread (`addons.recorder.otlp.live`)
and `capsem export otlp` (backfill). Each step reads the rows after the watermark, sends their
spans in one request, and moves the watermark only when the endpoint accepted them: a failed
request leaves it where it was, so the next attempt sends the same spans (same ids) and nothing
accepted is sent again.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from addons.recorder.otlp.read import Mark, step
from addons.recorder.otlp.spans import Builder, Options
from capsem.ids import utc_now

TRACES_PATH = "/v1/traces"
logger = logging.getLogger("addons.recorder.otlp")


@dataclass(frozen=True)
class Target:
    """Where spans go and what they carry (`export.otlp.*`)."""

    endpoint: str
    headers: Mapping[str, str] = field(default_factory=dict)
    options: Options = field(default_factory=Options)

    def __repr__(self) -> str:  # headers may hold credentials
        return f"Target(endpoint={self.endpoint!r}, options={self.options!r})"


def traces_url(endpoint: str) -> str:
    """`http://collector:4318` -> `http://collector:4318/v1/traces`; a full traces URL unchanged."""
    path = urlsplit(endpoint).path.rstrip("/")
    return endpoint if path.endswith(TRACES_PATH) else endpoint.rstrip("/") + TRACES_PATH


def exporter(target: Target, timeout: float) -> OTLPSpanExporter:
    # the SDK logs every failed request at ERROR: the callers count failures and say it once
    logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)
    logging.getLogger("opentelemetry.exporter.otlp").setLevel(logging.CRITICAL)
    send = OTLPSpanExporter(
        endpoint=traces_url(target.endpoint), headers=dict(target.headers), timeout=timeout
    )
    client = getattr(send, "_client", None)  # the SDK's HTTP client: keep its last answer (`failure_of`)
    if client is not None and callable(getattr(client, "export", None)):
        post = client.export

        def export(data: bytes) -> object:
            result = post(data)
            send.capsem_last = result  # type: ignore[attr-defined]
            return result

        client.export = export
    return send


def failure_of(send: OTLPSpanExporter) -> tuple[int | None, str] | None:
    """Why the last export failed: (HTTP status or None, what happened), or None when it did not
    (or the SDK does not say)."""
    last = getattr(send, "capsem_last", None)
    if last is None or getattr(last, "success", True):
        return None
    status, reason, error = getattr(last, "status_code", None), getattr(last, "reason", None), last.error
    if status is not None:
        return status, f"HTTP {status}" + (f" {reason}" if reason else "")
    return None, f"{type(error).__name__}: {error}" if error is not None else "no answer"


def read_mark(main: sqlite3.Connection, session_id: str, endpoint: str) -> Mark:
    found = main.execute(
        "SELECT model_call_id, mcp_call_id, done, spans FROM otlp_exports WHERE session_id = ? AND endpoint = ?",
        (session_id, endpoint),
    ).fetchone()
    return Mark(found[0], found[1], bool(found[2]), found[3]) if found else Mark()


def save_mark(main: sqlite3.Connection, session_id: str, endpoint: str, mark: Mark) -> None:
    main.execute(
        """INSERT INTO otlp_exports (session_id, endpoint, model_call_id, mcp_call_id, done, spans, updated_at)
           VALUES (?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (session_id, endpoint) DO UPDATE SET model_call_id = excluded.model_call_id,
               mcp_call_id = excluded.mcp_call_id, done = excluded.done, spans = excluded.spans,
               updated_at = excluded.updated_at""",
        (session_id, endpoint, mark.model_call_id, mark.mcp_call_id, int(mark.done), mark.spans, utc_now()),
    )


@dataclass
class Sent:
    spans: int = 0
    """Spans the endpoint accepted in this run."""
    failed: bool = False
    """The endpoint refused or could not be reached: the rest waits for the next attempt."""
    done: bool = False
    """The session is exported whole (its turns included)."""


def export_session(session: sqlite3.Connection, main: sqlite3.Connection, session_id: str, target: Target,
                   send: OTLPSpanExporter, *, finished: bool, progress=None) -> Sent:  # fmt: skip
    """Send what lies after the session's watermark, step by step; stop at the first failure.
    `progress(spans)` is told after each accepted step."""
    builder = Builder(session_id, target.options)
    limit = 50 if target.options.content else 200
    sent = Sent()
    while True:
        mark = read_mark(main, session_id, target.endpoint)
        sent.done = mark.done
        todo = step(session, session_id, mark, finished=finished, content=target.options.content, limit=limit)
        if todo is None:
            return sent
        spans = builder.spans(todo.rows)
        if spans and send.export(spans) is not SpanExportResult.SUCCESS:
            sent.failed = True
            return sent
        new = Mark(todo.mark.model_call_id, todo.mark.mcp_call_id, todo.mark.done, mark.spans + len(spans))
        save_mark(main, session_id, target.endpoint, new)
        sent.spans += len(spans)
        if progress is not None:
            progress(len(spans))
