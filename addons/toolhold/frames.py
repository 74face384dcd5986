"""Bedrock's AWS event-stream answer (`InvokeModelWithResponseStream` of an Anthropic model) cut
into its binary frames for the Anthropic hold machine.

A `chunk` frame carries one Anthropic event (`{"bytes": "<base64 of its JSON>"}`): the machine
gets it as the SSE event it stands for. An event the machine gives back unchanged goes out as the
frame it came in (byte-identical); one it wrote goes out as a new `chunk` frame with the same
headers and real CRCs (`addons/eventstream.py: encode_frame`). Every other frame (an exception,
anything unreadable) passes as it came. A frame cut across reads waits for its end.
"""

from __future__ import annotations

import base64
import json
import logging
import struct
from typing import Any

from addons.toolhold.base import EventMachine, StreamHold

logger = logging.getLogger("addons.proxy.capture")

_PRELUDE = 12
_MIN_FRAME = 16


def split_frames(buffer: bytearray, final: bool = False) -> list[bytes]:
    """Take the whole frames off the front of `buffer` (and, when `final`, what is left as one)."""
    out, pos = [], 0
    while len(buffer) - pos >= _PRELUDE:
        (total,) = struct.unpack_from(">I", buffer, pos)
        if total < _MIN_FRAME:  # no frame: the rest passes as it is
            break
        if len(buffer) - pos < total:
            break
        out.append(bytes(buffer[pos : pos + total]))
        pos += total
    if final and pos < len(buffer):
        out.append(bytes(buffer[pos:]))
        pos = len(buffer)
    del buffer[:pos]
    return out


def _event_of(frame: bytes) -> tuple[dict[str, Any], bytes] | None:
    """A chunk frame's headers and the Anthropic event it carries (its JSON); None for any other."""
    from addons.eventstream import decode_headers  # with the parsers: loaded only for Bedrock

    if len(frame) < _MIN_FRAME:
        return None
    (headers_len,) = struct.unpack_from(">I", frame, 4)
    headers = decode_headers(frame[_PRELUDE : _PRELUDE + headers_len])
    if headers is None or headers.get(":message-type", "event") != "event":
        return None
    if headers.get(":event-type", "chunk") != "chunk":
        return None
    payload = json.loads(frame[_PRELUDE + headers_len : -4])
    raw = payload.get("bytes") if isinstance(payload, dict) else None
    return (headers, base64.b64decode(raw, validate=True)) if isinstance(raw, str) else None


def _sse(data: bytes) -> bytes:
    """The SSE event an Anthropic event's JSON stands for (what the machine reads)."""
    kind = json.loads(data).get("type")
    return b"event: " + str(kind).encode() + b"\ndata: " + data + b"\n\n"


class FrameHold(StreamHold):
    """`flow.response.stream` for a Bedrock event stream (see `SseHold` for the contract: a list of
    chunks, never an empty one; a failure lets everything through unchanged)."""

    __slots__ = ("buffer", "frames", "headers")

    def __init__(self, machine: EventMachine) -> None:
        super().__init__(machine)
        self.buffer = bytearray()
        self.frames: dict[bytes, list[bytes]] = {}
        """The SSE event given to the machine -> the frames it came in, oldest first (while the
        machine may hold them: equal events, e.g. empty argument deltas, differ in their padding)."""
        self.headers: dict[str, str] = {":event-type": "chunk", ":content-type": "application/json",
                                        ":message-type": "event"}  # fmt: skip

    def take(self, chunk: bytes) -> bytes:
        if self.failure is not None:
            return chunk
        self.buffer += chunk
        frames = split_frames(self.buffer, final=not chunk)
        out: list[bytes] = []
        for i, frame in enumerate(frames):
            try:
                out += self._frame(frame)
            except Exception as exc:  # never break the agent's answer
                return b"".join(out) + self._fail(exc, frames[i:])
        if not chunk:  # the answer ended: what the machine still holds
            try:
                out += [self._back(e) for e in self.machine.finish()]
            except Exception as exc:
                return b"".join(out) + self._fail(exc, [])
        return b"".join(out)

    def _frame(self, frame: bytes) -> list[bytes]:
        found = _event_of(frame)
        if found is None:
            return [frame]
        headers, data = found
        self.headers = {k: v for k, v in headers.items() if isinstance(v, str)}
        sse = _sse(data)
        self.frames.setdefault(sse, []).append(frame)
        return [self._back(e) for e in self.machine.event(sse, data)]

    def _back(self, sse: bytes) -> bytes:
        """The frame of an SSE event the machine gave out: its own frame, or a new one."""
        frame = self._own(sse)
        if frame is not None:
            return frame
        from addons.eventstream import encode_frame
        from addons.toolhold.sse import data_of

        data = data_of(sse) or b"{}"
        payload = json.dumps({"bytes": base64.b64encode(data).decode()}, separators=(",", ":")).encode()
        return encode_frame(self.headers, payload)

    def _own(self, sse: bytes) -> bytes | None:
        """The oldest frame `sse` came in that has not gone out yet (None: the machine wrote it)."""
        frames = self.frames.get(sse)
        if not frames:
            return None
        frame = frames.pop(0)
        if not frames:
            del self.frames[sse]
        return frame

    def _fail(self, exc: Exception, rest: list[bytes]) -> bytes:
        """Give up holding: the frames the machine held, and the rest, as they came."""
        self.failure = f"tool hold failed: {exc!r}"
        logger.warning("capsem: %s; the answer passes unchanged", self.failure)
        held = [self._own(e) or b"" for e in self.machine.held]
        left, self.buffer = bytes(self.buffer), bytearray()
        return b"".join([*held, *(f for f in rest if f not in held), left])
