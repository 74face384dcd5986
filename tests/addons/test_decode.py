"""BodyDecoder: every encoding, any chunking, broken and hostile input, never an exception."""

from __future__ import annotations

import gzip
import zlib
from itertools import pairwise

import brotli
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from addons.decode import BodyDecoder, decode_body

PLAIN = ('data: {"text": "ünïcode 🎉 \\" quoted"}\n\n' * 200).encode()


def deflate_raw(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


ENCODED = {
    "gzip": gzip.compress(PLAIN),
    "x-gzip": gzip.compress(PLAIN),
    "deflate": zlib.compress(PLAIN),
    "br": brotli.compress(PLAIN),
    "zstd": zstandard.ZstdCompressor().compress(PLAIN),
    "identity": PLAIN,
    "gzip, br": brotli.compress(gzip.compress(PLAIN)),
    "br, zstd": zstandard.ZstdCompressor().compress(brotli.compress(PLAIN)),
}


def feed(decoder: BodyDecoder, pieces) -> bytes:
    return b"".join(decoder.decode(p) for p in pieces) + decoder.flush()


@pytest.mark.parametrize("encoding", list(ENCODED))
def test_whole_and_byte_by_byte(encoding):
    wire = ENCODED[encoding]
    for pieces in (
        [wire],
        [wire[i : i + 1] for i in range(len(wire))],
        [wire[i : i + 7] for i in range(0, len(wire), 7)],
    ):
        d = BodyDecoder(encoding)
        assert feed(d, pieces) == PLAIN
        assert d.error is None and not d.truncated


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_every_two_way_split(encoding):
    wire = ENCODED[encoding][:400] if encoding == "identity" else ENCODED[encoding]
    for cut in range(len(wire)):
        assert feed(BodyDecoder(encoding), [wire[:cut], wire[cut:]]) == PLAIN


def test_raw_deflate_multi_member_gzip_and_zstd_frames():
    assert decode_body(deflate_raw(PLAIN), "deflate") == (PLAIN, None)
    assert decode_body(gzip.compress(b"one ") + gzip.compress(b"two"), "gzip") == (b"one two", None)
    z = zstandard.ZstdCompressor()
    frames = b"".join(z.compress(part) for part in (b"a" * 10, b"b" * 10, b"c"))
    wire = [frames[i : i + 3] for i in range(0, len(frames), 3)]
    assert feed(BodyDecoder("zstd"), wire) == b"a" * 10 + b"b" * 10 + b"c"


def test_sync_flushed_events_decode_on_arrival():
    events = [f"data: event {i}\n\n".encode() for i in range(5)]
    gz = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    zs = zstandard.ZstdCompressor().compressobj()
    br = brotli.Compressor()
    decoders = {"gzip": BodyDecoder("gzip"), "zstd": BodyDecoder("zstd"), "br": BodyDecoder("br")}
    for ev in events:
        wires = {
            "gzip": gz.compress(ev) + gz.flush(zlib.Z_SYNC_FLUSH),
            "zstd": zs.compress(ev) + zs.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK),
            "br": br.process(ev) + br.flush(),
        }
        for name, decoder in decoders.items():
            assert decoder.decode(wires[name]) == ev, name


def test_lying_header_reads_identity():
    for pieces in ([PLAIN], [PLAIN[:1], PLAIN[1:]]):
        d = BodyDecoder("gzip")
        assert feed(d, pieces) == PLAIN
        assert "read as identity" in d.error


def test_corrupt_mid_stream_keeps_output_and_stops():
    body = b"".join(f"line {i} {i * 7919 % 104729}\n".encode() for i in range(20000))
    wire = bytearray(gzip.compress(body))
    wire[len(wire) // 2 :] = b"\x00\xff" * (len(wire) // 4 + 1)
    out, error = decode_body(bytes(wire), "gzip")
    # what decoded before the damage is kept (corrupt deflate data may decode to junk before zlib notices)
    assert len(out) > 1000 and body.startswith(out[:1000]) and error


def test_truncated_stream_is_flagged():
    d = BodyDecoder("gzip")
    out = feed(d, [ENCODED["gzip"][: len(ENCODED["gzip"]) // 2]])
    assert PLAIN.startswith(out) and d.truncated and "truncated" in d.error


def test_unknown_encoding_passes_through():
    out, error = decode_body(b"abc", "compress")
    assert out == b"abc" and "unsupported" in error


def test_sniffing_only_when_asked():
    assert decode_body(ENCODED["gzip"], None, sniff=True) == (PLAIN, None)
    assert decode_body(ENCODED["zstd"], None, sniff=True)[0] == PLAIN
    assert decode_body(ENCODED["gzip"], None)[0] == ENCODED["gzip"]
    d = BodyDecoder(None, sniff=True)
    assert feed(d, [ENCODED["gzip"][:1], ENCODED["gzip"][1:]]) == PLAIN
    assert d.applied == ["gzip(sniffed)"]
    assert decode_body(b"x", None, sniff=True) == (b"x", None)


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd", "deflate"])
def test_decompression_bomb_is_bounded(encoding):
    zeros = b"\0" * (64 * 1024 * 1024)
    wire = {"gzip": gzip.compress, "br": lambda d: brotli.compress(d, quality=1),
            "zstd": zstandard.ZstdCompressor().compress, "deflate": zlib.compress}[encoding](zeros)  # fmt: skip
    d = BodyDecoder(encoding, max_output=1024 * 1024)
    out = feed(d, [wire[i : i + 65536] for i in range(0, len(wire), 65536)])
    assert len(out) == 1024 * 1024 and "exceeds" in d.error


@settings(max_examples=300, deadline=None)
@given(
    encoding=st.sampled_from(["gzip", "deflate", "br", "zstd", "gzip, br", None, "weird"]),
    data=st.binary(max_size=300),
    cuts=st.lists(st.integers(0, 300), max_size=6),
    sniff=st.booleans(),
)
def test_random_bytes_never_raise(encoding, data, cuts, sniff):
    points = sorted({c for c in cuts if c <= len(data)} | {0, len(data)})
    feed(BodyDecoder(encoding, sniff=sniff), [data[a:b] for a, b in pairwise(points)])
