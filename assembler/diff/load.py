"""A session read for comparing: each model call with its system prompt, tool definitions, new
input items, answer, tool calls and their results, usage and cost, ids and timings kept apart.

Items are read back as the call page reads them (`model_item_lists`, `item_contents`), as text a
person reads, with the ids a run mints (`id`, `tool_use_id`, `tool_call_id`, `call_id`,
thinking `signature`..., and the checksum of Claude Code's billing line) left out: two runs of
the same agent differ in those by design.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

from addons.items import call_items
from addons.toolhold.base import denials_in
from assembler.diff.delivered import delivered
from assembler.sessiondb import MainDbMissing, open_main
from assembler.view.queries.call import item_content, readable
from assembler.view.queries.common import check_session_db
from assembler.view.queries.session import _node, _tools_for
from capsem.outcomes import ERRORS_SQL

ID_KEYS = frozenset({"id", "tool_use_id", "tool_call_id", "call_id", "item_id", "response_id",
                     "previous_response_id", "signature", "encrypted_content"})  # fmt: skip
"""Keys of an item's structure whose values differ on every run (ids minted by the provider or the
agent, opaque signatures): left out of what is compared."""
_ARGUMENT_KEYS = frozenset(
    {"input", "arguments", "args", "parameters", "input_schema", "schema", "properties"}
)
"""Keys whose values are the tool's own data: an `id` inside them is content, kept."""
BILLING_LINE = re.compile(
    r"(x-anthropic-billing-header:[^\n]*?)(?:\b(cc_version=\d+\.\d+\.\d+)\.[0-9A-Za-z]+|\b(cch=)[0-9A-Za-z]+)"
)
"""Claude Code's first system block carries values that differ on every request (`x-anthropic-
billing-header: cc_version=2.0.50.c86; cch=3f66f;`: the suffix of its version and the checksum):
ids, not a change of the prompt. The version itself (2.0.50) counts."""


def mask_billing(text: str) -> str:
    """`text` with the per-request values of Claude Code's billing line shown as `…`."""
    if "x-anthropic-billing-header" not in text:
        return text
    while True:  # the line's two values, one substitution each
        masked = BILLING_LINE.sub(lambda m: m[1] + (f"{m[2]}.…" if m[2] else f"{m[3]}…"), text)
        if masked == text:
            return text
        text = masked


CONVERSATION = ("message", "tool_call", "tool_result")
"""Input item kinds compared as "new items" (system prompt and tools are compared on their own)."""


@dataclass(frozen=True)
class Piece:
    """One item as compared: its kind, role and readable text (ids left out)."""

    kind: str
    role: str | None
    text: str


@dataclass(frozen=True)
class ToolDef:
    name: str
    description: str
    schema: str
    """Everything else of the definition (its input schema...), as indented JSON."""


@dataclass(frozen=True)
class ToolUse:
    """A tool call the model made and the result the agent sent back."""

    name: str
    arguments: str
    result: str | None
    is_error: bool
    call_id: str
    """Minted by the provider: shown, never compared."""


@dataclass(frozen=True)
class Call:
    id: int
    turn: int
    """The ordinal of its turn in the session (1, 2...; 0 when the call has no turn)."""
    provider: str
    endpoint: str
    """The request path, a model name in it replaced by `*`."""
    model: str
    status: int | None
    error: str | None
    stop_reason: str | None
    input_tokens: int
    output_tokens: int
    cache_read: int
    cache_write: int
    cost: float | None
    """In USD; None when the call had tokens and its model has no known price (unpriced)."""
    timestamp: str
    duration_ms: int
    ask: str
    """The text of the user message that started its turn (the last one the call or an earlier call
    of its turn sent)."""
    system: str | None
    tools: tuple[ToolDef, ...]
    new_items: tuple[Piece, ...]
    answer: tuple[Piece, ...]
    """Its output items but tool calls: thinking, text."""
    tool_uses: tuple[ToolUse, ...]
    delivered: bool = False
    """Its answer was rewritten (a tool call denied): `answer`, `stop_reason` and `tool_uses` are
    what the agent received, as a replay of the session is answered."""
    denied: tuple[str, ...] = ()
    """The tool calls the agent got capsem's denial text for (`Bash denied by rule no-rm-rf`), read
    from the answer: the same in a session and its replay. Shown, not compared (the answer is)."""


@dataclass(frozen=True)
class Run:
    session_id: str
    calls: tuple[Call, ...]
    workspace: str | None = None
    """Where it ran (`sessions.workspace`): read as `<workspace>` when compared."""
    errors: int = 0
    """Its errors as the run summary and `inspect-session` count them (`capsem.outcomes`): failed
    model calls, other requests that failed, tool results marked as errors."""


def strip_ids(value: Any) -> Any:
    """`value` without the `ID_KEYS` of its structure (a tool's arguments and schema kept whole)."""
    if isinstance(value, dict):
        return {k: (v if k in _ARGUMENT_KEYS else strip_ids(v)) for k, v in value.items() if k not in ID_KEYS}
    if isinstance(value, list):
        return [strip_ids(v) for v in value]
    return value


def piece_text(kind: str, content: str) -> str:
    """An item's stored JSON as readable text, ids left out."""
    try:
        value = json.loads(content)
    except ValueError:
        return content
    return mask_billing(readable(kind, json.dumps(strip_ids(value), ensure_ascii=False)))


def tool_def(content: str, fallback: str | None) -> ToolDef:
    """A tool definition's name, description and the rest (Anthropic, OpenAI Chat and Responses,
    Gemini declarations)."""
    try:
        value = json.loads(content)
    except ValueError:
        return ToolDef(fallback or "?", "", content)
    if not isinstance(value, dict):
        return ToolDef(fallback or "?", "", json.dumps(value, indent=2, ensure_ascii=False))
    body = value.get("function") if isinstance(value.get("function"), dict) else value
    rest = {k: v for k, v in body.items() if k not in ("name", "description")}
    if body is not value:
        rest = {**{k: v for k, v in value.items() if k != "function"}, **rest}
    name = body.get("name") if isinstance(body.get("name"), str) else fallback
    description = body.get("description") if isinstance(body.get("description"), str) else ""
    return ToolDef(name or "?", description, json.dumps(rest, indent=2, sort_keys=True, ensure_ascii=False))


_MODEL_IN_PATH = re.compile(r"(/models/)[^/:]+")


def load_session(
    open_session: Callable[[str], AbstractContextManager[sqlite3.Connection]], session_id: str
) -> Run:
    """A session's calls (`open_session(id)`: a read-only connection) and its workspace from main.db."""
    with open_session(session_id) as conn:
        run = load_run(conn, session_id)
    try:
        with open_main() as main:
            row = main.execute("SELECT workspace FROM sessions WHERE id = ?", (session_id,)).fetchone()
    except (MainDbMissing, sqlite3.Error):  # an older main.db (no workspace column) or none
        row = None
    return replace(run, workspace=row[0] if row else None)


def load_run(conn: sqlite3.Connection, session_id: str) -> Run:
    """Every model call of a session.db in order, as `compare` needs it.

    Raises:
        IncompleteDatabase: the database has no `model_calls`.
    """
    found = check_session_db(conn)
    rows = [dict(r) for r in conn.execute("SELECT * FROM model_calls ORDER BY id")]
    tools = _tools_for(conn, found, [r["id"] for r in rows])
    items = _Items(conn, found)
    turns: dict[str, int] = {}
    asks: dict[int, str] = {}
    calls = []
    for row in rows:
        node = _node(row, None, 0.0, 0)
        turn = turns.setdefault(row["turn_id"], len(turns) + 1) if row.get("turn_id") else 0
        new_items = items.new(row["id"], "input")
        said = [p.text for p in new_items if p.kind == "message" and p.role == "user"]
        ask = asks[turn] = said[-1] if said else asks.get(turn, "")
        uses = tuple(
            ToolUse(t.name, _arguments(t.arguments), t.result, t.result_error, t.call_id)
            for t in tools.get(row["id"], [])
        )
        answer, stop_reason = items.new(row["id"], "output") or _plain_answer(row), row.get("stop_reason")
        got = delivered(conn, row)
        if got is not None:  # compared as the agent received it (a replay answers with it)
            answer = tuple(Piece(i.kind, i.role, piece_text(i.kind, i.content)) for i in got.items
                           if i.kind != "tool_call")  # fmt: skip
            uses, stop_reason = tuple(u for u in uses if u.call_id in got.call_ids), got.stop_reason
        denied = tuple(f"{name} denied by rule {rule}" for p in answer for name, rule in denials_in(p.text))
        calls.append(Call(
            id=node.id, turn=turn, provider=node.provider, endpoint=_MODEL_IN_PATH.sub(r"\1*", row.get("path") or ""),
            model=node.model, status=node.status_code, error=node.error, stop_reason=stop_reason,
            input_tokens=node.input_tokens, output_tokens=node.output_tokens, cache_read=node.cache_read,
            cache_write=node.cache_write, cost=None if node.unpriced else node.cost, timestamp=node.timestamp,
            duration_ms=node.duration_ms, ask=ask, system=items.system(row), tools=items.tools(row), new_items=new_items,
            answer=answer, tool_uses=uses, delivered=got is not None, denied=denied,
        ))  # fmt: skip
    return Run(session_id, tuple(calls), errors=_errors(conn, calls))


def _errors(conn: sqlite3.Connection, calls: list[Call]) -> int:
    """The session's errors (`ERRORS_SQL`); its failed model calls when a table is missing."""
    try:
        return int(conn.execute(f"SELECT {ERRORS_SQL}").fetchone()[0])
    except sqlite3.OperationalError:  # a session.db without net_events or tool_responses
        return sum(1 for c in calls if c.error)


def _arguments(text: str) -> str:
    """Tool arguments as compact JSON with sorted keys (the same arguments compare equal however
    they were spaced), else as recorded."""
    try:
        return json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False)
    except ValueError:
        return text


def _plain_answer(row: dict) -> tuple[Piece, ...]:
    """A call recorded without items: its answer text."""
    text = row.get("text_content")
    return (Piece("text", "assistant", text),) if text else ()


class _Items:
    """Reads a session's items, each content once (a session's calls share most of theirs)."""

    def __init__(self, conn: sqlite3.Connection, found: set[str]) -> None:
        self.conn = conn
        self.has_items = "model_items" in found and "item_contents" in found
        self.has_lists = "model_item_lists" in found
        self._tools: dict[str, tuple[ToolDef, ...]] = {}
        self._text: dict[str, str] = {}

    def content(self, content_hash: str) -> str:
        if content_hash not in self._text:
            self._text[content_hash] = item_content(self.conn, content_hash)
        return self._text[content_hash]

    def system(self, row: dict) -> str | None:
        if self.has_items and row.get("system_hash"):
            return piece_text("system", self.content(row["system_hash"]))
        return row.get("system_prompt_preview") or None

    def tools(self, row: dict) -> tuple[ToolDef, ...]:
        key = row.get("tools_hash")
        if not key or not self.has_lists:
            return ()
        if key not in self._tools:
            hashes = call_items(self.conn, row["id"])
            marks = ", ".join("?" * len(hashes))
            kinds = dict(
                self.conn.execute(f"SELECT hash, kind FROM item_contents WHERE hash IN ({marks})", hashes)
            )
            names = dict(self.conn.execute("SELECT content_hash, tool_name FROM model_items WHERE kind = "
                                           "'tool_definition' AND model_call_id = ?", (row["id"],)))  # fmt: skip
            self._tools[key] = tuple(
                tool_def(self.content(h), names.get(h)) for h in hashes if kinds.get(h) == "tool_definition"
            )
        return self._tools[key]

    def new(self, call_id: int, direction: str) -> tuple[Piece, ...]:
        """The call's new input items (conversation only) or its output items (but its tool calls,
        compared with their results as `Call.tool_uses`)."""
        if not self.has_items:
            return ()
        rows = self.conn.execute("SELECT kind, role, content_hash FROM model_items WHERE model_call_id = ? AND "
                                 "direction = ? ORDER BY item_index", (call_id, direction))  # fmt: skip
        return tuple(
            Piece(kind, role, piece_text(kind, self.content(h)))
            for kind, role, h in rows
            if (kind in CONVERSATION if direction == "input" else kind != "tool_call")
        )
