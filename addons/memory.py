"""glibc's malloc settings of capsem's two processes (elsewhere, not glibc, nothing changes), and
what their start leaves for Python's cyclic garbage collector (`freeze_startup`).

mitmdump (`return_large_blocks`): its memory over a long WebSocket, large freed buffers going
back to the system.

A Codex session sends its whole history on one socket every turn, so each message is larger than
the last (hundreds of KiB). glibc's malloc raises its mmap threshold each time such a block is
freed, so the next ones come from the heap and what they leave behind stays resident: mitmdump's
RSS climbed with the largest message seen even once capsem let every message go (see
`Capsem.websocket_message`). Fixing the threshold at 128 KiB (glibc's default start, no longer
moved) serves every larger block by mmap and returns it when it is freed.

asyncio's socket transports ask each `recv` for 256 KiB, a fresh bytes object every read: above
that threshold each one would be an mmap, its pages faulted in and unmapped again, per read (on
one paced stream, ~1,000 page faults and ~15 % more of mitmdump's CPU than streaming mitmdump
spends). So reads ask for 64 KiB, what mitmproxy reads from its streams at a time anyway
(`reader.read(65535)`), and come from the heap; for the same reason the sender thread's frames
to the recorder are at most ~64 KiB (`addons/proxy/outbox.py: BATCH_BYTES`).

The recorder process (`keep_large_blocks`): the opposite, as its work is per call, on whole
bodies of MiBs (see the function).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""glibc's `mallopt` parameters (malloc.h)."""
MMAP_THRESHOLD = 128 * 1024
TRIM_THRESHOLD = 8 * 1024 * 1024
"""mitmdump's: up to 8 MiB kept free at its heap's top (glibc's 128 KiB once the mmap threshold is
fixed): the chunks a round of the sender thread frees together were given back, and the event
loop's next reads faulted the pages in again (with 250 ms rounds, 1 to 67 faults on a 3 MB flood
in 11 runs, 1 to 34 in 14 with this setting)."""
READ_SIZE = 64 * 1024
"""What a socket read asks for: below `MMAP_THRESHOLD`."""
RECORDER_MMAP_THRESHOLD = 32 * 1024 * 1024
RECORDER_TRIM_THRESHOLD = 64 * 1024 * 1024
"""The recorder's: blocks up to 32 MiB from the heap, up to 64 MiB of it kept free at its top."""


def _mallopt(*settings: tuple[int, int]) -> bool:
    """glibc's `mallopt` for each (parameter, value); False where there is none or one fails."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    try:
        return all(mallopt(parameter, value) for parameter, value in settings)
    except Exception as exc:  # never let a memory setting stop capture
        logger.debug("capsem: mallopt failed: %r", exc)
        return False


def return_large_blocks() -> bool:
    """Fix glibc's mmap and trim thresholds and make socket reads smaller than the first (True
    when set); a no-op where there is no glibc `mallopt`."""
    if not _mallopt((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return False
    from asyncio import selector_events  # (mitmdump's; the recorder process has no event loop)

    selector_events._SelectorTransport.max_size = READ_SIZE  # asyncio's own knob (256 KiB)
    return True


def keep_large_blocks() -> bool:
    """The recorder process's setting (True when set): its blocks up to 32 MiB come from the heap,
    which keeps up to 64 MiB free at its top. Each call's body passes through several copies of
    its size (the frames read, the joined chunks, decoded, scrubbed, compressed): served by mmap,
    each was faulted in page by page and unmapped again (~1,500 page faults a 2 MiB answer)."""
    return _mallopt((M_MMAP_THRESHOLD, RECORDER_MMAP_THRESHOLD), (M_TRIM_THRESHOLD, RECORDER_TRIM_THRESHOLD))


def freeze_startup() -> None:
    """Leave what the process holds now (its modules, mitmproxy's and capsem's state: objects that
    live as long as it does) out of every later collection of the cyclic garbage collector
    (`gc.freeze`). A full collection walks every object it tracks: in mitmdump, hundreds of
    thousands from its start, touched page by page ("CPU, fifteenth pass" in docs/PERFORMANCE.md:
    ~3,900 page faults on the event loop during one paced stream whose chunks waited a second
    for their round); after this it walks what traffic made."""
    gc.freeze()
