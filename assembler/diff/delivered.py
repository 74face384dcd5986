"""What the agent received of a model call whose answer capsem rewrote (a tool call denied:
`addons/proxy/tool_gate.py`), read from its stored `delivered` body for `capsem diff`.

A session and its replay are compared as the agent saw them: the replay was answered with the
delivered body (`assembler/replay/recording.py`), so its recorded answer is that body; the original's
stored items and stop reason are the model's. The delivered body is read with the same parsers and
item builder as the recorder uses, so both sides are read by the same code.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from addons.body import ResponseReader
from addons.framing import SSEEvent
from addons.items import Item, output_items
from addons.providers import parser_for, stream_framing
from addons.providers.openai_responses import OpenAIResponsesStream
from addons.records import ResponseSummary
from capsem.store.bodies import read_body

WEBSOCKET_BODY = "application/x-ndjson"
"""How the recorder types a WebSocket turn's bodies (one server message a line)."""


@dataclass(frozen=True)
class Delivered:
    """The answer the agent received: its output items (tool calls it got among them), stop reason."""

    items: tuple[Item, ...]
    stop_reason: str | None

    @property
    def call_ids(self) -> frozenset[str]:
        return frozenset(i.call_id for i in self.items if i.kind == "tool_call" and i.call_id)


def delivered(conn: sqlite3.Connection, row: dict) -> Delivered | None:
    """The delivered answer of the `model_calls` row `row`, None when the agent got the model's (or
    the body cannot be read)."""
    try:
        found = read_body(conn, row["id"], "delivered")
    except (sqlite3.Error, ValueError):
        return None
    if found is None:
        return None
    body, blob = found
    summary = _summary(row.get("protocol") or "", blob.get("content_type"), row.get("path") or "", body)
    return Delivered(tuple(output_items(summary)), summary.stop_reason) if summary is not None else None


def _summary(protocol: str, content_type: str | None, path: str, body: bytes) -> ResponseSummary | None:
    if content_type == WEBSOCKET_BODY:  # as `addons/recorder/websocket.py` reads each message
        interp = OpenAIResponsesStream()
        for line in body.split(b"\n"):
            interp.event(SSEEvent(None, line.decode("utf-8", "replace")))
        return interp.finish()
    try:
        parser = parser_for(protocol)
    except (KeyError, ValueError):
        return None
    reader = ResponseReader(parser, framing=stream_framing(protocol, content_type, path), content_encoding=None,
                            status=200)  # fmt: skip
    reader.feed(body)
    return reader.finish()
