"""ResponseReader: the same wire bytes, compressed every way and split anywhere, give one summary."""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import asdict
from pathlib import Path

import brotli
import pytest
import zstandard

from addons.body import ResponseReader
from addons.providers import parser_for

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
STREAMS = sorted((FIXTURES / "anthropic").glob("stream_*.sse")) + sorted(
    (FIXTURES / "openai_chat").glob("stream_*.sse")
)


def compress(data: bytes, encoding: str) -> bytes:
    for enc in [e.strip() for e in encoding.split(",")]:
        if enc == "gzip":
            data = gzip.compress(data)
        elif enc == "deflate":
            data = zlib.compress(data)
        elif enc == "br":
            data = brotli.compress(data)
        elif enc == "zstd":
            data = zstandard.ZstdCompressor().compress(data)
    return data


def read(path: Path, wire: bytes, encoding: str | None, pieces: list[bytes]) -> dict:
    protocol = path.parent.name
    reader = ResponseReader(parser_for(protocol), framing="sse", content_encoding=encoding, status=200)  # fmt: skip
    for piece in pieces:
        reader.feed(piece)
    summary = reader.finish()
    assert reader.decode_error is None
    return asdict(summary)


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_split_point_gives_the_same_summary(path: Path):
    wire = path.read_bytes()
    whole = read(path, wire, None, [wire])
    for cut in range(1, len(wire)):
        assert read(path, wire, None, [wire[:cut], wire[cut:]]) == whole, cut


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd", "gzip, br", "br, zstd"])
@pytest.mark.parametrize("path", STREAMS[:3] + STREAMS[-3:], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_compressed_streams_any_chunking(path: Path, encoding: str):
    raw = path.read_bytes()
    wire = compress(raw, encoding)
    whole = read(path, raw, None, [raw])
    assert read(path, wire, encoding, [wire]) == whole
    assert read(path, wire, encoding, [wire[i : i + 1] for i in range(len(wire))]) == whole
    assert read(path, wire, encoding, [wire[i : i + 5] for i in range(0, len(wire), 5)]) == whole


def test_json_body_parsed_at_end_with_preview():
    body = (FIXTURES / "anthropic" / "message_text.json").read_bytes()
    reader = ResponseReader(parser_for("anthropic"), framing=None, content_encoding="gzip",
                            status=200, preview_bytes=20)  # fmt: skip
    wire = gzip.compress(body)
    for i in range(0, len(wire), 3):
        reader.feed(wire[i : i + 3])
    summary = reader.finish()
    assert summary.complete and summary.message_id
    assert reader.preview.text().startswith(body[:20].decode())
    assert f"{len(body) - 20} more bytes" in reader.preview.text()


def test_lying_encoding_reads_identity_and_says_so():
    body = (FIXTURES / "openai_chat" / "stream_text_usage.sse").read_bytes()
    reader = ResponseReader(parser_for("openai_chat"), framing="sse", content_encoding="gzip",
                            status=200)  # fmt: skip
    reader.feed(body)
    summary = reader.finish()
    assert summary.complete and summary.text
    assert "identity" in (reader.decode_error or "")


def test_a_line_past_the_limit_leaves_the_call_incomplete():
    """A 33 MiB `data:` line (past SSEDecoder's 32 MiB) fed in 64 KiB pieces: dropped, counted,
    and the call is recorded incomplete even though `message_stop` came."""
    wire = (FIXTURES / "anthropic" / "stream_text.sse").read_bytes()
    head, _, rest = wire.partition(b"event: content_block_delta")
    huge = json.dumps(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}
    )
    huge = huge.replace('"x"', '"' + "x" * (33 * 2**20) + '"').encode()
    wire = head + b"event: content_block_delta\ndata: " + huge + b"\n\nevent: content_block_delta" + rest
    reader = ResponseReader(parser_for("anthropic"), framing="sse", content_encoding=None, status=200,
                            max_parse_bytes=len(wire) + 1)  # fmt: skip
    for i in range(0, len(wire), 65536):
        reader.feed(wire[i : i + 65536])
    summary = reader.finish()
    assert summary.text == "The capital of France is Paris."  # the dropped line's text is missing
    assert (summary.stop_reason, summary.parse_errors, summary.complete) == ("end_turn", 1, False)


@pytest.mark.parametrize(
    ("encoding", "compressed", "cap"),
    [
        (None, None, None),
        (None, None, 700),
        ("gzip", "gzip", None),
        (None, "gzip", None),
        ("zstd", "zstd", 700),
    ],
)
def test_feed_many_gives_what_feeding_one_by_one_gives(encoding, compressed, cap):
    """`feed_many` (one pass for several chunks; with nothing to decode, no step per chunk) gives
    the summary, the decoded end of each chunk, the kept body and its flags of feeding the chunks
    one by one: plain, compressed, sniffed, and cut by the decoded-size cap mid-batch."""
    wire = (FIXTURES / "anthropic" / "stream_thinking_tools.sse").read_bytes()
    body = compress(wire, compressed) if compressed else wire
    pieces = [body[i : i + 97] for i in range(0, len(body), 97)]
    pieces[3:3] = [b""]  # an empty chunk ends where the one before it did
    limits = {"max_parse_bytes": cap} if cap else {}

    def reader() -> ResponseReader:
        return ResponseReader(parser_for("anthropic"), framing="sse", content_encoding=encoding, status=200,
                              keep_bytes=1000, **limits)  # fmt: skip

    one, ends_one = reader(), []
    for piece in pieces:
        one.feed(piece)
        ends_one.append(one.decoded_bytes)
    assert ends_one[-1] == (cap or len(wire))
    summary = asdict(one.finish())
    for batch in (2, 5):
        many, ends_many = reader(), []
        for start in range(0, len(pieces), batch):
            ends_many += many.feed_many(pieces[start : start + batch])
        assert ends_many == ends_one
        assert asdict(many.finish()) == summary
        assert (many.body, many.body_truncated, many.raw_bytes) == (
            one.body,
            one.body_truncated,
            one.raw_bytes,
        )
        assert (many.decode_error, many.preview.text()) == (one.decode_error, one.preview.text())


@pytest.mark.parametrize("keep", [1, 97, 1000, 10**9])
def test_a_stream_is_kept_whole_up_to_keep_bytes(keep):
    """The decoded stream is kept as it came, up to `keep_bytes` (fed a chunk at a time and in
    batches), and flagged truncated only when more came."""
    wire = (FIXTURES / "anthropic" / "stream_thinking_tools.sse").read_bytes()
    pieces = [wire[i : i + 97] for i in range(0, len(wire), 97)]
    for batch in (1, 4):
        reader = ResponseReader(parser_for("anthropic"), framing="sse", content_encoding=None, status=200,
                                keep_bytes=keep)  # fmt: skip
        for start in range(0, len(pieces), batch):
            reader.feed_many(pieces[start : start + batch])
        assert reader.body == wire[:keep] and reader.body_truncated == (len(wire) > keep)
    exact = ResponseReader(parser_for("anthropic"), framing="sse", content_encoding=None, status=200,
                           keep_bytes=len(wire))  # fmt: skip
    exact.feed(wire[:100])
    buffer = bytearray(wire[100:200])
    exact.feed(buffer)
    buffer[:] = b"\0" * 100  # a buffer the caller reuses: what was fed is kept as it was
    exact.feed(wire[200:])
    assert exact.body == wire and not exact.body_truncated
