"""Holding a model's tool calls in its answer until a tool rule has decided them (issue 36).

Pure: bytes in, bytes out, one module per answer format. Each streamed format has an event
machine (`anthropic.py`, `openai_chat.py`, `openai_responses.py`, `gemini.py`) fed one whole event
at a time (an SSE event by `sse.py: SseHold`, a WebSocket message by the proxy's `ToolGate`): an
event that is no part of a tool call comes straight back; a tool call's events are held until its
arguments are complete, then `decide(call)` says whether a rule denies it. Allowed, the held
events come back unchanged (byte-identical); denied, the call is replaced by text in the
provider's own format naming the rule, and the answer is kept valid (indexes, stop reason,
usage as the provider reported it). Each format also rewrites a whole (non-streamed) answer the
same way (`rewrite_json`). The proxy side (`addons/proxy/tool_gate.py`) chooses the mode.
"""

from __future__ import annotations

from addons.toolhold.base import Decide, EventMachine, HeldCall, denial_text
from addons.toolhold.registry import calls_in, machine_for, rewrite_json
from addons.toolhold.sse import SseHold

__all__ = [
    "Decide",
    "EventMachine",
    "HeldCall",
    "SseHold",
    "calls_in",
    "denial_text",
    "machine_for",
    "rewrite_json",
]
