"""The recorder process's input: length-prefixed frames read from a pipe, the frames read together
handed on as one batch (the loop's per-batch steps once per read, not once per ~64 KiB frame)."""

from __future__ import annotations

import os

from addons.messages import Barrier, Chunks, encode
from addons.recorder.frames import Frames


def _frame(messages: list) -> bytes:
    data = encode(messages)
    return len(data).to_bytes(4, "big") + data


def test_frames_read_together_are_one_batch_and_a_partial_one_waits():
    r, w = os.pipe()
    try:
        frames = Frames(r)
        batch = frames.batches(1.0)
        first = [Chunks("f1", b"a" * 20_000, [20_000], [1.0])]  # (all within a pipe's 64 KiB)
        second = [Chunks("f1", b"b" * 10, [10], [2.0]), Barrier(3)]
        third = _frame([Barrier(4)])
        os.write(w, _frame(first) + _frame(second) + third[:5])  # the third frame cut short
        assert batch() == first + second
        assert batch() == []  # the cut frame is not whole within the timeout: nothing yet
        os.write(w, third[5:])
        assert batch() == [Barrier(4)]
        os.close(w)
        w = -1
        assert batch() is None  # the end of input
    finally:
        os.close(r)
        if w != -1:
            os.close(w)
