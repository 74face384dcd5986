"""The call page: its items (new ones marked), tools with their results, headers, a diff."""

from __future__ import annotations

import difflib
import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from addons.items import call_items
from assembler.view.queries.common import check_session_db
from assembler.view.queries.session import CallNode, ToolCall, _breakdowns, _node, _session_span, _tools_for


@dataclass(frozen=True)
class Item:
    index: int
    kind: str
    role: str | None
    tool_name: str | None
    call_id: str | None
    text: str
    new: bool
    link: int | None = None
    """For a tool result: the model call that asked for the tool; for a tool call: the one that
    carried its result back."""


@dataclass(frozen=True)
class DiffLine:
    op: str
    """added | removed | same"""
    item: Item


@dataclass
class CallView:
    session_id: str
    call: dict[str, Any]
    node: CallNode
    inputs: list[Item]
    outputs: list[Item]
    tools: list[ToolCall]
    request_headers: dict[str, Any]
    response_headers: dict[str, Any]
    previous: int | None
    next: int | None
    diff: list[DiffLine]
    diff_base: int | None
    has_request: bool
    has_response: bool
    breakdown: list[dict[str, Any]]
    subagent_of: int | None
    cache_break: dict[str, Any] | None = None
    """Why this call read less from the prompt cache than its conversation had cached (`cache_breaks`)."""


def readable(kind: str, content: str) -> str:
    """An item's stored JSON as a person reads it: its text where it has one, else indented JSON."""
    try:
        value = json.loads(content)
    except ValueError:
        return content
    text = _text_of(value)
    if text is not None:
        return text
    return json.dumps(value, indent=2, ensure_ascii=False)


def _text_of(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [_text_of(v) for v in value]
        return "\n\n".join(p for p in parts if p) if all(p is not None for p in parts) else None
    if not isinstance(value, dict):
        return None
    kind = value.get("type")
    if kind in ("text", "input_text", "output_text") and isinstance(value.get("text"), str):
        return value["text"]
    if kind == "thinking" and isinstance(value.get("thinking"), str):
        return "(thinking) " + value["thinking"]
    if kind == "redacted_thinking":
        return "(redacted thinking)"
    if kind == "tool_use":
        return f"{value.get('name')}({json.dumps(value.get('input'), ensure_ascii=False)})"
    if kind == "function" and isinstance(value.get("function"), dict):  # a Chat Completions tool call
        return f"{value['function'].get('name')}({value['function'].get('arguments')})"
    if kind == "tool_result" or "tool_call_id" in value:
        inner = _text_of(value.get("content")) if value.get("content") is not None else ""
        return inner if inner is not None else json.dumps(value.get("content"), ensure_ascii=False)
    if "tool_calls" in value and isinstance(value["tool_calls"], list):
        calls = [f"{(c.get('function') or {}).get('name')}({(c.get('function') or {}).get('arguments')})"
                 for c in value["tool_calls"] if isinstance(c, dict)]  # fmt: skip
        return "\n".join(calls)
    if set(value) >= {"name", "arguments"} and "type" not in value:
        return f"{value['name']}({value['arguments']})"
    if kind is None:  # a Gemini part: text, thought, function call or response
        gemini = _gemini_part(value)
        if gemini is not None:
            return gemini
    if "parts" in value and isinstance(value["parts"], list):
        return _text_of(value["parts"])
    if "content" in value and set(value) <= {"content", "role", "name"}:
        return _text_of(value["content"])
    return None


def _gemini_part(part: dict[str, Any]) -> str | None:
    """A Gemini part as text: its text (a thought marked as thinking), a function call as
    `name(args)`, a function response as its one text value (`{"output": "…"}`) or its JSON."""
    if isinstance(part.get("text"), str):
        return ("(thinking) " if part.get("thought") is True else "") + part["text"]
    call = part.get("functionCall")
    if isinstance(call, dict):
        return f"{call.get('name')}({json.dumps(call.get('args', {}), ensure_ascii=False)})"
    answer = part.get("functionResponse")
    if isinstance(answer, dict):
        response = answer.get("response")
        values = list(response.values()) if isinstance(response, dict) else []
        if len(values) == 1 and isinstance(values[0], str):
            return values[0]
        return json.dumps(response, ensure_ascii=False)
    return None


def item_content(conn: sqlite3.Connection, content_hash: str) -> str:
    found = conn.execute("SELECT content FROM item_contents WHERE hash = ?", (content_hash,)).fetchone()
    return found[0] if found else ""


def _items(
    conn: sqlite3.Connection, found: set[str], call_id: int
) -> tuple[list[Item], list[Item], list[str]]:
    """A call's input items (all of them, in order, the new ones marked) and output items."""
    if "model_items" not in found:
        return [], [], []
    rows = [dict(r) for r in conn.execute("SELECT * FROM model_items WHERE model_call_id = ? ORDER BY direction, "
                                          "item_index", (call_id,))]  # fmt: skip
    hashes = call_items(conn, call_id) if "model_item_lists" in found else []
    new_at = {r["item_index"]: r for r in rows if r["direction"] == "input"}
    meta = _item_meta(conn, hashes, new_at)
    inputs = [
        Item(i, m["kind"], m.get("role"), m.get("tool_name"), m.get("call_id"),
             readable(m["kind"], item_content(conn, h)), i in new_at)
        for i, (h, m) in enumerate(zip(hashes, meta, strict=True))
    ]  # fmt: skip
    outputs = [
        Item(r["item_index"], r["kind"], r.get("role"), r.get("tool_name"), r.get("call_id"),
             readable(r["kind"], item_content(conn, r["content_hash"])), False)
        for r in rows if r["direction"] == "output"
    ]  # fmt: skip
    return inputs, outputs, hashes


def _item_meta(conn: sqlite3.Connection, hashes: list[str], new_at: dict[int, dict]) -> list[dict]:
    """Kind, role, tool name of each input item: from this call's own row when it is new, else from
    the row of the call that first sent it."""
    wanted = {h for i, h in enumerate(hashes) if i not in new_at}
    first: dict[str, dict] = {}
    if (
        wanted
    ):  # one pass (model_items has no index on content_hash; a lookup per item would scan it each time)
        for r in conn.execute("SELECT content_hash, kind, role, tool_name, call_id FROM model_items "
                              "WHERE direction = 'input' ORDER BY id"):  # fmt: skip
            if r[0] in wanted and r[0] not in first:
                first[r[0]] = {"kind": r[1], "role": r[2], "tool_name": r[3], "call_id": r[4]}
    out = []
    for i, h in enumerate(hashes):
        if i in new_at:
            out.append(new_at[i])
        elif h in first:
            out.append(first[h])
        else:
            row = conn.execute("SELECT kind FROM item_contents WHERE hash = ?", (h,)).fetchone()
            out.append({"kind": row[0] if row else "?"})
    return out


def _headers(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"(unreadable)": text}
    return value if isinstance(value, dict) else {}


def call_view(conn: sqlite3.Connection, session_id: str, call_id: int) -> CallView | None:
    """One model call as the call page shows it, or None when the session has no such call."""
    found = check_session_db(conn)
    row = conn.execute("SELECT * FROM model_calls WHERE id = ?", (call_id,)).fetchone()
    if row is None:
        return None
    call = dict(row)
    start, _span = _session_span(conn, found)
    cum = conn.execute("SELECT COALESCE(SUM(estimated_cost_usd), 0), COALESCE(SUM(COALESCE(input_tokens, 0) + "
                       "COALESCE(output_tokens, 0)), 0) FROM model_calls WHERE id <= ?", (call_id,)).fetchone()  # fmt: skip
    node = _node(call, start, cum[0], cum[1])
    node.breakdown = _breakdowns(conn, found, [call_id]).get(call_id, [])
    tools = _tools_for(conn, found, [call_id]).get(call_id, [])
    inputs, outputs, hashes = _items(conn, found, call_id)
    inputs = [_link_input(conn, found, it, call_id) for it in inputs]
    outputs = [_link_output(it, tools) for it in outputs]
    base = None
    if "model_item_lists" in found:
        got = conn.execute(
            "SELECT base_call_id FROM model_item_lists WHERE model_call_id = ?", (call_id,)
        ).fetchone()
        base = got[0] if got else None
    diff = _diff(conn, found, base, inputs, hashes) if base is not None else []
    headers = ({}, {})
    if call.get("net_event_id") and "net_events" in found:
        net = conn.execute("SELECT request_headers, response_headers FROM net_events WHERE id = ?",
                           (call["net_event_id"],)).fetchone()  # fmt: skip
        if net is not None:
            headers = (_headers(net[0]), _headers(net[1]))
    bodies: set[str] = set()
    if "event_body_blobs" in found:
        sql = "SELECT direction FROM event_body_blobs WHERE source_table = 'model_calls' AND row_id = ?"
        bodies = {r[0] for r in conn.execute(sql, (call_id,))}
    prev = conn.execute("SELECT MAX(id) FROM model_calls WHERE id < ?", (call_id,)).fetchone()[0]
    nxt = conn.execute("SELECT MIN(id) FROM model_calls WHERE id > ?", (call_id,)).fetchone()[0]
    breakdown = []
    if "input_breakdown" in found:
        breakdown = [dict(r) for r in conn.execute(
            "SELECT part, tokens, cache_read_tokens, cache_write_tokens, cost_usd, estimated FROM input_breakdown "
            "WHERE model_call_id = ? ORDER BY id", (call_id,))]  # fmt: skip
    parent = None
    if call.get("parent_tool_call_id"):
        got = conn.execute(
            "SELECT model_call_id FROM tool_calls WHERE id = ?", (call["parent_tool_call_id"],)
        ).fetchone()
        parent = got[0] if got else None
    broke = None
    if "cache_breaks" in found:
        got = conn.execute("SELECT * FROM cache_breaks WHERE model_call_id = ?", (call_id,)).fetchone()
        broke = dict(got) if got else None
    return CallView(session_id, call, node, inputs, outputs, tools, headers[0], headers[1], prev, nxt, diff, base,
                    "request" in bodies, "response" in bodies, breakdown, parent, broke)  # fmt: skip


def _link_input(conn: sqlite3.Connection, found: set[str], item: Item, call_id: int) -> Item:
    """A tool result in the history links to the call that asked for the tool."""
    if item.kind != "tool_result" or not item.call_id or "tool_calls" not in found:
        return item
    got = conn.execute("SELECT model_call_id FROM tool_calls WHERE call_id = ? AND model_call_id < ? "
                       "ORDER BY id DESC LIMIT 1", (item.call_id, call_id)).fetchone()  # fmt: skip
    return item if got is None else Item(**{**item.__dict__, "link": got[0]})


def _link_output(item: Item, tools: list[ToolCall]) -> Item:
    """A tool call the model made links to the call that carried its result back."""
    for tool in tools:
        if item.kind == "tool_call" and tool.call_id == item.call_id and tool.result_call:
            return Item(**{**item.__dict__, "link": tool.result_call})
    return item


def _diff(
    conn: sqlite3.Connection, found: set[str], base: int, inputs: list[Item], hashes: list[str]
) -> list[DiffLine]:
    """This call's input items against those of the previous call of its conversation."""
    before = call_items(conn, base)
    matcher = difflib.SequenceMatcher(a=before, b=hashes, autojunk=False)
    out: list[DiffLine] = []
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            if a1 - a0:
                out.append(
                    DiffLine("same", Item(b0, "…", None, None, None, f"{a1 - a0} items unchanged", False))
                )
            continue
        for i in range(a0, a1):
            kind = conn.execute("SELECT kind FROM item_contents WHERE hash = ?", (before[i],)).fetchone()
            out.append(DiffLine("removed", Item(i, kind[0] if kind else "?", None, None, None,
                                                readable("", item_content(conn, before[i])), False)))  # fmt: skip
        out.extend(DiffLine("added", inputs[i]) for i in range(b0, b1) if i < len(inputs))
    return out
