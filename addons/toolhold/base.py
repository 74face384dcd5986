"""What the hold machines share: the call they hold, the decision they ask for, the denial text."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class HeldCall:
    """A tool call whose arguments are complete, as the model asked for it."""

    call_id: str
    """The id the recorder files it under in `tool_calls` (the provider's, or Gemini's made-up one)."""
    name: str
    arguments: Mapping[str, Any] | None
    """The arguments as JSON decoded (a freeform tool's input as `{"input": text}`); None when
    they are not a JSON object (a rule with `tool_args` then matches nothing of them)."""
    text: str | None = None
    """The arguments exactly as the model sent them, when sent as text (JSON text, or a freeform
    tool's input): what the policy reads them from (`addons/proxy/policy.py: tool_arguments`)."""


Decide = Callable[[HeldCall], "str | None"]
"""Called once per complete tool call: the name of the rule that denies it, or None to let it go."""


class EventMachine(Protocol):
    """One answer's events in, what the agent receives out (the same bytes unless a call is denied)."""

    def event(self, raw: bytes, data: bytes | None) -> list[bytes]:
        """`raw`: the whole event exactly as received; `data`: its payload (an SSE event's data
        lines joined; a WebSocket message whole), None when it has none."""
        ...

    def finish(self) -> list[bytes]:
        """The answer ended: whatever is still held (a call cut short is decided as it stands)."""
        ...

    def passes(self, partial: bytes) -> bool:
        """Whether the event that starts with `partial` (not whole yet) will come back unchanged,
        so its bytes can go out as they arrive (False when it cannot tell)."""
        ...

    def untouched(self, events: bytes) -> bool:
        """Whether every whole event in `events` would come back unchanged, with nothing for the
        machine to note (no call held, nothing denied, no byte that starts a call): they then go
        out without being read one by one (False when it cannot tell)."""
        ...

    held: list[bytes]
    """The events held now, exactly as received (given back unchanged if the machine fails)."""

    @property
    def rewritten(self) -> bool:
        """Whether any call was denied (what the agent received then differs from the upstream's)."""
        ...


def denial_text(name: str, rule: str) -> str:
    """What the agent reads in place of a denied call: the rule, and that the tool was not run."""
    return (
        f"[capsem] The {name} tool call was denied by policy rule {rule!r}; the tool was not run. "
        "Do not retry it; tell the user what you wanted to do instead."
    )


_DENIAL = re.compile(r"\[capsem\] The (.+?) tool call was denied by policy rule ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"); "
                     r"the tool was not run\.")  # fmt: skip
"""`denial_text` read back."""


def denials_in(text: str) -> list[tuple[str, str]]:
    """(tool name, rule) of each `denial_text` in `text`: a refused call as the agent received it
    (`capsem diff` shows it on both sides of a session and its replay)."""
    out = []
    for m in _DENIAL.finditer(text):
        try:
            rule = ast.literal_eval(m[2])
        except (ValueError, SyntaxError):
            rule = m[2][1:-1]
        out.append((m[1], str(rule)))
    return out


def arguments_of(text: str | None) -> Mapping[str, Any] | None:
    """Arguments sent as JSON text, decoded; None when they are not a JSON object."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def dumps(value: Any) -> bytes:
    """Compact JSON as providers send it (UTF-8, not escaped)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def first_line(partial: bytes) -> bytes | None:
    """The first line of an event still arriving, once it is whole (None before)."""
    for i, byte in enumerate(partial):
        if byte in (0x0A, 0x0D):
            return bytes(partial[:i])
    return None


class StreamHold:
    """What the two `flow.response.stream` holds (`SseHold`, `ArrayHold`) share: a list of chunks
    out for each chunk in (never an empty one: an empty `bytes` ends an HTTP/1.1 chunked body), and
    what the agent received, kept for the record."""

    __slots__ = ("failure", "machine", "sent")

    def __init__(self, machine: Any) -> None:
        self.machine = machine
        self.failure: str | None = None
        self.sent = bytearray()
        """Everything given to the agent (what it received, for the record when a call was denied)."""

    def __call__(self, chunk: bytes) -> list[bytes]:
        out = self.take(chunk)
        self.sent += out
        return [out] if out else []

    def take(self, chunk: bytes) -> bytes:
        """What goes out for `chunk` (b"" ends the answer), as one `bytes`."""
        raise NotImplementedError

    @property
    def delivered(self) -> bytes | None:
        """What the agent received, when it differs from the upstream's bytes."""
        return bytes(self.sent) if self.machine.rewritten and self.failure is None else None


class ChunkHold:
    """The event machine of a format whose calls arrive whole, each in one chunk of the answer
    (Gemini, Ollama): a chunk holding `MARKER` is read, and given again (`again`) when `rewrite`
    denied a call in it; every other chunk passes as it came. Nothing is ever held."""

    MARKER = b""

    def __init__(self, decide: Decide) -> None:
        self.decide = decide
        self.held: list[bytes] = []
        self.calls = 0
        """Calls seen so far in the answer (the recorder's ids count them)."""
        self.denied = 0

    @property
    def rewritten(self) -> bool:
        return self.denied > 0

    def event(self, raw: bytes, data: bytes | None) -> list[bytes]:
        if data is None or self.MARKER not in data:
            return [raw]
        chunk = json.loads(data)
        return [self.again(raw, data, chunk)] if self.rewrite(chunk) else [raw]

    def untouched(self, events: bytes) -> bool:
        return self.MARKER not in events

    def passes(self, partial: bytes) -> bool:
        return False  # a chunk says whether it carries a call only once it is whole

    def finish(self) -> list[bytes]:
        return []

    def rewrite(self, chunk: Any) -> bool:
        """One chunk's object (changed in place): True when a call in it was denied."""
        raise NotImplementedError

    def again(self, raw: bytes, data: bytes, chunk: Any) -> bytes:
        """The rewritten `chunk` framed as `raw` was (`data`: its payload)."""
        raise NotImplementedError
