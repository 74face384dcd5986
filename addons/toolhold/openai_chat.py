"""OpenAI Chat Completions: `tool_calls` deltas held by index until the call is complete (a
function's, or a custom tool's: `custom.input`, free-form text).

A call is complete when a delta for another index starts, when `finish_reason` comes or at
`[DONE]`. A denied call's entries are taken out of the chunks that carried them and its text
goes into the first one's `delta.content`; the later calls are renumbered so the indexes stay
0, 1, 2…; `finish_reason: tool_calls` becomes `stop` once no call is left. Only choice 0 is held
(agents ask for one choice).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from addons.toolhold.base import Decide, HeldCall, arguments_of, denial_text, dumps


@dataclass(slots=True)
class _Call:
    index: int
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    custom: bool = False
    """A custom (freeform) tool's call: its `input` is text, not JSON arguments."""


def _tool(entry: dict[str, Any]) -> tuple[dict[str, Any], str, bool]:
    """A `tool_calls` entry's tool part (its `function`, or a custom tool's `custom`), the key of
    its arguments in it (`arguments` or `input`), and whether it is a custom tool's."""
    if isinstance(entry.get("custom"), dict) or entry.get("type") == "custom":
        custom = entry.get("custom")
        return (custom if isinstance(custom, dict) else {}), "input", True
    function = entry.get("function")
    return (function if isinstance(function, dict) else {}), "arguments", False


def _held(call_id: str, name: str, text: str | None, custom: bool) -> HeldCall:
    """The held call: JSON arguments, or a custom tool's free-form input as `{"input": text}`."""
    if custom:
        return HeldCall(call_id, name, {"input": text} if text is not None else None, text)
    return HeldCall(call_id, name, arguments_of(text), text)


def _entries(ev: Any) -> list[dict[str, Any]]:
    delta = _delta(ev)
    calls = delta.get("tool_calls") if delta is not None else None
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _choice(ev: Any) -> dict[str, Any] | None:
    choices = ev.get("choices") if isinstance(ev, dict) else None
    if (
        isinstance(choices, list)
        and choices
        and isinstance(choices[0], dict)
        and choices[0].get("index", 0) == 0
    ):
        return choices[0]
    return None


def _delta(ev: Any) -> dict[str, Any] | None:
    choice = _choice(ev)
    delta = choice.get("delta") if choice is not None else None
    return delta if isinstance(delta, dict) else None


class ChatHold:
    """The event machine of a streamed Chat Completions answer."""

    def __init__(self, decide: Decide) -> None:
        self.decide = decide
        self.held: list[bytes] = []
        self.parsed: list[Any] = []
        self.call: _Call | None = None
        self.allowed = 0
        self.denied: list[int] = []

    @property
    def rewritten(self) -> bool:
        return bool(self.denied)

    def event(self, raw: bytes, data: bytes | None) -> list[bytes]:
        if data is None or data.strip() == b"[DONE]":
            if self.call is None:
                return [raw]
            return [*self._decided(), raw]
        if self.call is None and b'"tool_calls"' not in data:
            if self.denied and b'"finish_reason"' in data:
                return [self._rebuilt(json.loads(data)) or raw]
            return [raw]
        ev = json.loads(data)
        out: list[bytes] = []
        for entry in _entries(ev):
            index = entry.get("index", 0)
            if self.call is not None and index != self.call.index:
                out += self._decided()
            if self.call is None:
                self.call = _Call(index)
            tool, key, custom = _tool(entry)
            self.call.id = self.call.id or str(entry.get("id") or "")
            self.call.name = self.call.name or str(tool.get("name") or "")
            self.call.custom = self.call.custom or custom
            if isinstance(tool.get(key), str):
                self.call.parts.append(tool[key])
        if self.call is None:  # `"tool_calls": null` or an empty list: no call
            return [*out, (self._rebuilt(ev) or raw) if self.denied else raw]
        self.held.append(raw)
        self.parsed.append(ev)
        choice = _choice(ev)
        if choice is not None and choice.get("finish_reason"):
            out += self._decided()
        return out

    def untouched(self, events: bytes) -> bool:
        return self.call is None and not self.denied and b'"tool_calls"' not in events

    def passes(self, partial: bytes) -> bool:
        return False  # a chunk's data says whether it carries a call only once it is whole

    def finish(self) -> list[bytes]:
        return self._decided() if self.call is not None else []

    def _decided(self) -> list[bytes]:
        call, held, parsed = self.call, self.held, self.parsed
        assert call is not None
        text = "".join(call.parts)
        rule = self.decide(_held(call.id, call.name, text, call.custom))
        self.call, self.held, self.parsed = None, [], []
        if rule is None:
            self.allowed += 1
            if not self.denied:
                return held
            return [self._rebuilt(ev) or raw for raw, ev in zip(held, parsed, strict=True)]
        self.denied.append(call.index)
        out: list[bytes] = []
        text: str | None = denial_text(call.name, rule)
        for ev in parsed:
            if text is not None and _delta(ev) is not None:
                delta = _delta(ev)
                assert delta is not None
                delta["content"] = (delta.get("content") or "") + text
                text = None
            chunk = self._rebuilt(ev)
            if chunk is not None:
                out.append(chunk)
        return out

    def _rebuilt(self, ev: Any) -> bytes | None:
        """A chunk without the denied calls' entries, later calls renumbered, `finish_reason`
        `stop` when no call is left; None when nothing is left of it."""
        choice = _choice(ev)
        delta = _delta(ev)
        if choice is None or delta is None:
            return b"data: " + dumps(ev) + b"\n\n"
        kept = []
        for entry in _entries(ev):
            index = entry.get("index", 0)
            if index in self.denied:
                continue
            entry["index"] = index - sum(1 for d in self.denied if d < index)
            kept.append(entry)
        if kept:
            delta["tool_calls"] = kept
        else:
            delta.pop("tool_calls", None)
        if choice.get("finish_reason") == "tool_calls" and not self.allowed and self.call is None:
            choice["finish_reason"] = "stop"
        empty = not any(v is not None for v in delta.values()) and not choice.get("finish_reason")
        if empty and not ev.get("usage"):
            return None
        return b"data: " + dumps(ev) + b"\n\n"


def rewrite_json(body: Any, decide: Decide) -> bool:
    """A whole Chat Completions answer (decoded JSON, changed in place): True when a call was denied."""
    denied_any = False
    for choice in body.get("choices") or [] if isinstance(body, dict) else []:
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not isinstance(calls, list):
            continue
        kept, texts = [], []
        for call in calls:
            if not isinstance(call, dict):
                kept.append(call)
                continue
            tool, key, custom = _tool(call)
            name = str(tool.get("name") or "")
            text = tool.get(key) if isinstance(tool.get(key), str) else None
            rule = decide(_held(str(call.get("id") or ""), name, text, custom))
            if rule is None:
                kept.append(call)
            else:
                texts.append(denial_text(name, rule))
        if not texts:
            continue
        denied_any = True
        message["content"] = "\n\n".join([*([message["content"]] if message.get("content") else []), *texts])
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
            if choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
    return denied_any
