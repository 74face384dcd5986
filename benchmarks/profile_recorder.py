"""Where the recorder process spends its CPU on streamed calls: `python -m benchmarks.profile_recorder`.

The messages mitmdump's side would hand over for `streams` concurrent streamed Anthropic calls
of the streaming benchmark's shape (`StreamOpened`, one chunk per SSE event, `FlowEnded`),
interleaved and cut into batches as the sender thread cuts them (each flow's chunks of a batch
packed into one `Chunks`, as `Outbox.take` packs them), msgpack-encoded, are decoded and
handled by a real `Recorder` and `SessionWriter` in this process (the recorder loop's work, the
pipe's read aside), first timed, then under cProfile. Prints CPU per stream and per MiB, and the
functions that take the most time. Load on the machine moves the seconds, hardly the shares.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import time
from pathlib import Path

from addons.memory import keep_large_blocks
from addons.messages import (
    FlowEnded,
    Message,
    RequestHead,
    ResponseHead,
    Route,
    StreamOpened,
    decode,
    encode,
)
from addons.proxy.outbox import ChunkItem, pack
from addons.recorder.recorder import Recorder
from benchmarks.client import request_bytes
from benchmarks.upstream import StreamSpec, stream_events
from capsem.redact import Scrubber
from capsem.settings import defaults
from capsem.store.writer import SessionWriter

_SSE = (("content-type", "text/event-stream"),)


def batches(streams: int, spec: StreamSpec, per_batch: int) -> list[bytes]:
    """The encoded batches for `streams` calls of `spec`, events interleaved across streams."""
    body = request_bytes(1, spec, absolute=False).split(b"\r\n\r\n", 1)[1]
    now = time.time()
    opened: list[Message] = []
    events = []
    for s in range(streams):
        head = RequestHead(key=f"f{s}", conn=f"c{s}", started=now, scheme="http", host="127.0.0.1", port=1,
                           method="POST", path="/v1/messages", query="", http_version="HTTP/1.1",
                           headers=(("content-type", "application/json"),))  # fmt: skip
        opened.append(
            StreamOpened(head, ResponseHead(200, _SSE, now), Route("anthropic", "anthropic"), "sse")
        )
        events.append((head, list(stream_events(spec))))  # each delta stamped when built: no two alike
    flat: list[Message | ChunkItem] = list(opened)
    for i in range(max(len(e) for _, e in events)):
        flat += [(head.key, now, e[i]) for head, e in events if i < len(e)]
    for head, e in events:
        flat.append(FlowEnded(request=head, ended=now, route=Route("anthropic", "anthropic"), request_body=body,
                              request_size=len(body), response=ResponseHead(200, _SSE, now),
                              response_size=sum(map(len, e)), streamed=True, first_chunk_at=now))  # fmt: skip
    return [encode(pack(flat[i : i + per_batch])) for i in range(0, len(flat), per_batch)]


def handle(encoded: list[bytes], workdir: Path, *, ledger: bool = True) -> float:
    """Decode and handle every batch with a fresh recorder (`ledger`: with the hash chain and its
    signed heads, as capsem records); CPU seconds used."""
    writer = SessionWriter(workdir / f"session-{time.monotonic_ns()}.db", Scrubber(), ledger=ledger)
    recorder = Recorder(writer, defaults().capture)
    started = time.process_time()
    for data in encoded:
        for message in decode(data):
            recorder.handle(message)
        recorder.feed_held()
        if writer.pending:
            writer.commit()
    writer.commit()
    used = time.process_time() - started
    writer.close()
    return used


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_recorder", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch", type=int, default=200, help="messages per batch")
    parser.add_argument("--sort", default="tottime", help="pstats order: tottime, cumulative...")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    keep_large_blocks()  # the recorder process's malloc setting: without it, each body's copies fault in
    spec = StreamSpec(args.events, args.size)
    encoded = batches(args.streams, spec, args.batch)
    mib = sum(map(len, encoded)) / 2**20
    with tempfile.TemporaryDirectory(prefix="capsem-profile-") as tmp:
        handle(encoded, Path(tmp))  # warm: imports, prices, tokenizer
        best = min(handle(encoded, Path(tmp)) for _ in range(3))
        print(f"{args.streams} streams x {args.events} events of ~{args.size} B: {mib:.1f} MiB encoded; "
              f"CPU {best:.3f} s (best of 3) = {best / args.streams * 1000:.1f} ms per stream, "
              f"{mib / best:.1f} MiB/s")  # fmt: skip
        profile = cProfile.Profile(time.process_time)  # CPU time: a busy machine does not count
        profile.enable()
        handle(encoded, Path(tmp))
        profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats(args.sort).print_stats(args.top)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
