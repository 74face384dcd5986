"""glibc's malloc settings of capsem's two processes (`addons/memory.py`), each tried in a fresh
interpreter: what a process does with a call's megabytes, and the page faults it pays for them."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CALLS = """
import resource, sys
from addons.memory import keep_large_blocks
if sys.argv[1] == "keep":
    assert keep_large_blocks()

def call():  # an answer of 3 MiB and three copies of it alive at once, all freed at the end
    copies = [b"x" * (3 * 2**20) for _ in range(4)]
    del copies

call()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    call()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(setting: str) -> int:
    done = subprocess.run([sys.executable, "-c", CALLS, setting], cwd=ROOT, capture_output=True, text=True,
                          check=True)  # fmt: skip
    return int(done.stdout)


@pytest.mark.skipif(not ctypes.util.find_library("c") or sys.platform != "linux", reason="glibc's mallopt")
def test_the_recorder_keeps_a_calls_copies_in_its_heap():
    """`keep_large_blocks`: the next call's copies reuse the heap the last one freed. glibc's own
    moving thresholds serve them by mmap or trim the freed heap, so every call faulted its
    megabytes in again (~9,000 faults for these three calls, page by page; none since)."""
    kept, default = _faults("keep"), _faults("default")
    assert default > 1000, default  # what the setting saves is there to save
    assert kept < 100, (kept, default)


FREEZE = """
import gc
import addons.proxy.capture  # mitmproxy's modules and capsem's: what mitmdump holds once started
from addons.memory import freeze_startup
before = len(gc.get_objects())
freeze_startup()
print(before, gc.get_freeze_count(), len(gc.get_objects()))
"""


def test_what_a_process_holds_once_started_is_left_out_of_later_collections():
    """`freeze_startup`: a full collection no longer walks (and faults in) the start's objects."""
    done = subprocess.run(
        [sys.executable, "-c", FREEZE], cwd=ROOT, capture_output=True, text=True, check=True
    )
    before, frozen, left = map(int, done.stdout.split())
    assert before > 20_000, before
    assert frozen >= before and left < 100, (before, frozen, left)
