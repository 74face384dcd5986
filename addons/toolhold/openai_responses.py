"""OpenAI Responses: the call output items (`function_call`, `custom_tool_call`, `local_shell_call`,
and the API's own `shell_call` and `apply_patch_call`) held from `response.output_item.added` to
their `response.output_item.done`, over SSE or a WebSocket, with every event between them (their
argument deltas, `shell_call_command.*`, `apply_patch_call_operation_diff.*`).

A denied item is replaced, at the same `output_index`, by an assistant `message` item whose text
names the rule (the six events a message item streams as), and in the final `response.completed`
(or `.incomplete`) its entry of `response.output` is that message too; the usage is untouched.
The same machine reads SSE events (`sse=True`: `event:`/`data:` lines) and Codex's WebSocket
messages (one JSON event each).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from addons.responses_calls import CALL_TYPES, call_arguments, call_name
from addons.toolhold.base import Decide, HeldCall, arguments_of, denial_text, dumps, first_line

CALLS = CALL_TYPES
_MARKERS = tuple(b'"' + kind.encode() + b'"' for kind in CALLS)
_FINAL = ("response.completed", "response.incomplete", "response.failed", "response.done")


@dataclass(slots=True)
class _Call:
    output_index: Any
    seqs: list[Any] = field(default_factory=list)


def call_of(item: dict[str, Any]) -> HeldCall:
    """The held call of a complete output item: its arguments read as the recorder records them
    (`call_arguments`: a shell call's `action`, a patch's `operation` as their JSON)."""
    call_id, name = str(item.get("call_id") or item.get("id") or ""), call_name(item)
    value = call_arguments(item)
    if isinstance(value, dict):  # `local_shell`, `shell`, `apply_patch`
        return HeldCall(call_id, name, value, json.dumps(value))
    text = value if isinstance(value, str) else None
    if item.get("type") == "custom_tool_call":
        return HeldCall(call_id, name, {"input": text} if text is not None else None, text)
    return HeldCall(call_id, name, arguments_of(text) if text is not None else None, text)


def message_item(item: dict[str, Any], text: str) -> dict[str, Any]:
    """The assistant message that stands in for a denied call's item."""
    return {
        "id": "msg_capsem_" + str(item.get("id") or item.get("call_id") or "call"),
        "type": "message", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }  # fmt: skip


class ResponsesHold:
    """The event machine of a streamed Responses answer (SSE events or WebSocket messages)."""

    def __init__(self, decide: Decide, *, sse: bool = True) -> None:
        self.decide = decide
        self.sse = sse
        self.held: list[bytes] = []
        self.call: _Call | None = None
        self.replaced: dict[str, dict[str, Any]] = {}

    @property
    def rewritten(self) -> bool:
        return bool(self.replaced)

    def event(self, raw: bytes, data: bytes | None) -> list[bytes]:
        if self.call is not None:
            self.held.append(raw)
            if data is None or b'"response.output_item.done"' not in data:
                if data is not None and b'"sequence_number"' in data:
                    self.call.seqs.append(json.loads(data).get("sequence_number"))
                return []
            ev = json.loads(data)
            self.call.seqs.append(ev.get("sequence_number"))
            if (
                ev.get("type") == "response.output_item.done"
                and ev.get("output_index") == self.call.output_index
            ):
                return self._decided(ev.get("item") or {})
            return []
        if data is None or not any(marker in data for marker in _MARKERS):
            return [raw]
        ev = json.loads(data)
        kind = ev.get("type") if isinstance(ev, dict) else None
        item = ev.get("item") if isinstance(ev, dict) and isinstance(ev.get("item"), dict) else {}
        if kind == "response.output_item.added" and item.get("type") in CALLS:
            self.call = _Call(ev.get("output_index"), [ev.get("sequence_number")])
            self.held = [raw]
            return []
        if kind == "response.output_item.done" and item.get("type") in CALLS:  # no `added` seen
            self.call = _Call(ev.get("output_index"), [ev.get("sequence_number")])
            self.held = [raw]
            return self._decided(item)
        if kind in _FINAL and self.replaced:
            return [self._final(ev)]
        return [raw]

    def untouched(self, events: bytes) -> bool:
        return self.call is None and not self.replaced and not any(marker in events for marker in _MARKERS)

    def passes(self, partial: bytes) -> bool:
        """A text or reasoning delta (`event: response.….delta`) while no call is held."""
        line = first_line(partial) if self.sse and self.call is None else None
        return line is not None and line.startswith(b"event: response.") and line.endswith(b"text.delta")

    def finish(self) -> list[bytes]:
        held, self.held, self.call = self.held, [], None
        return held  # cut before its item was done: no complete call to run, let it go as it came

    def _decided(self, item: dict[str, Any]) -> list[bytes]:
        call, held = self.call, self.held
        assert call is not None
        held_call = call_of(item)
        rule = self.decide(held_call)  # first: if it fails, all is still held
        self.call, self.held = None, []
        if rule is None:
            return held
        message = message_item(item, denial_text(held_call.name, rule))
        self.replaced[str(item.get("id") or item.get("call_id"))] = message
        return self._message_events(call, message)

    def _message_events(self, call: _Call, message: dict[str, Any]) -> list[bytes]:
        text = message["content"][0]["text"]
        at = {"item_id": message["id"], "output_index": call.output_index}
        part = {"type": "output_text", "text": "", "annotations": []}
        events: list[dict[str, Any]] = [
            {"type": "response.output_item.added", "output_index": call.output_index,
             "item": {**message, "status": "in_progress", "content": []}},
            {"type": "response.content_part.added", **at, "content_index": 0, "part": part},
            {"type": "response.output_text.delta", **at, "content_index": 0, "delta": text, "logprobs": []},
            {"type": "response.output_text.done", **at, "content_index": 0, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **at, "content_index": 0, "part": {**part, "text": text}},
            {"type": "response.output_item.done", "output_index": call.output_index, "item": message},
        ]  # fmt: skip
        seqs = [s for s in call.seqs if isinstance(s, int)]
        for i, ev in enumerate(events):
            if seqs:  # the held events' numbers, in order (the last one again if they run out)
                ev["sequence_number"] = seqs[min(i, len(seqs) - 1)]
        return [self._encode(ev) for ev in events]

    def _final(self, ev: dict[str, Any]) -> bytes:
        response = ev.get("response")
        if isinstance(response, dict):
            _replace_items(response, self.replaced)
        return self._encode(ev)

    def _encode(self, ev: dict[str, Any]) -> bytes:
        if self.sse:
            return b"event: " + str(ev["type"]).encode() + b"\ndata: " + dumps(ev) + b"\n\n"
        return dumps(ev)


def _replace_items(response: dict[str, Any], replaced: dict[str, dict[str, Any]]) -> None:
    output = response.get("output")
    if isinstance(output, list):
        response["output"] = [
            replaced.get(str(i.get("id") or i.get("call_id")), i) if isinstance(i, dict) else i
            for i in output
        ]


def rewrite_json(body: Any, decide: Decide) -> bool:
    """A whole Responses answer (decoded JSON, changed in place): True when a call was denied."""
    output = body.get("output") if isinstance(body, dict) else None
    if not isinstance(output, list):
        return False
    replaced: dict[str, dict[str, Any]] = {}
    for item in output:
        if isinstance(item, dict) and item.get("type") in CALLS:
            call = call_of(item)
            rule = decide(call)
            if rule is not None:
                replaced[str(item.get("id") or item.get("call_id"))] = message_item(
                    item, denial_text(call.name, rule)
                )
    _replace_items(body, replaced)
    return bool(replaced)
