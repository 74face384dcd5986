"""Session snapshot JSON lines (weakincentives `dump_session`) into sessions, slice_items,
tool_invocations and prompt_events.

One line is one session of a tree: `version`, `created_at` (when the snapshot was taken),
`parent_id`, `children_ids`, `tags` (with `session_id`), `policies`, and `slices`: a **list**
of `{slice_type, item_type, items}` (the seed's sketch wrongly shows a mapping; both are read).
Each item carries its `__type__` (`module:QualName`). ToolInvoked, PromptRendered and
PromptExecuted items are also unpacked into their own tables; every item stays in slice_items.
The same event seen twice (a before/after pair of snapshots) is stored once.
"""

from __future__ import annotations

from typing import IO, Any

from assembler.bundle.sources.base import SourceContext, as_int, as_text, dumps, json_lines, normalize_ts

TOOL_INVOKED = "ToolInvoked"
PROMPT_RENDERED = "PromptRendered"
PROMPT_EXECUTED = "PromptExecuted"


def short_type(identifier: str) -> str:
    """`weakincentives.runtime.events:PromptRendered` -> `PromptRendered`."""
    return identifier.rsplit(":", 1)[-1].rsplit(".", 1)[-1]


def normalized_slices(slices: Any) -> list[dict[str, Any]] | None:
    """The slices as a list of {slice_type, item_type, items}, or None when unreadable."""
    if isinstance(slices, dict):  # the seed's sketch: {slice_type: [items]}
        return [{"slice_type": k, "item_type": k, "items": v} for k, v in slices.items()]
    if isinstance(slices, list) and all(isinstance(s, dict) for s in slices):
        return slices
    return None


def _usage(item: dict[str, Any]) -> dict[str, int | None]:
    usage = item.get("usage") if isinstance(item.get("usage"), dict) else {}
    return {k: as_int(usage.get(k)) for k in ("input_tokens", "output_tokens", "cached_tokens")}


def _tool_row(item: dict[str, Any], session_id: str, event_id: str) -> dict[str, Any]:
    result = item.get("result")
    if isinstance(result, dict) and "success" in result:
        success, message, value = bool(result.get("success")), result.get("message"), result.get("value")
    elif isinstance(result, dict):  # an SDK-native tool: the raw result dict
        success = not (result.get("is_error") or result.get("error"))
        message, value = as_text(result.get("error")), result
    else:
        success, message, value = result is not None, None, result
    return {
        "event_id": event_id, "session_id": session_id, "prompt_name": item.get("prompt_name") or "",
        "adapter": item.get("adapter") or "", "tool_name": item.get("name") or item.get("tool_name") or "",
        "call_id": as_text(item.get("call_id")), "timestamp": normalize_ts(item.get("created_at")) or "",
        "params": dumps(item.get("params")) or "{}", "result_success": int(success),
        "result_message": as_text(message), "result_value": dumps(value),
        "rendered_output": as_text(item.get("rendered_output")), **_usage(item),
    }  # fmt: skip


def _prompt_row(item: dict[str, Any], session_id: str, event_id: str, kind: str) -> dict[str, Any]:
    row: dict[str, Any] = {
        "event_id": event_id, "session_id": session_id, "prompt_ns": as_text(item.get("prompt_ns")),
        "prompt_key": as_text(item.get("prompt_key")), "prompt_name": as_text(item.get("prompt_name")),
        "adapter": item.get("adapter") or "", "timestamp": normalize_ts(item.get("created_at")) or "",
    }  # fmt: skip
    if kind == PROMPT_RENDERED:
        text = item.get("rendered_prompt")
        descriptor = item.get("descriptor") if isinstance(item.get("descriptor"), dict) else None
        tools = descriptor.get("tools") if descriptor and isinstance(descriptor.get("tools"), list) else None
        names = [t.get("name") for t in tools if isinstance(t, dict)] if tools is not None else None
        row |= {"event_type": "rendered", "rendered_text": as_text(text),
                "char_count": len(text) if isinstance(text, str) else None,
                "tool_count": len(tools) if tools is not None else None, "tool_names": dumps(names)}  # fmt: skip
    else:
        usage = _usage(item)
        total = (usage["input_tokens"] or 0) + (usage["output_tokens"] or 0) if any(usage.values()) else None
        row |= {"event_type": "executed", "result": dumps(item.get("result")), **usage, "total_tokens": total}
    return row


def import_snapshots(ctx: SourceContext, stream: IO[bytes]) -> None:
    """Every snapshot line of `stream`."""
    for number, obj, _text in json_lines(ctx, stream):
        if not isinstance(obj, dict):
            ctx.malformed(number, f"a JSON {type(obj).__name__}, not a snapshot object")
            continue
        slices = normalized_slices(obj.get("slices"))
        tags = obj.get("tags") if isinstance(obj.get("tags"), dict) else {}
        session_id = tags.get("session_id") or obj.get("session_id")
        if slices is None or not isinstance(session_id, str) or not session_id:
            ctx.malformed(number, "not a session snapshot (needs a `slices` list and tags.session_id)")
            continue
        _import_line(ctx, number, obj, slices, tags, session_id)


def _import_line(
    ctx: SourceContext,
    number: int,
    obj: dict[str, Any],
    slices: list[dict[str, Any]],
    tags: dict,
    session_id: str,
) -> None:
    parent = obj.get("parent_id") or tags.get("parent_session_id")
    envelope = {k: v for k, v in obj.items() if k != "slices"}
    envelope["slices"] = [{"slice_type": s.get("slice_type"), "item_type": s.get("item_type"),
                           "items": len(s.get("items") or [])} for s in slices]  # fmt: skip
    times = sorted(
        t for s in slices for i in (s.get("items") or []) if isinstance(i, dict)
        if (t := normalize_ts(i.get("created_at")))
    )  # fmt: skip
    ctx.ensure_session(
        session_id, times[0] if times else normalize_ts(obj.get("created_at")), "snapshot",
        parent_session_id=as_text(parent), tags=dumps(tags), ended_at=times[-1] if times else None,
        raw=dumps(envelope),
    )  # fmt: skip
    for s in slices:
        slice_type = str(s.get("slice_type") or s.get("item_type") or "")
        items = s.get("items")
        if not isinstance(items, list):
            ctx.malformed(number, f"slice {slice_type!r} has no items list")
            continue
        for index, item in enumerate(items):
            item_type = str(
                (item.get("__type__") if isinstance(item, dict) else None) or s.get("item_type") or ""
            )
            ctx.insert("slice_items", {"session_id": session_id, "slice_type": slice_type, "item_index": index,
                                       "item_type": item_type, "payload": dumps(item), "source_id": ctx.source_id,
                                       "line": number})  # fmt: skip
            if isinstance(item, dict):
                _import_event(ctx, number, index, item, short_type(item_type), session_id)


def _import_event(
    ctx: SourceContext, number: int, index: int, item: dict, kind: str, session_id: str
) -> None:
    if kind not in (TOOL_INVOKED, PROMPT_RENDERED, PROMPT_EXECUTED):
        return
    owner = (
        item.get("session_id")
        if isinstance(item.get("session_id"), str) and item["session_id"]
        else session_id
    )
    if owner != session_id:
        ctx.ensure_session(owner, normalize_ts(item.get("created_at")), "snapshot")
    event_id = as_text(item.get("event_id")) or f"{ctx.source_id}:{number}:{kind}:{index}"
    if kind == TOOL_INVOKED:
        row, table = _tool_row(item, owner, event_id), "tool_invocations"
    else:
        row, table = _prompt_row(item, owner, event_id, kind), "prompt_events"
    if not row["timestamp"]:
        ctx.warn(f"line {number}: {kind} {event_id} has no created_at")
    ctx.insert(table, {**row, "source_id": ctx.source_id, "raw": dumps(item)}, or_ignore=True, count=False)
