"""The preview columns: a body's first bytes in `net_events`, and the short previews of a call
whose whole bodies are kept (`KEPT_PREVIEW_BYTES`).

A preview cut short is scrubbed across its cut before it is cut (`Preview.text`, `cap_text`): a
secret straddling the cut is redacted whole, none of it kept. A streamed response is scrubbed
with its deltas joined (`Scrubber.scrub_stream`): a key spelled over several events is found."""

from __future__ import annotations

from addons.body import Preview, cap_text
from addons.decode import BodyDecoder
from addons.messages import CUT_MARGIN, FlowEnded
from capsem.redact import Scrubber, is_stream_type

KEPT_PREVIEW_BYTES = 256
"""Previews of a model or MCP call whose whole bodies are kept (event_body_blobs), and of the tool
results its request carried: a glance, not a second copy (`capsem show-call` has it all)."""


def request_preview(data: bytes, limit: int, scrubber: Scrubber) -> str | None:
    """The preview column of a decoded request body (None for an empty one)."""
    if not data:
        return None
    preview = Preview(limit)
    preview.add(data)
    return preview.text(scrubber.scrub)


def read_preview(preview: Preview, flow: FlowEnded, scrubber: Scrubber) -> str | None:
    """The preview of a response a parser read whole (its body is kept): `KEPT_PREVIEW_BYTES`."""
    text = _stream_scrubbed(flow, preview.text(), scrubber) if preview.total else None
    return cap_text(text or None, KEPT_PREVIEW_BYTES, scrubber.scrub)


def plain_preview(flow: FlowEnded, limit: int, scrubber: Scrubber) -> tuple[str | None, str | None]:
    """Preview and decoding error of a response no parser read (a whole body or a stream's first bytes)."""
    body = flow.response_body if flow.response_body is not None else flow.stream_preview
    if not body or flow.response is None:
        return None, None
    keep = limit + CUT_MARGIN
    decoder = BodyDecoder(flow.response.header("content-encoding"), max_output=keep)
    data = decoder.decode(body[: keep * 4] if flow.response_body is None else body)
    preview = Preview(limit)
    preview.add(data)
    preview.total = max(preview.total, flow.response_size if not decoder.error else 0)
    error = decoder.error if decoder.error and "exceeds" not in decoder.error else None
    scrub = scrubber.scrub_stream if _streamed(flow) else scrubber.scrub
    return _stream_scrubbed(flow, preview.text(scrub), scrubber), error


def _stream_scrubbed(flow: FlowEnded, text: str | None, scrubber: Scrubber) -> str | None:
    """A streamed response's preview with the secrets its deltas spell only together cut out
    (before it is cut short: a delta holding half a key would otherwise be kept)."""
    return scrubber.scrub_stream(text) if text and _streamed(flow) else text


def _streamed(flow: FlowEnded) -> bool:
    """Whether the flow's response is an event stream (SSE, NDJSON)."""
    return flow.response is not None and is_stream_type(flow.response.header("content-type"))
