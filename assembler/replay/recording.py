"""A recorded session read for `capsem replay`: every model and MCP call's request shape and the
answer to send back (status, headers, body, how it was cut into chunks and when).

Bodies are the stored ones (capsem/store/bodies.py): decoded, and scrubbed — a secret the
provider's answer held is replayed as its marker. A response is served without Content-Encoding.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field

from assembler.replay.match import Endpoint, Recorded, Shaper
from assembler.sessiondb import main_row, open_session
from capsem.store.bodies import read_body

DROPPED_HEADERS = frozenset(
    {"content-length", "transfer-encoding", "content-encoding", "connection", "keep-alive"}
)
"""Recorded response headers not replayed: the body is served decoded and framed anew."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What a recorded call answered."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    streamed: bool
    chunks: list[tuple[int, int]] | None = None
    """(end offset in `body`, ms after the request was sent) of each chunk as it was received, when
    the recording has them (`response_chunks`); else the body is cut at its framing units."""
    websocket: bool = False
    """A Responses turn on a WebSocket: `body` holds the server's messages one a line (each one
    frame), or at the offsets of `chunks`."""


@dataclass
class Call:
    recorded: Recorded
    answer: Answer
    protocol: str | None
    model: str | None


@dataclass
class Recording:
    session_id: str
    workspace: str | None
    calls: list[Call] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    """The API-key variables the recorded agent used (`ANTHROPIC_API_KEY` when its Anthropic calls
    carried `x-api-key`, not an OAuth token; …): the replay gives it placeholders for these only."""

    @property
    def model_calls(self) -> int:
        return sum(1 for c in self.calls if c.recorded.endpoint.kind != "mcp")


class RecordingError(RuntimeError):
    """The session cannot be replayed (no calls, bodies not stored)."""


def load(session_id: str) -> Recording:
    """Every model call (in recorded order) and MCP call of a session, ready to answer.

    Raises:
        SessionNotFound, SessionDbError: see `assembler.sessiondb.open_session`.
        RecordingError: the session holds no call with a stored body.
    """
    row = main_row(session_id) or {}
    workspace = row.get("workspace")
    recording = Recording(session_id, workspace)
    shaper = Shaper(workspace)  # stored bodies are scrubbed already
    with open_session(session_id) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "event_body_blobs" not in tables:
            raise RecordingError(
                f"session {session_id} was recorded before whole bodies were kept: it cannot be replayed"
            )
        timing = _timings(conn) if "response_chunks" in tables else {}
        number = 0
        model_sql = ("SELECT c.id, c.method, c.host, c.path, c.protocol, c.model, c.stream, c.status_code, "
                     "n.response_headers, n.request_headers, n.query, n.conn_type, n.status_code AS net_status "
                     "FROM model_calls c "
                     "LEFT JOIN net_events n ON n.id = c.net_event_id ORDER BY c.id")  # fmt: skip
        for call in conn.execute(model_sql).fetchall():
            number += 1
            websocket = call["conn_type"] in ("ws", "wss")
            kind = "ws" if websocket else "http"
            got = _call(conn, call, kind, number, shaper, "model_calls", timing.get(call["id"]))
            if got is not None:
                recording.calls.append(got)
            recording.keys |= _keys(call["host"], call["request_headers"], call["query"])
        if "mcp_calls" in tables:
            mcp_sql = ("SELECT m.id, n.method, n.domain AS host, n.path, m.status_code, n.response_headers, "
                       "n.streamed AS stream, n.status_code AS net_status FROM mcp_calls m "
                       "JOIN net_events n ON n.id = m.net_event_id ORDER BY m.id")  # fmt: skip
            for call in conn.execute(mcp_sql).fetchall():
                number += 1
                got = _call(conn, call, "mcp", number, shaper, "mcp_calls", None)
                if got is not None:
                    recording.calls.append(got)
    if not recording.calls:
        raise RecordingError(f"session {session_id} holds no model or MCP call with a stored body to replay")
    return recording


def _call(conn: sqlite3.Connection, row: sqlite3.Row, kind: str, number: int, shaper: Shaper,
          table: str, chunks: list[tuple[int, int]] | None) -> Call | None:  # fmt: skip
    request = read_body(conn, row["id"], "request", table)
    response = read_body(conn, row["id"], "response", table)
    if request is None or response is None:
        return None
    method = "GET" if kind == "ws" else (row["method"] or "POST")
    endpoint = Endpoint(kind, method, row["host"] or "", (row["path"] or "").split("?", 1)[0])
    headers = _headers(row["response_headers"])
    status = row["status_code"] or row["net_status"] or 200
    delivered = read_body(conn, row["id"], "delivered", table)
    if delivered is not None:  # the agent got another answer (a denied tool call replaced): replay that one
        response, chunks = delivered, None  # cut at its framing units (a WebSocket's: one message a line)
    answer = Answer(status, headers, response[0], bool(row["stream"]), chunks, websocket=kind == "ws")
    recorded = Recorded(number, endpoint, shaper.shape(request[0]))
    columns = row.keys()
    protocol = row["protocol"] if "protocol" in columns else "mcp"
    model = row["model"] if "model" in columns else None
    return Call(recorded, answer, protocol, model)


def _keys(host: str | None, headers: str | None, query: str | None) -> set[str]:
    """The API-key variable a recorded call's key came from, judged by where it carried it."""
    try:
        names = {str(k).lower() for k in json.loads(headers)} if headers else set()
    except (ValueError, TypeError):
        names = set()
    host = host or ""
    if "anthropic" in host and "x-api-key" in names:
        return {"ANTHROPIC_API_KEY"}
    if "openai" in host and "authorization" in names:
        return {"OPENAI_API_KEY"}
    if "googleapis" in host and ("x-goog-api-key" in names or "key=" in (query or "")):
        return {"GEMINI_API_KEY"}
    return set()


def _headers(stored: str | None) -> list[tuple[str, str]]:
    try:
        value = json.loads(stored) if stored else {}
    except ValueError:
        return []
    items = value.items() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [(str(k), str(v)) for k, v in items if str(k).lower() not in DROPPED_HEADERS]


def _timings(conn: sqlite3.Connection) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for call_id, chunks in conn.execute("SELECT model_call_id, chunks FROM response_chunks"):
        try:
            out[call_id] = [(int(end), int(ms)) for end, ms in json.loads(chunks)]
        except (ValueError, TypeError):
            continue
    return out
