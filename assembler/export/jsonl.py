"""`capsem export jsonl`: one JSON record per model call, with its identity, usage, cost and items.

A record holds what a dataset or an eval needs of one call: who it is (`event_id`, session,
`trace_id`, `turn_id`, the tool call of the parent agent that started it), the model, the tokens
and their cost, its whole ordered input (system prompt, tool definitions, messages, tool calls and
results, each with `new` when it first appeared in this call), its output items, and the tool
calls it made with the result the agent sent back (the whole `tool_result` item when a later call
carried it, the stored preview otherwise).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

from addons.items import call_items
from assembler.export.select import has_table
from capsem.rollup import CALL_USAGE_SQL

_CALL_FIELDS = ("timestamp", "provider", "protocol", "host", "method", "path", "model", "response_model", "message_id",
                "stream", "status_code", "stop_reason", "complete", "duration_ms", "ttft_ms", "error_type",
                "error_message", "process_name", "pid", "items_count", "items_new")  # fmt: skip


def _json(text: str | None) -> Any:
    """Stored JSON text as a value (the text itself when it is not JSON)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


class Items:
    """A session's item contents and attributes, read once per hash."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._content: dict[str, Any] = {}
        self._attrs: dict[str, dict[str, Any]] = {}
        self.present = has_table(conn, "model_items")
        """False for a session recorded before conversation items were: its calls have no items."""
        sql = "SELECT content_hash, kind, role, call_id, tool_name FROM model_items ORDER BY id"
        for row in conn.execute(sql) if self.present else ():
            self._attrs.setdefault(
                row[0], {"kind": row[1], "role": row[2], "call_id": row[3], "tool_name": row[4]}
            )

    def content(self, digest: str) -> Any:
        """One item's content (parsed JSON; None when it is missing)."""
        if digest not in self._content:
            found = self.conn.execute(
                "SELECT content FROM item_contents WHERE hash = ?", (digest,)
            ).fetchone()
            self._content[digest] = _json(found[0]) if found else None
        return self._content[digest]

    def item(self, digest: str, index: int, *, with_content: bool = True, **extra: Any) -> dict[str, Any]:
        """One item as exported: where it is, what it is, and (unless left out) its content."""
        attrs = self._attrs.get(digest, {})
        out = {"index": index, "kind": attrs.get("kind"), "role": attrs.get("role"), "call_id": attrs.get("call_id"),
               "tool_name": attrs.get("tool_name"), **extra, "hash": digest}  # fmt: skip
        if with_content:
            out["content"] = self.content(digest)
        return out


def call_record(session_id: str, call: dict[str, Any], inputs: list[dict], outputs: list[dict], tools: list[dict],
                parent: dict[str, Any] | None) -> dict[str, Any]:  # fmt: skip
    """The record of one model call, from its `CALL_USAGE_SQL` row and its items and tool calls."""
    return {
        "session_id": session_id, "event_id": call.get("event_id"), "model_call_id": call["id"],
        "trace_id": call.get("trace_id"), "turn_id": call.get("turn_id"), "parent": parent,
        **{name: call.get(name) for name in _CALL_FIELDS},
        "usage": {"input_tokens": call.get("input_tokens"), "output_tokens": call.get("output_tokens"),
                  "cache_read_tokens": call.get("cache_read"), "cache_write_tokens": call.get("cache_write"),
                  "reasoning_tokens": call.get("reasoning"), "details": _json(call.get("usage_details"))},
        "cost": {"usd": call.get("estimated_cost_usd"), "input_usd": call.get("input_cost"),
                 "cache_write_usd": call.get("cache_write_cost"), "cache_read_usd": call.get("cache_read_cost"),
                 "output_usd": call.get("output_cost"), "reasoning_usd": call.get("reasoning_cost"),
                 "price_source": call.get("price_source"), "details": _json(call.get("cost_details"))},
        "input": inputs, "output": outputs, "tool_calls": tools,
    }  # fmt: skip


def _tool_call(
    row: dict[str, Any], result: dict[str, Any] | None, item: dict[str, Any] | None
) -> dict[str, Any]:
    out = {k: row.get(k) for k in ("event_id", "call_id", "tool_name", "origin", "transport", "status", "decision",
                                   "duration_ms", "mcp_call_id", "server_name", "complete")}  # fmt: skip
    out["arguments"] = _json(row.get("arguments"))
    if result is not None:
        out["result"] = {"event_id": result.get("event_id"), "model_call_id": result["model_call_id"],
                         "is_error": bool(result.get("is_error")), "bytes": result.get("content_bytes"),
                         "content": item["content"] if item else result.get("content_preview"),
                         "whole": item is not None}  # fmt: skip
    else:
        out["result"] = None
    return out


def _items(
    conn: sqlite3.Connection, items: Items, call_id: int, only_new: bool
) -> tuple[list[dict], list[dict]]:
    """A call's whole ordered input (each marked `new` when it first appeared here; with `only_new`,
    the others without their content) and its output."""
    fresh = {row[0] for row in conn.execute(
        "SELECT item_index FROM model_items WHERE model_call_id = ? AND direction = 'input'", (call_id,))}  # fmt: skip
    inputs = [items.item(h, i, new=i in fresh, with_content=not only_new or i in fresh)
              for i, h in enumerate(call_items(conn, call_id))]  # fmt: skip
    outputs = [items.item(row[1], row[0]) for row in conn.execute(
        "SELECT item_index, content_hash FROM model_items WHERE model_call_id = ? AND direction = 'output' "
        "ORDER BY item_index", (call_id,))]  # fmt: skip
    return inputs, outputs


def records(conn: sqlite3.Connection, session_id: str, only_new: bool = False) -> Iterator[dict[str, Any]]:
    """The session's model calls as records, in order (`only_new`: an input item's content only in
    the record of the call that first sent it; later records name it by index, kind and hash)."""
    items = Items(conn)
    if not items.present:
        result_items: dict[str, str] = {}
    else:
        sql = "SELECT call_id, content_hash FROM model_items WHERE kind = 'tool_result' ORDER BY id DESC"
        result_items = {
            r[0]: r[1] for r in conn.execute(sql) if r[0] is not None
        }  # newest first: the first wins
    results = {r["call_id"]: dict(r) for r in conn.execute("SELECT * FROM tool_responses ORDER BY id DESC")}
    tool_rows: dict[int, list[dict]] = {}
    by_id: dict[int, dict] = {}
    for r in conn.execute("SELECT * FROM tool_calls ORDER BY model_call_id, call_index, id"):
        tool_rows.setdefault(r["model_call_id"], []).append(dict(r))
        by_id[r["id"]] = dict(r)
    for r in conn.execute(CALL_USAGE_SQL + " ORDER BY id"):
        call = dict(r)
        inputs, outputs = _items(conn, items, call["id"], only_new) if items.present else ([], [])
        tools = []
        for row in tool_rows.get(call["id"], []):
            digest = result_items.get(row["call_id"])
            item = items.item(digest, 0) if digest else None
            tools.append(_tool_call(row, results.get(row["call_id"]), item))
        parent = None
        if call.get("parent_tool_call_id") is not None:
            spawn = by_id.get(call["parent_tool_call_id"], {})
            parent = {"tool_call_id": call["parent_tool_call_id"], "tool_call_event_id": spawn.get("event_id"),
                      "model_call_id": spawn.get("model_call_id"), "tool_name": spawn.get("tool_name")}  # fmt: skip
        yield call_record(session_id, call, inputs, outputs, tools, parent)


def count(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT COUNT(*) FROM model_calls").fetchone()[0]
