"""Conversation items: what a model call was given and what it gave back, item by item.

A request is split into its items in order: the system instructions, each tool definition, each
message, and each tool call the model made earlier and each tool result, one item apiece even when
one message carries several (parallel calls pair with their results by call id; the message's
other blocks stay one `message` item). An answer gives output items: its thinking, its text,
each tool call. Every item's content (normalized JSON,
Anthropic's moving `cache_control` markers left out) is stored once per session
(`item_contents`, by hash); a call records which of its items are new since the previous call
of its conversation (`model_items` rows: new input items and the outputs), and its whole list
compactly (`model_item_lists`: the leading items of an earlier call plus the rest, as bodies
are). `model_calls.system_hash` and `tools_hash` name the exact system prompt and tool surface
of each call.

Which earlier call a request continues (its conversation) is `addons/conversations.py`'s.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgspec

from addons.records import ResponseSummary
from addons.responses_calls import CALL_TYPES, RESULT_TYPES, call_name
from capsem.markers import content_hex

_ENCODE = msgspec.json.Encoder(order="sorted")


@dataclass(frozen=True, slots=True)
class Item:
    kind: str
    """system | tool_definition | message | tool_call | tool_result (inputs); thinking | text | tool_call (outputs)."""
    content: str
    """Normalized JSON of the item (keys sorted, `cache_control` left out)."""
    hash: str
    role: str | None = None
    call_id: str | None = None
    tool_name: str | None = None


def _strip(value: Any) -> Any:
    """`value` without `cache_control` keys (Claude Code moves them every turn; they are no content)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def item(kind: str, value: Any, *, role: str | None = None, call_id: str | None = None,
         tool_name: str | None = None) -> Item:  # fmt: skip
    raw = _ENCODE.encode(_strip(value))
    try:
        content = raw.decode("utf-8")  # then `raw` is its UTF-8 as it is: hashed without re-encoding
    except UnicodeDecodeError:  # (a lone surrogate, written as it came)
        content = raw.decode("utf-8", "replace")
        raw = content.encode("utf-8", "surrogatepass")
    digest = content_hex(kind.encode() + b"\0" + raw, 32)  # keyed: a short secret stays unguessable
    return Item(kind, content, digest, role, call_id, tool_name)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _anthropic(obj: dict) -> list[Item]:
    out = []
    if obj.get("system"):
        out.append(item("system", obj["system"], role="system"))
    for tool in obj.get("tools") or []:
        out.append(
            item(
                "tool_definition", tool, tool_name=_str(tool.get("name")) if isinstance(tool, dict) else None
            )
        )
    for msg in obj.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        role = _str(msg.get("role"))
        blocks = msg.get("content")
        if not isinstance(blocks, list) or not any(_anthropic_tool(b) for b in blocks):
            out.append(item("message", msg, role=role))
            continue
        out += _split(blocks, role, _anthropic_tool, lambda run, role=role: {"role": role, "content": run})
    return out


_CALL_BLOCKS = ("tool_use", "server_tool_use", "mcp_tool_use")
_RESULT_BLOCKS = ("tool_result", "mcp_tool_result", "web_search_tool_result", "web_fetch_tool_result",
                  "code_execution_tool_result", "bash_code_execution_tool_result")  # fmt: skip


def _anthropic_tool(block: Any) -> tuple[str, str | None, str | None] | None:
    """`(kind, call id, tool name)` of a tool-use or tool-result content block; None for others."""
    if not isinstance(block, dict):
        return None
    if block.get("type") in _CALL_BLOCKS:
        return "tool_call", _str(block.get("id")), _str(block.get("name"))
    if block.get("type") in _RESULT_BLOCKS:
        return "tool_result", _str(block.get("tool_use_id")), None
    return None


def _split(blocks: list, role: str | None, tool_of: Any, message: Any) -> list[Item]:
    """A message's blocks (parts) in order: each tool call and tool result an item of its own (with
    its call id, so parallel calls and their results pair up), each run of other blocks between them
    one `message` item (`message(run)` gives its content)."""
    out: list[Item] = []
    run: list = []
    for block in blocks:
        tool = tool_of(block)
        if tool is None:
            run.append(block)
            continue
        if run:
            out.append(item("message", message(run), role=role))
            run = []
        kind, call_id, name = tool
        out.append(item(kind, block, role=role, call_id=call_id, tool_name=name))
    if run:
        out.append(item("message", message(run), role=role))
    return out


def _chat_messages(messages: list, out: list[Item]) -> None:
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        role = _str(msg.get("role"))
        if role in ("system", "developer"):
            out.append(item("system", msg, role=role))
        elif role == "tool":
            out.append(item("tool_result", msg, role=role, call_id=_str(msg.get("tool_call_id")),
                            tool_name=_str(msg.get("tool_name")) or _str(msg.get("name"))))  # fmt: skip
        elif isinstance(msg.get("tool_calls"), list) and msg["tool_calls"]:
            rest = {k: v for k, v in msg.items() if k != "tool_calls"}
            if rest.get("content"):  # text beside the calls
                out.append(item("message", rest, role=role))
            for call in msg["tool_calls"]:
                fn = _tool_of(call) or {}
                call_id = _str(call.get("id")) if isinstance(call, dict) else None
                out.append(
                    item("tool_call", call, role=role, call_id=call_id, tool_name=_str(fn.get("name")))
                )
        else:
            out.append(item("message", msg, role=role))


def _tool_of(call: Any) -> dict | None:
    """A Chat tool call's (or tool definition's) `function`, or a custom tool's `custom`."""
    if not isinstance(call, dict):
        return None
    part = call.get("function") if isinstance(call.get("function"), dict) else call.get("custom")
    return part if isinstance(part, dict) else None


def _tool_name(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    fn = _tool_of(tool)
    return _str(fn.get("name")) if fn is not None else _str(tool.get("name"))


def _chat(obj: dict) -> list[Item]:
    out: list[Item] = []
    if obj.get("system"):  # Ollama's /api/generate and /api/chat accept a top-level system
        out.append(item("system", obj["system"], role="system"))
    tools = obj.get("tools") if isinstance(obj.get("tools"), list) else obj.get("functions") or []
    out += [item("tool_definition", t, tool_name=_tool_name(t)) for t in tools]
    _chat_messages(obj.get("messages") if isinstance(obj.get("messages"), list) else [], out)
    if isinstance(obj.get("prompt"), str):  # Ollama /api/generate
        out.append(item("message", obj["prompt"], role="user"))
    return out


def _responses(obj: dict) -> list[Item]:
    out = []
    if obj.get("instructions"):
        out.append(item("system", obj["instructions"], role="system"))
    out += [item("tool_definition", t, tool_name=_tool_name(t)) for t in obj.get("tools") or []]
    raw = obj.get("input")
    entries = (
        [{"role": "user", "content": raw}] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    )
    for entry in entries:
        if not isinstance(entry, dict):
            out.append(item("message", entry))
            continue
        kind = entry.get("type")
        role = _str(entry.get("role"))
        if kind in CALL_TYPES:
            out.append(
                item(
                    "tool_call", entry, call_id=_str(entry.get("call_id")), tool_name=call_name(entry) or None
                )
            )
        elif kind in RESULT_TYPES:
            out.append(item("tool_result", entry, call_id=_str(entry.get("call_id"))))
        elif kind == "reasoning":
            out.append(item("thinking", entry))
        elif role in ("system", "developer"):
            out.append(item("system", entry, role=role))
        else:
            out.append(item("message", entry, role=role))
    return out


def _gemini(obj: dict) -> list[Item]:
    if isinstance(obj.get("request"), dict):  # Code Assist envelope
        obj = obj["request"]
    out = []
    system = obj.get("systemInstruction") or obj.get("system_instruction")
    if system:
        out.append(item("system", system, role="system"))
    for tool in obj.get("tools") or []:
        declarations = (
            (tool.get("functionDeclarations") or tool.get("function_declarations"))
            if isinstance(tool, dict)
            else None
        )
        for decl in declarations if isinstance(declarations, list) else [tool]:
            out.append(
                item(
                    "tool_definition",
                    decl,
                    tool_name=_str(decl.get("name")) if isinstance(decl, dict) else None,
                )
            )
    for content in obj.get("contents") or []:
        parts = content.get("parts") if isinstance(content, dict) else None
        role = _str(content.get("role")) if isinstance(content, dict) else None
        if not isinstance(parts, list) or not any(_gemini_tool(p) for p in parts):
            out.append(item("message", content, role=role))
            continue
        out += _split(parts, role, _gemini_tool, lambda run, role=role: {"role": role, "parts": run})
    return out


def _gemini_tool(part: Any) -> tuple[str, str | None, str | None] | None:
    """`(kind, call id, tool name)` of a functionCall or functionResponse part; None for others."""
    if not isinstance(part, dict):
        return None
    for key, kind in (("functionCall", "tool_call"), ("functionResponse", "tool_result")):
        value = part.get(key)
        if isinstance(value, dict):
            return kind, _str(value.get("id")), _str(value.get("name"))
    return None


_BY_PROTOCOL = {"anthropic": _anthropic, "openai_chat": _chat, "ollama": _chat, "openai_responses": _responses,
                "gemini": _gemini}  # fmt: skip


def request_items(protocol: str, body: bytes | dict) -> list[Item]:
    """The input items of a request body (decoded), in order; [] when it is not a JSON object."""
    if isinstance(body, dict):
        obj: Any = body
    else:
        try:
            obj = msgspec.json.decode(body)
        except (msgspec.DecodeError, UnicodeDecodeError):
            return []
    extract = _BY_PROTOCOL.get(protocol)
    if extract is None or not isinstance(obj, dict):
        return []
    try:
        return extract(obj)
    except Exception:  # a shape no parser expected: no items, never an error of the call
        return []


def output_items(summary: ResponseSummary) -> list[Item]:
    """The items of an answer: its thinking, its text, each tool call (in that order)."""
    out = []
    if summary.thinking:
        out.append(item("thinking", summary.thinking, role="assistant"))
    if summary.text:
        out.append(item("text", summary.text, role="assistant"))
    for call in summary.tool_calls:
        out.append(item("tool_call", {"name": call.name, "arguments": call.arguments}, role="assistant",
                        call_id=call.call_id, tool_name=call.name))  # fmt: skip
    return out


def surface_hash(items: list[Item], kind: str) -> str | None:
    """One hash for all the items of `kind` (the tool surface: every tool definition), None if none."""
    chosen = [i.hash for i in items if i.kind == kind]
    return hashlib.sha256("\n".join(chosen).encode()).hexdigest()[:32] if chosen else None


def call_items(conn: Any, call_id: int) -> list[str]:
    """The hashes of a call's input items in order, from `model_item_lists` (links followed; in a
    loop, so a chain of thousands of calls does not exhaust the stack)."""
    chain: list[tuple[int, bytes]] = []  # (items kept from the base, own hashes), newest first
    current: int | None = call_id
    while current is not None:
        found = conn.execute(
            "SELECT base_call_id, shared, hashes FROM model_item_lists WHERE model_call_id = ?", (current,)
        ).fetchone()
        if found is None:
            break
        chain.append((found[1], bytes(found[2])))
        current = found[0]
    hashes: list[str] = []
    for shared, own in reversed(chain):
        hashes = hashes[:shared] + [own[i : i + 16].hex() for i in range(0, len(own), 16)]
    return hashes
