"""AWS event-stream frames (`application/vnd.amazon.eventstream`) as Bedrock streams them.

Written from the format's specification, apart from capsem's own decoder, so a mistake in one
does not hide in the other. A frame (all integers big-endian)::

    total length u32 | headers length u32 | prelude CRC32 (of the 8 bytes before it)
    headers: name length u8, name, value type u8 (7 = string), value length u16, value
    payload | message CRC32 (of every byte before it)
"""

from __future__ import annotations

import binascii
import struct

__all__ = ["encode_frame"]

_STRING = 7
_MAX_NAME = 255
_MAX_VALUE = 32767


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode("utf-8"), value.encode("utf-8")
    if not 0 < len(raw_name) <= _MAX_NAME or len(raw_value) > _MAX_VALUE:
        raise ValueError(f"event-stream header {name!r} is too long or empty")
    return (
        struct.pack(">B", len(raw_name)) + raw_name + struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    )


def encode_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One frame with string headers (in the given order) and correct CRCs."""
    block = b"".join(_header(name, value) for name, value in headers.items())
    total = 4 + 4 + 4 + len(block) + len(payload) + 4
    prelude = struct.pack(">II", total, len(block))
    message = prelude + struct.pack(">I", binascii.crc32(prelude)) + block + payload
    return message + struct.pack(">I", binascii.crc32(message))
