"""A model call's chunks packed into `Chunks` messages (`addons/proxy/outbox.py: pack`) are read
exactly as the same chunks sent one `Chunk` each: the same summary, body, chunk ends and times,
and the same rows, however the chunks are cut, packed and batched, compressed or not."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addons.body import ResponseReader
from addons.messages import Chunks, Route
from addons.providers import parser_for
from addons.proxy.outbox import pack
from addons.recorder.streams import StreamRead
from tests.recording import RecorderHarness, ended, head, response

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
STREAMS = {p.parent.name: p.read_bytes() for p in sorted(FIXTURES.glob("*/*.sse"))}  # one per protocol


def _reader(protocol: str, gzip: bool) -> StreamRead:
    reader = ResponseReader(parser_for(protocol), framing="sse", content_encoding="gzip" if gzip else None,
                            status=200)  # fmt: skip
    return StreamRead(reader, started=100.0)


def _wire(data: bytes, cuts: list[int], gzip: bool) -> list[bytes]:
    bounds = sorted({c % len(data) for c in cuts} - {0})
    pieces = [data[a:b] for a, b in zip([0, *bounds], [*bounds, len(data)], strict=True)]
    if not gzip:
        return pieces
    gz = zlib.compressobj(wbits=31)
    out = [gz.compress(p) + gz.flush(zlib.Z_SYNC_FLUSH) for p in pieces]
    out[-1] += gz.flush()
    return out


def _state(read: StreamRead) -> tuple:
    summary = read.reader.finish()
    return summary, read.reader.body, read.chunks, read.first_content


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    protocol=st.sampled_from(sorted(STREAMS)),
    cuts=st.lists(st.integers(1, 10**6), max_size=40),
    batches=st.lists(st.integers(1, 12), max_size=30),
    gzip=st.booleans(),
)
def test_packed_chunks_read_as_the_chunks_one_by_one(protocol, cuts, batches, gzip):
    wire = _wire(STREAMS[protocol], cuts, gzip)
    times = [100.0 + n * 0.0017 for n in range(len(wire))]
    one_by_one, packed = _reader(protocol, gzip), _reader(protocol, gzip)
    for data, at in zip(wire, times, strict=True):  # the reference: one `Chunk` each, fed at once
        if one_by_one.take(data, at):
            one_by_one.feed_held()
    start, sizes = 0, iter(batches)
    while start < len(wire):  # batches of random length, each flow's chunks packed as `take` packs
        end = start + next(sizes, 5)
        for message in pack(
            [("k", at, data) for data, at in zip(wire[start:end], times[start:end], strict=True)]
        ):
            assert isinstance(message, Chunks)
            packed.take_many(message.data, message.sizes, message.times)
        if packed.held:
            packed.feed_held()
        start = end
    assert _state(packed) == _state(one_by_one)


def test_the_recorder_writes_the_same_rows_from_chunks_and_from_one_chunk_each(tmp_path):
    route = Route("anthropic", "anthropic")
    data = STREAMS["anthropic"]
    wire = [data[n : n + 13] for n in range(0, len(data), 13)]

    def record(folder: Path, packed: bool) -> list[list[dict]]:
        folder.mkdir()
        h = RecorderHarness(folder)
        req = head("s1", started=1000.0)
        resp = response(200, "text/event-stream", started=1000.01)
        h.open(req, resp, route, "sse")
        for start in range(0, len(wire), 9):  # batches of 9 chunks
            items = [("s1", 1000.02 + n / 1e3, wire[n]) for n in range(start, min(start + 9, len(wire)))]
            if packed:
                h.feed(*pack(items))
            else:
                for key, at, chunk in items:
                    h.chunk(key, at, chunk)
            h.recorder.feed_held()
        h.feed(pack([("nobody", 1000.5, b"data: {}\n\n")])[0])  # no reader: nothing to read it, no failure
        h.close(ended(req, resp=resp, at=1000.9, route=route, streamed=True, response_size=len(data),
                      request_body=json.dumps({"model": "m", "stream": True}).encode()))  # fmt: skip
        rows = [
            h.rows("SELECT chunks FROM response_chunks"),
            h.rows(
                "SELECT model, text_content, input_tokens, output_tokens, stop_reason, complete, "
                "error_message, ttft_ms, response_bytes FROM model_calls"
            ),
        ]
        assert h.recorder.failures == 0
        h.shutdown()
        return rows

    one_by_one, packed = record(tmp_path / "chunk", False), record(tmp_path / "chunks", True)
    assert packed == one_by_one and len(json.loads(packed[0][0]["chunks"])) > 1
