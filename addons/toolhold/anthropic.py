"""Anthropic Messages: `tool_use` content blocks held from `content_block_start` to their stop.

A denied block is replaced, at the same index, by a text block naming the rule (so the indexes
stay valid); once no tool call is left, `stop_reason: tool_use` becomes `end_turn` (the usage in
that `message_delta` is kept as reported). Server tools (`server_tool_use`) run at the provider
and are not held.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from addons.toolhold.base import Decide, HeldCall, arguments_of, denial_text, dumps, first_line


@dataclass(slots=True)
class _Call:
    index: Any
    id: str
    name: str
    start_input: Any
    parts: list[str] = field(default_factory=list)


_PASSING = frozenset({b"event: content_block_delta", b"event: ping"})
"""Events whose first line says they are no tool call's start and nothing capsem rewrites."""


def _sse(name: str, value: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumps(value) + b"\n\n"


class AnthropicHold:
    """The event machine of a streamed Messages answer."""

    def __init__(self, decide: Decide) -> None:
        self.decide = decide
        self.held: list[bytes] = []
        self.call: _Call | None = None
        self.allowed = 0
        self.denied = 0

    @property
    def rewritten(self) -> bool:
        return self.denied > 0

    def event(self, raw: bytes, data: bytes | None) -> list[bytes]:
        if self.call is None:
            # a quote inside a JSON string is escaped, so these bytes only occur as JSON structure
            if data is None or b'"tool_use"' not in data:
                if self.denied and data is not None and b'"message_delta"' in data:
                    return [self._stop_reason(raw, data)]
                return [raw]
            ev = json.loads(data)
            block = ev.get("content_block") if isinstance(ev, dict) else None
            if self.denied and isinstance(ev, dict) and ev.get("type") == "message_delta":
                return [self._stop_reason(raw, data)]
            if (
                ev.get("type") != "content_block_start"
                or not isinstance(block, dict)
                or block.get("type") != "tool_use"
            ):
                return [raw]
            self.call = _Call(
                ev.get("index"), str(block.get("id") or ""), str(block.get("name") or ""), block.get("input")
            )
            self.held = [raw]
            return []
        self.held.append(raw)
        if data is None:
            return []
        if b'"input_json_delta"' in data:
            ev = json.loads(data)
            delta = ev.get("delta") or {}
            if ev.get("index") == self.call.index and isinstance(delta.get("partial_json"), str):
                self.call.parts.append(delta["partial_json"])
        elif b'"content_block_stop"' in data:
            ev = json.loads(data)
            if ev.get("type") == "content_block_stop" and ev.get("index") == self.call.index:
                return self._decided()
        return []

    def finish(self) -> list[bytes]:
        return self._decided() if self.call is not None else []

    def untouched(self, events: bytes) -> bool:
        return self.call is None and not self.denied and b'"tool_use"' not in events

    def passes(self, partial: bytes) -> bool:
        """A text, thinking or signature delta (or a ping) while no call is held."""
        return self.call is None and first_line(partial) in _PASSING

    def _decided(self) -> list[bytes]:
        call, held = self.call, self.held
        assert call is not None
        if call.parts:
            arguments = arguments_of("".join(call.parts))
        else:
            arguments = call.start_input if isinstance(call.start_input, dict) else {}
        text = "".join(call.parts) if call.parts else None
        rule = self.decide(
            HeldCall(call.id, call.name, arguments, text)
        )  # first: if it fails, all is still held
        self.call, self.held = None, []
        if rule is None:
            self.allowed += 1
            return held
        self.denied += 1
        text = denial_text(call.name, rule)
        return [
            _sse("content_block_start", {"type": "content_block_start", "index": call.index,
                                         "content_block": {"type": "text", "text": ""}}),
            _sse("content_block_delta", {"type": "content_block_delta", "index": call.index,
                                         "delta": {"type": "text_delta", "text": text}}),
            _sse("content_block_stop", {"type": "content_block_stop", "index": call.index}),
        ]  # fmt: skip

    def _stop_reason(self, raw: bytes, data: bytes) -> bytes:
        """`message_delta`: no tool call left, so the turn ends as a normal end of turn."""
        ev = json.loads(data)
        delta = ev.get("delta") if isinstance(ev, dict) else None
        if self.allowed or not isinstance(delta, dict) or delta.get("stop_reason") != "tool_use":
            return raw
        delta["stop_reason"] = "end_turn"
        return _sse("message_delta", ev)


def rewrite_json(body: Any, decide: Decide) -> bool:
    """A whole Messages answer (decoded JSON, changed in place): True when a call was denied."""
    content = body.get("content") if isinstance(body, dict) else None
    if not isinstance(content, list):
        return False
    allowed = denied = 0
    for i, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "tool_use":
            continue
        name = str(block.get("name") or "")
        args = block.get("input")
        rule = decide(HeldCall(str(block.get("id") or ""), name, args if isinstance(args, dict) else None))
        if rule is None:
            allowed += 1
        else:
            denied += 1
            content[i] = {"type": "text", "text": denial_text(name, rule)}
    if denied and not allowed and body.get("stop_reason") == "tool_use":
        body["stop_reason"] = "end_turn"
    return denied > 0
