"""Ollama's native `/api/chat`: `message.tool_calls`, which arrive whole, in one line of the answer.

A line (an NDJSON object, or the whole JSON answer) that carries a denied call is given again with
that call taken out of `tool_calls` and the denial text added to the message's `content`; every
other line passes as it came. Ollama ends a turn with tool calls as any other (`done_reason:
stop`), so nothing else changes. A call without an `id` gets the one the recorder gives it
(`ollama_<name>_<n>`, n counting the answer's calls from 0). `lines.py: LineHold` cuts a stream
into its lines.
"""

from __future__ import annotations

from typing import Any

from addons.toolhold.base import ChunkHold, Decide, HeldCall, arguments_of, denial_text, dumps


class OllamaHold(ChunkHold):
    """The event machine of a streamed Ollama answer: each NDJSON line is an event."""

    MARKER = b'"tool_calls"'

    def again(self, raw: bytes, data: bytes, chunk: Any) -> bytes:
        return dumps(chunk) + raw[len(raw.rstrip(b"\r\n")) :]  # the line's own end

    def rewrite(self, line: Any) -> bool:
        """One line's object (changed in place): True when a call in it was denied."""
        message = line.get("message") if isinstance(line, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not isinstance(calls, list):
            return False
        kept, denials = [], []
        for call in calls:
            if not isinstance(call, dict):  # the recorder counts only the calls it reads
                kept.append(call)
                continue
            fn = call.get("function") if isinstance(call.get("function"), dict) else {}
            name = _text(fn.get("name"))
            call_id = _text(call.get("id")) or f"ollama_{name}_{self.calls}"
            self.calls += 1
            args = fn.get("arguments")  # an object (Ollama's own), or JSON text
            if isinstance(args, str):
                held = HeldCall(call_id, name, arguments_of(args), args)
            else:
                held = HeldCall(call_id, name, args or {} if isinstance(args, dict) or args is None else None)
            rule = self.decide(held)
            if rule is None:
                kept.append(call)
            else:
                denials.append(denial_text(name, rule))
        if not denials:
            return False
        if kept:
            message["tool_calls"] = kept
        else:
            del message["tool_calls"]
        content = message.get("content")
        message["content"] = "\n\n".join(
            [content, *denials] if isinstance(content, str) and content else denials
        )
        self.denied += 1
        return True


def _text(value: Any) -> str:
    """A string field as the recorder reads it (`as_str`): anything else is no name or id."""
    return value if isinstance(value, str) else ""


def rewrite_json(body: Any, decide: Decide) -> bool:
    """A whole answer (one JSON object; changed in place)."""
    return OllamaHold(decide).rewrite(body)
