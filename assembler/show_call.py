"""`capsem show-call ID`: one model call's exact request and response, raw or readable.

`call_bodies()` reads the stored bodies (capsem/store/bodies.py); `document()` makes them one
JSON document (`--json`): the call's row, and each body as the JSON it is or, for a stream, the
list of its events. The readable form is assembler/show_call_text.py's.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from addons.framing import SSEDecoder
from assembler.sessiondb import open_session
from capsem.store.bodies import read_body


class CallNotFound(LookupError):
    """No model call (or no stored body) with that id in the session."""


@dataclass(frozen=True)
class StoredBody:
    direction: str
    data: bytes
    content_type: str | None
    truncated: bool
    size: int


@dataclass(frozen=True)
class CallBodies:
    call: dict
    request: StoredBody | None
    response: StoredBody | None
    inputs: list[dict]
    """Where its input tokens went (`input_breakdown` rows), estimated."""
    tools: list[dict]
    """Its tool calls (`tool_calls` rows) with the policy's verdict on each (`decision`,
    `decision_rule`, `approval_id`, `not_run`) and, unless a tool rule kept it from the agent,
    the result that came back."""


def call_bodies(session_id: str, call_id: int) -> CallBodies:
    """The `model_calls` row `call_id` of a session and its stored request and response bodies.

    Raises:
        CallNotFound: no such call in the session.
    """
    with open_session(session_id) as conn:
        row = conn.execute("SELECT * FROM model_calls WHERE id = ?", (call_id,)).fetchone()
        if row is None:
            raise CallNotFound(f"session {session_id} has no model call {call_id}")
        bodies: dict[str, StoredBody | None] = {}
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for direction in ("request", "response"):
            found = read_body(conn, call_id, direction) if "event_body_blobs" in tables else None
            bodies[direction] = (
                StoredBody(
                    direction,
                    found[0],
                    found[1]["content_type"],
                    bool(found[1]["truncated"]),
                    found[1]["size"],
                )
                if found
                else None
            )
        inputs = (
            [dict(r) for r in conn.execute("SELECT part, tokens, cache_read_tokens, cache_write_tokens, cost_usd FROM "
                                           "input_breakdown WHERE model_call_id = ? ORDER BY id", (call_id,))]
            if "input_breakdown" in tables
            else []
        )  # fmt: skip
        tools = _tools(conn, call_id) if "tool_calls" in tables else []
    return CallBodies(dict(row), bodies["request"], bodies["response"], inputs, tools)


def _tools(conn: sqlite3.Connection, call_id: int) -> list[dict]:
    """The call's tool calls, each with its verdict and its result (none for a call never run)."""
    from assembler.tool_decision import columns, not_run

    out = []
    for r in conn.execute(f"SELECT tc.id, tc.call_index, tc.call_id, tc.tool_name, tc.arguments, tc.origin, "
                          f"tc.mcp_call_id, {columns(conn)} FROM tool_calls tc WHERE tc.model_call_id = ? "
                          "ORDER BY tc.call_index", (call_id,)):  # fmt: skip
        tool = dict(r)
        mcp = conn.execute("SELECT decision FROM mcp_calls WHERE id = ?", (r["mcp_call_id"],)).fetchone()
        tool["not_run"] = not_run(r["decision"]) and not (mcp is not None and mcp[0] == r["decision"])
        result = None if tool["not_run"] else conn.execute(
            "SELECT content_preview, is_error FROM tool_responses WHERE call_id = ? AND model_call_id > ? "
            "ORDER BY id LIMIT 1", (r["call_id"], call_id)).fetchone()  # fmt: skip
        tool["result"] = {"content": result[0], "is_error": bool(result[1])} if result is not None else None
        out.append(tool)
    return out


def _value(text: str) -> object:
    """`text` as JSON when it is JSON, else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def body_value(body: StoredBody) -> object:
    """A body as one JSON value: the JSON it is; an event stream as a list of `{event, data, id}`
    with each event's data as JSON where it is JSON; NDJSON as a list; anything else as text."""
    text = body.data.decode("utf-8", "replace")
    whole = _value(text)
    if whole is not text or not text.strip():
        return whole
    if "event-stream" in (body.content_type or "") or text.lstrip().startswith(("data:", "event:", ":")):
        decoder = SSEDecoder()
        events = decoder.feed(body.data) + decoder.flush()
        return [{"event": e.event, "data": _value(e.data), "id": e.id} for e in events]
    lines = [line for line in text.splitlines() if line.strip()]
    values = [_value(line) for line in lines]
    return values if lines and all(v is not line for v, line in zip(values, lines, strict=True)) else text


def document(bodies: CallBodies, which: str | None) -> dict:
    """`show-call --json`: the call's row and its bodies (`which`: only that one) as one JSON document."""
    out: dict = {"call": bodies.call}
    if which in (None, "response"):
        out["tool_calls"] = bodies.tools
    for body in (bodies.request, bodies.response):
        if body is not None and which in (None, body.direction):
            out[body.direction] = {
                "content_type": body.content_type,
                "size": body.size,
                "truncated": body.truncated,
                "body": body_value(body),
            }
    return out
