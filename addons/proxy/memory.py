"""mitmdump's memory over a long WebSocket: large freed buffers go back to the system.

A Codex session sends its whole history on one socket every turn, so each message is larger than
the last (hundreds of KiB). glibc's malloc raises its mmap threshold each time such a block is
freed, so the next ones come from the heap and what they leave behind stays resident: mitmdump's
RSS climbed with the largest message seen even once capsem let every message go (see
`Capsem.websocket_message`). Fixing the threshold at 128 KiB (glibc's default start, no longer
moved) serves every larger block by mmap and returns it when it is freed. Elsewhere (not glibc)
nothing changes.

asyncio's socket transports ask each `recv` for 256 KiB, a fresh bytes object every read: above
that threshold each one would be an mmap, its pages faulted in and unmapped again, per read (on
one paced stream, ~1,000 page faults and ~15 % more of mitmdump's CPU than streaming mitmdump
spends). So reads ask for 64 KiB, what mitmproxy reads from its streams at a time anyway
(`reader.read(65535)`), and come from the heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from asyncio import selector_events

logger = logging.getLogger("addons.proxy")

M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter (malloc.h)."""
MMAP_THRESHOLD = 128 * 1024
READ_SIZE = 64 * 1024
"""What a socket read asks for: below `MMAP_THRESHOLD`."""


def return_large_blocks() -> bool:
    """Fix glibc's mmap threshold and make socket reads smaller than it (True when set); a no-op
    where there is no glibc `mallopt`."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    try:
        if not mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD):
            return False
    except Exception as exc:  # never let a memory setting stop capture
        logger.debug("capsem: mallopt failed: %r", exc)
        return False
    selector_events._SelectorTransport.max_size = READ_SIZE  # asyncio's own knob (256 KiB)
    return True
