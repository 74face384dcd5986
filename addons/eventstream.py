"""AWS event-stream framing (`application/vnd.amazon.eventstream`): Bedrock's streamed responses.

Each binary frame is::

    [total_len u32 BE][headers_len u32 BE][prelude_crc u32 = CRC32(first 8 bytes)]
    [headers: { name_len u8, name, value_type u8, value... }*][payload][message_crc u32]

`EventStreamDecoder` is incremental (frames may be split at any byte) and never raises. A
frame whose CRC does not match, or whose prelude is impossible, is counted in
`invalid_lines`; the decoder then resynchronizes by skipping one byte and looking for the next
valid prelude. Bedrock `chunk` events carry `{"bytes": "<base64 of one Anthropic event>",
"p": "<padding>"}`: they come out as `SSEEvent(event=<the event's type>, data=<its JSON>)` so
the Anthropic stream interpreter reads them unchanged. Exception frames (`:message-type:
exception`, or an `error` message) come out as an Anthropic-shaped `error` event whose type
is the exception type (e.g. `throttlingException`).
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import zlib
from typing import Any

from addons.framing import FRAMERS, SSEEvent

__all__ = ["EventStreamDecoder", "Frame", "decode_headers", "encode_frame"]

_PRELUDE = 12
_MIN_FRAME = 16  # prelude + message CRC, no headers, no payload
_MAX_FRAME = 16 * 1024 * 1024  # AWS caps a message at 16 MiB (headers at 128 KiB)
_MAX_HEADERS = 128 * 1024

# value type -> fixed size (None: u16 length-prefixed)
_FIXED = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}


class Frame:
    """One decoded frame: its headers (strings and scalars) and raw payload."""

    __slots__ = ("headers", "payload")

    def __init__(self, headers: dict[str, Any], payload: bytes) -> None:
        self.headers = headers
        self.payload = payload


def decode_headers(data: bytes) -> dict[str, Any] | None:
    """Header block → dict; None when malformed."""
    out: dict[str, Any] = {}
    pos, end = 0, len(data)
    while pos < end:
        name_len = data[pos]
        pos += 1
        if name_len == 0 or pos + name_len + 1 > end:
            return None
        name = data[pos : pos + name_len].decode("utf-8", "replace")
        pos += name_len
        kind = data[pos]
        pos += 1
        if kind in (6, 7):  # bytes, string: u16 length
            if pos + 2 > end:
                return None
            (size,) = struct.unpack_from(">H", data, pos)
            pos += 2
            if pos + size > end:
                return None
            raw = data[pos : pos + size]
            out[name] = raw.decode("utf-8", "replace") if kind == 7 else raw
            pos += size
        elif kind in _FIXED:
            size = _FIXED[kind]
            if pos + size > end:
                return None
            raw = data[pos : pos + size]
            if kind in (0, 1):
                out[name] = kind == 0
            elif kind == 9:
                out[name] = raw.hex()
            else:
                out[name] = int.from_bytes(raw, "big", signed=kind != 8)
            pos += size
        else:
            return None
    return out


def encode_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One frame with string headers and real CRCs (for tests and the emulator)."""
    block = b""
    for name, value in headers.items():
        n, v = name.encode(), value.encode()
        block += bytes([len(n)]) + n + b"\x07" + struct.pack(">H", len(v)) + v
    total = _PRELUDE + len(block) + len(payload) + 4
    prelude = struct.pack(">II", total, len(block))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + block + payload
    return body + struct.pack(">I", zlib.crc32(body))


class EventStreamDecoder:
    """Split AWS event-stream bytes into frames and translate them into SSE-like events."""

    def __init__(self) -> None:
        self.invalid_lines = 0
        """Frames dropped: CRC mismatch, impossible prelude, bad headers or payload."""
        self.overlong_lines = 0
        self._buf = bytearray()
        self._resyncing = False

    # -- framing --------------------------------------------------------------------------

    def frames(self, data: bytes) -> list[Frame]:
        """Feed bytes; return the complete, valid frames now available."""
        self._buf += data
        out: list[Frame] = []
        buf = self._buf
        pos = 0
        while len(buf) - pos >= _PRELUDE:
            total, headers_len, prelude_crc = struct.unpack_from(">III", buf, pos)
            if (
                zlib.crc32(bytes(buf[pos : pos + 8])) != prelude_crc
                or not _MIN_FRAME <= total <= _MAX_FRAME
                or headers_len > min(_MAX_HEADERS, total - _MIN_FRAME)
            ):
                self._bad()
                pos += 1
                continue
            if len(buf) - pos < total:
                break
            frame = bytes(buf[pos : pos + total])
            (message_crc,) = struct.unpack_from(">I", frame, total - 4)
            if zlib.crc32(frame[:-4]) != message_crc:
                self._bad()
                pos += 1
                continue
            headers = decode_headers(frame[_PRELUDE : _PRELUDE + headers_len])
            pos += total
            self._resyncing = False
            if headers is None:
                self.invalid_lines += 1
                continue
            out.append(Frame(headers, frame[_PRELUDE + headers_len : -4]))
        del buf[:pos]
        return out

    def _bad(self) -> None:
        """Count a bad frame once per resynchronization, not once per skipped byte."""
        if not self._resyncing:
            self.invalid_lines += 1
            self._resyncing = True

    # -- Framer interface -----------------------------------------------------------------

    def feed(self, data: bytes) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        for frame in self.frames(data):
            event = self._event(frame)
            if event is not None:
                events.append(event)
        return events

    def flush(self) -> list[SSEEvent]:
        """End of body: leftover bytes are a cut-off frame (counted)."""
        if self._buf and not self._resyncing:
            self.invalid_lines += 1
        self._buf = bytearray()
        self._resyncing = False
        return []

    def _event(self, frame: Frame) -> SSEEvent | None:
        headers = frame.headers
        kind = headers.get(":message-type", "event")
        if kind in ("exception", "error"):
            etype = headers.get(":exception-type") or headers.get(":error-code") or "exception"
            message = headers.get(":error-message")
            obj = _json(frame.payload)
            if isinstance(obj, dict) and isinstance(obj.get("message") or obj.get("Message"), str):
                message = obj.get("message") or obj.get("Message")
            error = {"type": "error", "error": {"type": str(etype), "message": message}}
            return SSEEvent("error", json.dumps(error, ensure_ascii=False))
        if headers.get(":event-type", "chunk") != "chunk":
            return None  # e.g. initial-response: nothing for the interpreter
        obj = _json(frame.payload)
        raw = obj.get("bytes") if isinstance(obj, dict) else None
        if not isinstance(raw, str):
            self.invalid_lines += 1
            return None
        try:
            data = base64.b64decode(raw, validate=True).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            self.invalid_lines += 1
            return None
        inner = _json(data.encode())
        name = inner.get("type") if isinstance(inner, dict) and isinstance(inner.get("type"), str) else None
        return SSEEvent(name, data)


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


FRAMERS["eventstream"] = EventStreamDecoder
