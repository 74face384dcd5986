"""The recorded traffic `capsem policy test` evaluates: sessions picked from main.db, each read from
its session.db over one read-only connection, only the columns the policy and budgets need.

Rows of upstream connections that failed before any request existed (method CONNECT: no policy
hook ever saw them) are not requests. A session that cannot match is not opened (main.db's
rollup says it made no request, MCP call or model call that a rule or budget could see). An MCP
call's arguments are read from its stored request body (`event_body_blobs`, whole and scrubbed)
only when a rule that needs them reaches them (`LazyArguments`); the `request_preview` column
stands in for a body that was not stored. The tool calls of the models' answers (`tool_calls`,
their arguments as stored, up to `capture.content_max_bytes`) are read when a tool rule exists,
with the process that made the call and the session's agent (its command in main.db). A session
that cannot be read is reported, not fatal.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from addons.mcp import parse_request
from addons.proxy.policy import Policy, agent_name, tool_arguments
from addons.reservation import Bound, bound, ws_bound
from assembler.backtest import Backtest, McpCall, ModelCall, Report, Request, Session, ToolCall
from assembler.sessiondb import (
    MainDbMissing,
    SessionDbError,
    SessionNotFound,
    db_file,
    open_main,
    open_session,
    resolve,
)
from capsem.settings import Budget
from capsem.store.bodies import read_body


class NothingToTest(LookupError):
    """No session to test (an empty main.db, or none since the day asked)."""


@dataclass(frozen=True, slots=True)
class Needs:
    """What the policy and budgets read: requests, MCP tools/calls (and their arguments), model calls."""

    requests: bool
    mcp: bool
    arguments: bool
    model_calls: bool
    mcp_only: bool
    """Every request rule names an MCP field: only requests that carried a tools/call can match."""
    tools: bool = False
    """A tool rule exists: the tool calls of the models' answers are decided."""
    tool_names: bool = False
    """A request rule names an MCP tool: count the tools the model called, for the unmatched hint."""

    @classmethod
    def of(cls, policy: Policy, budgets: tuple[Budget, ...]) -> Needs:
        requests = [r for r in policy.rules if not r.is_tool_rule]
        return cls(bool(requests), policy.has_mcp_rules, policy.needs_arguments, bool(budgets),
                   bool(requests) and all(r.needs_mcp for r in requests), policy.has_tool_rules,
                   any(r.mcp_tool is not None for r in requests))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Picked:
    sessions: list[str]
    skipped: int
    """Sessions left unopened: their rollup shows nothing a rule or budget could match."""
    missing: int
    """Sessions main.db lists whose database is gone (culled)."""


def pick(session_ids: tuple[str, ...], since: str | None, needs: Needs) -> Picked:
    """The sessions to test: those named (resolved by id or prefix), else every session in main.db
    created on or after `since` (a UTC day), oldest first.

    Raises:
        SessionNotFound: a named session has no database.
        NothingToTest: main.db is missing or holds no session (since `since`).
    """
    if session_ids:
        return Picked(list(dict.fromkeys(resolve(s) for s in session_ids)), 0, 0)
    try:
        with open_main() as main:
            rows = main.execute(
                "SELECT id, rolled_up_at, total_requests, total_mcp_calls, total_model_calls, total_tool_calls "
                "FROM sessions "
                "WHERE substr(created_at, 1, 10) >= ? ORDER BY created_at, id",
                (since or "",),
            ).fetchall()
    except MainDbMissing as exc:
        raise NothingToTest(f"{exc}: nothing to test") from None
    if not rows:
        raise NothingToTest(f"no session recorded since {since}" if since else "main.db holds no session yet")
    picked, skipped, missing = [], 0, 0
    for row in rows:
        if row["rolled_up_at"] is not None and not _can_match(row, needs):
            skipped += 1
        elif db_file(row["id"]) is None:
            missing += 1
        else:
            picked.append(row["id"])
    return Picked(picked, skipped, missing)


def _can_match(row: sqlite3.Row, needs: Needs) -> bool:
    requests = row["total_mcp_calls"] if needs.mcp_only else row["total_requests"]
    return bool((needs.requests and requests) or (needs.model_calls and row["total_model_calls"])
                or (needs.tools and row["total_tool_calls"]))  # fmt: skip


def run(backtest: Backtest, session_ids: list[str], needs: Needs,
        on_progress: Callable[[int, int], None] | None = None) -> Report:  # fmt: skip
    """Feed each session to `backtest` over one connection (closed before the next opens), with
    the arguments of the MCP calls among its findings kept for showing; the report."""
    for n, session_id in enumerate(session_ids, 1):
        try:
            with open_session(session_id) as conn:
                session = read_session(conn, session_id, needs, _agent(session_id) if needs.tools else None)
                before = len(backtest.findings)
                backtest.add(session)
                ids = [f.call.id for f in backtest.findings[before:] if f.call is not None]
                for call_id, text in arguments_text(conn, ids).items():
                    backtest.arguments[(session_id, call_id)] = text
        except (
            sqlite3.DatabaseError,
            SessionNotFound,
            SessionDbError,
        ) as exc:  # damaged, or culled meanwhile
            backtest.unreadable(session_id, str(exc))
        if on_progress:
            on_progress(n, len(session_ids))
    return backtest.report()


def _host_headers(value: str | None) -> tuple[str, ...]:
    """The recorded Host header(s): `request_headers` keeps it verbatim, a repeated one as a list."""
    if not value:
        return ()
    if value.startswith("["):
        try:
            listed = json.loads(value)
        except ValueError:
            return (value,)
        return tuple(v for v in listed if isinstance(v, str))
    return (value,)


def _agent(session_id: str) -> str | None:
    """The agent of a session: `agent_name` of its command in main.db (None: unknown)."""
    try:
        with open_main() as main:
            row = main.execute("SELECT command FROM sessions WHERE id = ?", (session_id,)).fetchone()
    except (MainDbMissing, sqlite3.Error):
        return None
    return agent_name(row["command"]) if row is not None else None


def read_tool_calls(conn: sqlite3.Connection, agent: str | None) -> tuple[ToolCall, ...]:
    """The tool calls of the models' answers (not the provider's own server tools, which no agent
    runs), each with the process that made its model call."""
    return tuple(
        ToolCall(r["id"], r["model_call_id"], r["timestamp"] or "", r["call_id"], r["tool_name"],
                 tool_arguments(r["arguments"]), agent, r["process_name"],
                 r["decision"], r["decision_rule"])
        for r in conn.execute(
            "SELECT t.id, t.model_call_id, t.timestamp, t.call_id, t.tool_name, t.arguments, t.decision, "
            "t.decision_rule, m.process_name FROM tool_calls t LEFT JOIN model_calls m ON m.id = t.model_call_id "
            "WHERE t.origin != 'server' ORDER BY t.id"
        )
    )  # fmt: skip


def read_session(
    conn: sqlite3.Connection, session_id: str, needs: Needs, agent: str | None = None
) -> Session:
    """The requests (with their tools/calls), model calls and tool calls of one session.db."""
    calls: dict[int, list[McpCall]] = {}
    if needs.mcp:
        for row in conn.execute(
            "SELECT id, net_event_id, server_name, endpoint, tool_name, request_id FROM mcp_calls "
            "WHERE method = 'tools/call' AND tool_name IS NOT NULL AND net_event_id IS NOT NULL ORDER BY id"
        ):
            servers = tuple(dict.fromkeys(s for s in (row["endpoint"], row["server_name"]) if s))
            arguments = LazyArguments(conn, row["id"], row["request_id"]) if needs.arguments else None
            calls.setdefault(row["net_event_id"], []).append(
                McpCall(row["id"], servers, row["tool_name"], arguments)
            )
    requests: list[Request] = []
    if needs.requests and (calls or not needs.mcp_only):
        where = f" AND id IN ({','.join(map(str, calls))})" if needs.mcp_only else ""
        requests = [
            Request(r["id"], r["timestamp"], r["domain"], r["port"] or 0, r["path"] or "", r["method"],
                    r["process_name"], r["pid"], r["decision"], tuple(calls.get(r["id"], ())),
                    _host_headers(r["host_header"]))
            for r in conn.execute(
                "SELECT id, timestamp, domain, port, path, method, process_name, pid, decision, "
                "CASE WHEN json_valid(request_headers) THEN json_extract(request_headers, '$.host') END "
                "AS host_header FROM net_events "
                f"WHERE method IS NOT NULL AND method != 'CONNECT'{where} ORDER BY id"
            )
        ]  # fmt: skip
    model_calls: list[ModelCall] = []
    if needs.model_calls:
        model_calls = [
            ModelCall(r["id"], r["net_event_id"], r["timestamp"], r["provider"], r["model"], r["host"] or "",
                      r["estimated_cost_usd"] or 0.0, call_tokens(conn, r["id"], r["protocol"]))
            for r in conn.execute("SELECT id, net_event_id, timestamp, provider, model, host, estimated_cost_usd, "
                                  "protocol FROM model_calls ORDER BY id")
        ]  # fmt: skip
    tools = read_tool_calls(conn, agent) if needs.tools else ()
    names: dict[str, int] = {}
    if needs.tool_names:
        names = dict(conn.execute("SELECT tool_name, COUNT(*) FROM tool_calls GROUP BY tool_name").fetchall())
    return Session(session_id, tuple(requests), tuple(model_calls), tools, names)


def call_tokens(conn: sqlite3.Connection, call_id: int, protocol: str | None) -> Bound | None:
    """The most model call `call_id` could use, from its stored request body, as the proxy bounds
    it (`addons/reservation.py`; the input by the body's size as sent); None when no body is stored."""
    try:
        found = read_body(conn, call_id, "request")
    except (sqlite3.Error, RuntimeError, ValueError):
        found = None
    if found is None or not protocol:
        return None
    body, blob = found
    ws = protocol == "openai_responses" and b'"response.create"' in body[:4096]
    tokens = ws_bound(body) if ws else bound(protocol, body)
    return replace(tokens, input_tokens=tokens.input_tokens - len(body) + max(len(body), blob["size"] or 0))


class LazyArguments(Mapping[str, Any]):
    """A tools/call's arguments, read from its stored request body when first looked at (while the
    session's connection is open: the evaluation runs before the next session is read)."""

    def __init__(self, conn: sqlite3.Connection, call_id: int, request_id: str | None) -> None:
        self._conn, self._id, self._request_id = conn, call_id, request_id
        self._value: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        if self._value is None:
            self._value = call_arguments(self._conn, self._id, self._request_id) or {}
        return self._value

    def __getitem__(self, key: str) -> Any:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


def call_arguments(conn: sqlite3.Connection, call_id: int, request_id: str | None) -> dict[str, Any] | None:
    """The `arguments` of MCP call `call_id`: from its stored request body (the message with its
    JSON-RPC id, in a batch), else from its `request_preview` (None when neither holds them)."""
    try:
        found = read_body(conn, call_id, "request", source_table="mcp_calls")
    except (sqlite3.Error, RuntimeError, ValueError):
        found = None
    messages = parse_request(found[0]) if found else None
    for message in messages or []:
        if message.method == "tools/call" and message.id == request_id and isinstance(message.params, dict):
            return _arguments(message.params)
    row = conn.execute("SELECT request_preview FROM mcp_calls WHERE id = ?", (call_id,)).fetchone()
    try:
        params = json.loads(row[0]) if row and row[0] else None
    except ValueError:
        return None
    return _arguments(params) if isinstance(params, dict) else None


def _arguments(params: dict[str, Any]) -> dict[str, Any] | None:
    arguments = params.get("arguments")
    return arguments if isinstance(arguments, dict) else None


def arguments_text(conn: sqlite3.Connection, call_ids: list[int]) -> dict[int, str]:
    """The arguments of these MCP calls as compact JSON, for showing (from `request_preview`,
    scrubbed like everything stored; the text as stored when it was cut short)."""
    out: dict[int, str] = {}
    for start in range(0, len(call_ids), 500):
        batch = call_ids[start : start + 500]
        marks = ",".join("?" * len(batch))
        for row in conn.execute(f"SELECT id, request_preview FROM mcp_calls WHERE id IN ({marks})", batch):
            text = row["request_preview"] or ""
            try:
                params = json.loads(text)
            except ValueError:
                out[row["id"]] = text
                continue
            arguments = params.get("arguments") if isinstance(params, dict) else None
            out[row["id"]] = (
                json.dumps(arguments, ensure_ascii=False, separators=(",", ":")) if arguments else "{}"
            )
    return out


__all__ = ["LazyArguments", "Needs", "NothingToTest", "Picked", "SessionNotFound", "arguments_text",
           "call_arguments", "pick", "read_session", "run"]  # fmt: skip
