"""Gemini: `functionCall` parts, which arrive whole, each in one chunk of the answer (a bare
GenerateContentResponse, or one in the `{"response": ...}` envelope of the Code Assist API that
the Gemini CLI uses when signed in with Google: `v1internal:streamGenerateContent`).

A chunk (an `alt=sse` event, one element of a JSON-array stream, or the whole JSON answer)
that carries a denied call is given again with that part replaced by a text part naming the
rule; every other chunk passes as it came. Gemini ends a turn with tool calls with
`finishReason: STOP` as any other, so nothing else changes. A call without an `id` gets the one
the recorder gives it (`gemini_<name>_<n>`, n counting the answer's calls from 0).
"""

from __future__ import annotations

from typing import Any

from addons.toolhold.base import ChunkHold, Decide, HeldCall, denial_text, dumps


class GeminiHold(ChunkHold):
    """The event machine of a streamed Gemini answer (`alt=sse`, or a JSON-array stream's elements)."""

    MARKER = b'"functionCall"'

    def again(self, raw: bytes, data: bytes, chunk: Any) -> bytes:
        if raw is data:  # an element of a JSON-array stream (`json_array.py`): the object alone
            return dumps(chunk)
        end = b"\r\n\r\n" if raw.endswith(b"\r\n\r\n") else b"\n\n"
        return b"data: " + dumps(chunk) + end

    def rewrite(self, response: Any) -> bool:
        """One GenerateContentResponse, bare or in Code Assist's `{"response": ...}` envelope (the
        Gemini CLI signed in with Google; changed in place): True when a call in it was denied."""
        denied = False
        if (
            isinstance(response, dict)
            and "candidates" not in response
            and isinstance(response.get("response"), dict)
        ):
            response = response["response"]
        candidates = response.get("candidates") if isinstance(response, dict) else None
        for candidate in candidates if isinstance(candidates, list) else []:
            content = candidate.get("content") if isinstance(candidate, dict) else None
            parts = content.get("parts") if isinstance(content, dict) else None
            for i, part in enumerate(parts if isinstance(parts, list) else []):
                call = part.get("functionCall") if isinstance(part, dict) else None
                if not isinstance(call, dict):
                    continue
                name = str(call.get("name") or "")
                call_id = str(call.get("id") or f"gemini_{name}_{self.calls}")
                self.calls += 1
                args = call.get("args")
                rule = self.decide(
                    HeldCall(call_id, name, args if isinstance(args, dict) else {} if args is None else None)
                )
                if rule is not None:
                    parts[i] = {"text": denial_text(name, rule)}
                    denied = True
        self.denied += denied
        return denied


def rewrite_json(body: Any, decide: Decide) -> bool:
    """A whole answer (one response, or the JSON array of a stream; changed in place)."""
    machine = GeminiHold(decide)
    responses = body if isinstance(body, list) else [body]
    return any([machine.rewrite(r) for r in responses])
