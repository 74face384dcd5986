"""The recorder process's input: length-prefixed frames on a file descriptor (its stdin), each a
msgpack batch of messages from mitmdump's sender thread (`addons/proxy/handover.py`)."""

from __future__ import annotations

import os
import select
from collections.abc import Callable

from addons.messages import Message, decode


class Frames:
    """Reads length-prefixed frames from a file descriptor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()
        self.eof = False

    def next(self, timeout: float | None) -> bytes | None:
        """The next frame; b"" when none came within `timeout` seconds; None at the end of input."""
        while True:
            frame = self.buffered()
            if frame is not None:
                return frame
            if self.eof:
                return None
            if timeout is not None:
                ready, _, _ = select.select([self.fd], [], [], timeout)
                if not ready:
                    return b""
            data = os.read(self.fd, 1024 * 1024)
            if not data:
                self.eof = True
            self.buf += data

    def buffered(self) -> bytes | None:
        """The next frame if it has been read whole already, else None."""
        buf = self.buf
        if len(buf) >= 4:
            size = int.from_bytes(buf[:4], "big")
            if len(buf) >= 4 + size:
                with memoryview(buf) as view:  # one copy, not a slice's and then bytes'
                    frame = bytes(view[4 : 4 + size])
                del buf[: 4 + size]
                return frame
        return None

    def batches(self, interval: float) -> Callable[[], list[Message] | None]:
        """The messages of the next frame and of every frame read with it: one batch, so the loop's
        steps per batch (feeding the readers, the status) run once per read, not once per frame
        (a flood comes as frames of ~64 KiB, written back to back)."""

        def batch() -> list[Message] | None:
            frame = self.next(interval)
            if not frame:
                return None if frame is None else []
            messages = decode(frame)
            while (more := self.buffered()) is not None:
                messages += decode(more)
            return messages

        return batch
