"""Which machine and which whole-answer rewrite serve which protocol (the route's `protocol`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from addons.toolhold import anthropic, gemini, ollama, openai_chat, openai_responses
from addons.toolhold.base import Decide, EventMachine, HeldCall, StreamHold
from addons.toolhold.frames import FrameHold
from addons.toolhold.json_array import ArrayHold
from addons.toolhold.lines import LineHold
from addons.toolhold.sse import SseHold

_MACHINES: dict[str, Callable[[Decide], EventMachine]] = {
    "anthropic": anthropic.AnthropicHold,
    "openai_chat": openai_chat.ChatHold,
    "openai_responses": openai_responses.ResponsesHold,
    "gemini": gemini.GeminiHold,
    "ollama": ollama.OllamaHold,
}
_JSON: dict[str, Callable[[Any, Decide], bool]] = {
    "anthropic": anthropic.rewrite_json,
    "openai_chat": openai_chat.rewrite_json,
    "openai_responses": openai_responses.rewrite_json,
    "gemini": gemini.rewrite_json,
    "ollama": ollama.rewrite_json,
}
HOLDS: dict[str, Callable[[Any], StreamHold]] = {
    "json-array": ArrayHold,
    "ndjson": LineHold,
    "eventstream": FrameHold,
}
"""The stream hold of each framing that is not SSE (`stream_framing`): Gemini's JSON array,
Ollama's NDJSON lines, Bedrock's AWS event-stream frames."""
_LINES = frozenset({"ollama"})
"""Protocols whose streams are NDJSON: a whole body of several lines is read line by line."""
PROTOCOLS = frozenset(_MACHINES)


def machine_for(protocol: str, decide: Decide, **options: bool) -> EventMachine | None:
    """The event machine of a streamed answer in `protocol` (None: capsem does not hold its calls)."""
    make = _MACHINES.get(protocol)
    return make(decide, **options) if make is not None else None


def rewrite_json(protocol: str, body: bytes, decide: Decide, framing: str | None = None) -> bytes | None:
    """A whole decoded answer with its denied calls replaced; None when nothing changes (or it
    is not an answer capsem reads). An SSE, NDJSON or AWS event-stream body (`framing`
    `eventstream`: Bedrock's) is run through the stream machine whole."""
    if protocol not in _MACHINES:
        return None
    stripped = body.lstrip()
    if framing != "eventstream" and stripped[:1] in (b"{", b"["):
        try:
            value = json.loads(body)
        except ValueError:
            if protocol not in _LINES:
                return None
        else:
            if not _JSON[protocol](value, decide):
                return None
            return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    machine = _MACHINES[protocol](decide)
    hold = HOLDS.get(framing or ("ndjson" if protocol in _LINES else ""), SseHold)(machine)
    out = hold.take(body) + hold.take(b"")
    return out if machine.rewritten and hold.failure is None else None


def calls_in(protocol: str, body: bytes, framing: str | None = None) -> list[HeldCall]:
    """Every tool call of a whole decoded answer (to decide them before rewriting it)."""
    found: list[HeldCall] = []

    def note(call: HeldCall) -> None:
        found.append(call)

    rewrite_json(protocol, body, note, framing)  # type: ignore[arg-type]  (returns None: nothing denied)
    return found
