"""Peak memory of the addon's `ResponseReader` while it reads one huge streamed response.

Run in a fresh process (``python -m benchmarks.memory MIB``) so that the peak resident size
(`VmHWM`, this process image's; not `ru_maxrss`, which on Linux survives fork and exec, so a
child of a big benchmark run would report its parent's peak) belongs to this measurement only;
prints one JSON object. The stream is an
Anthropic Messages SSE body of about MIB MiB of ~1 KiB text deltas, built on the fly in 64 KiB
pieces (never held whole) and read with capsem's settings (`capture.max_parse_bytes` bounds
what is decoded and parsed; the rest is counted, not kept).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from addons.body import ResponseReader
from addons.providers import parser_for
from benchmarks.upstream import StreamSpec, stream_events
from capsem.settings import load

PIECE = 64 * 1024


def pieces(total: int, size: int = 1000) -> Iterator[bytes]:
    """An Anthropic stream of about `total` bytes, in pieces of about 64 KiB."""
    buf: list[bytes] = []
    held = 0
    for event in stream_events(StreamSpec.of_size(total, size), clock=lambda: 0.0):
        buf.append(event)
        held += len(event)
        if held >= PIECE:
            yield b"".join(buf)
            buf, held = [], 0
    if buf:
        yield b"".join(buf)


def peak_rss() -> int:
    """This process image's peak resident size in bytes (`VmHWM`; `ru_maxrss` where there is no /proc)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def measure(mib: int) -> dict:
    settings = load().capture
    reader = ResponseReader(
        parser_for("anthropic"),
        framing="sse",
        content_encoding=None,
        status=200,
        preview_bytes=settings.preview_bytes,
        max_parse_bytes=settings.max_parse_bytes,
    )
    before = psutil.Process().memory_info().rss
    started = time.perf_counter()
    for piece in pieces(mib * 2**20):
        reader.feed(piece)
    summary = reader.finish()
    seconds = time.perf_counter() - started
    peak = peak_rss()
    return {
        "body_mib": reader.raw_bytes / 2**20,
        "max_parse_mib": settings.max_parse_bytes / 2**20,
        "text_mib": len(summary.text.encode()) / 2**20,
        "rss_before_mib": before / 2**20,
        "peak_rss_mib": peak / 2**20,
        "growth_mib": (peak - before) / 2**20,
        "seconds": seconds,
        "parse_errors": summary.parse_errors,
        "complete": summary.complete,
        "note": reader.decode_error,
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 200)))
