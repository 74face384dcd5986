"""Gemini's JSON-array stream (`:streamGenerateContent` without `alt=sse`): `[{…}\\n,\\r\\n{…}]`,
cut into its top-level objects, exactly as received, for the hold machine.

Each piece is what came before an object (the `[` or `,` and the white space) and the object;
the closing `]` and anything after the last object form the last piece. Depth is counted outside
JSON strings only (a `{` in a text is no object). The machine sees each object as an event's
data; a piece it does not change goes out as it came.
"""

from __future__ import annotations

import logging

from addons.toolhold.base import StreamHold
from addons.toolhold.gemini import GeminiHold

logger = logging.getLogger("addons.proxy.capture")


class ArraySplitter:
    """Whole top-level objects off the front of a JSON array as its bytes arrive."""

    __slots__ = ("buffer", "depth", "escaped", "in_string", "scanned", "start")

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.scanned = 0
        self.start = -1
        """Where the object being read starts in `buffer` (-1: between objects)."""

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        """(piece, the object in it) for each object completed by `data`."""
        self.buffer += data
        out = []
        buffer, i = self.buffer, self.scanned
        while i < len(buffer):
            byte = buffer[i]
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif byte == 0x5C:  # backslash
                    self.escaped = True
                elif byte == 0x22:
                    self.in_string = False
            elif byte == 0x22:
                self.in_string = True
            elif byte == 0x7B:  # {
                if self.depth == 0:
                    self.start = i
                self.depth += 1
            elif byte == 0x7D:  # }
                self.depth -= 1
                if self.depth == 0 and self.start >= 0:
                    out.append((bytes(buffer[: i + 1]), bytes(buffer[self.start : i + 1])))
                    del buffer[: i + 1]
                    i, self.start = -1, -1
            i += 1
        self.scanned = len(buffer)
        return out

    def rest(self) -> bytes:
        rest, self.buffer, self.scanned = bytes(self.buffer), bytearray(), 0
        return rest


class ArrayHold(StreamHold):
    """`flow.response.stream` for a Gemini JSON-array answer (see `SseHold` for the contract:
    a list of chunks, never an empty one; a failure lets everything through unchanged)."""

    __slots__ = ("split",)

    def __init__(self, machine: GeminiHold) -> None:
        super().__init__(machine)
        self.split = ArraySplitter()

    def take(self, chunk: bytes) -> bytes:
        if self.failure is not None:
            return chunk
        if not chunk:
            return self.split.rest()
        out = []
        pieces = self.split.feed(chunk)
        for i, (piece, element) in enumerate(pieces):
            try:
                (given,) = self.machine.event(element, element)
                out.append(piece if given is element else piece[: len(piece) - len(element)] + given)
            except Exception as exc:  # never break the agent's answer
                self.failure = f"tool hold failed: {exc!r}"
                logger.warning("capsem: %s; the answer passes unchanged", self.failure)
                return b"".join([*out, *(p for p, _ in pieces[i:]), self.split.rest()])
        return b"".join(out)
