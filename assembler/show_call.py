"""`capsem show-call ID`: one model call's exact request and response, raw or readable.

`call_bodies()` reads the stored bodies (addons/recorder/bodies.py); `render()` turns them into text a
person reads: the request as indented JSON, the response as indented JSON or, for a stream,
one line per event with the JSON data indented.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from addons.recorder.bodies import read_body
from assembler.sessiondb import open_session


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
    return CallBodies(dict(row), bodies["request"], bodies["response"], inputs)


def render(body: StoredBody) -> str:
    """A body as a person reads it: pretty JSON, or an event stream one event per block."""
    text = body.data.decode("utf-8", "replace")
    note = f"\n[… truncated: {body.size} bytes kept]" if body.truncated else ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False) + note
    except ValueError:
        pass
    lines = []
    for line in text.splitlines():
        if line.startswith("data:"):
            payload = line[5:].strip()
            try:
                lines.append("data: " + json.dumps(json.loads(payload), indent=2, ensure_ascii=False))
                continue
            except ValueError:
                pass
        lines.append(line)
    return "\n".join(lines) + note
