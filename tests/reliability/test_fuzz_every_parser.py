"""Random byte streams, split at random points, thrown at every framing and every provider parser
(through the same ResponseReader capture uses, streamed and whole, every content encoding):
nothing may escape. A parse failure is a counted error in the summary, never an exception.

The parsers' entry points are guarded (a bug becomes a counted parse error, never an exception
reaching mitmproxy), so the guards are switched off here (`tests.providers.contract.unguarded`):
a bug the guard would hide fails the test."""

from __future__ import annotations

import gzip
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addons.body import ResponseReader
from addons.framing import FRAMERS, make_framer
from addons.providers import _PARSERS, parser_for
from tests.providers.contract import unguarded

PROTOCOLS = sorted(_PARSERS)
FRAMINGS = sorted(FRAMERS)

# pieces of real wire formats, so random streams often look almost right
_PIECES = [b"data: ", b"event: message_start\n", b"\n\n", b"\r\n", b"data: [DONE]\n\n", b"{", b"}", b"[", b"]",
           b'"type":"content_block_delta"', b'"choices":[{"delta":{"content":"x"}}]', b'"usage":{"input_tokens":3}',
           b'"candidates":[{"content":{"parts":[{"text":"a"}]}}]', b'"usageMetadata":{"promptTokenCount":1}',
           b'"message":{"tool_calls":[{"function":{"name":"f","arguments":{}}}]}', b'"done":true', b",", b":",
           b"\x00\x00\x00\x10", b"\xff\xfe", "ü🎉".encode(), b'"type":"response.completed"', b"null", b"\\"]  # fmt: skip

streams = st.lists(st.one_of(st.sampled_from(_PIECES), st.binary(max_size=24)), max_size=40).map(b"".join)


def splits(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=streams, cuts=st.lists(st.integers(0, 10_000), max_size=8), framing=st.sampled_from(FRAMINGS))
def test_every_framing_takes_any_bytes_any_split(data, cuts, framing):
    framer = make_framer(framing)
    events = [e for piece in splits(data, cuts) for e in framer.feed(piece)] + framer.flush()
    assert all(isinstance(e.data, str) for e in events)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=streams,
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
    protocol=st.sampled_from(PROTOCOLS),
    framing=st.sampled_from([*FRAMINGS, None]),  # None: a whole body
    encoding=st.sampled_from([None, "gzip", "br", "zstd", "deflate", "bogus"]),
    status=st.sampled_from([200, 400, 429, 500]),
    compress=st.booleans(),
)
def test_every_parser_through_the_reader_never_raises(
    data, cuts, protocol, framing, encoding, status, compress
):
    body = gzip.compress(data) if compress and encoding == "gzip" else data  # a lying or a true encoding
    parser = parser_for(protocol)
    with unguarded():
        reader = ResponseReader(parser, framing=framing, content_encoding=encoding, status=status,
                                preview_bytes=256, max_parse_bytes=4096)  # fmt: skip
        for piece in splits(body, cuts):
            reader.feed(piece)
        summary = reader.finish()
        parser.parse_request(data)  # request bodies too
    json.dumps(summary.usage.details())  # the breakdown is always serializable


@settings(max_examples=200, deadline=None)
@given(
    doc=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
        lambda c: (
            st.lists(c, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "model",
                        "messages",
                        "input",
                        "contents",
                        "tools",
                        "stream",
                        "usage",
                        "choices",
                        "content",
                        "role",
                        "type",
                        "text",
                        "function_call",
                        "tool_calls",
                        "name",
                        "arguments",
                        "call_id",
                        "id",
                        "parts",
                        "functionResponse",
                        "output",
                    ]
                ),
                c,
                max_size=5,
            )
        ),
        max_leaves=20,
    ),
    protocol=st.sampled_from(PROTOCOLS),
)
def test_every_parser_takes_any_json_shape(doc, protocol):
    parser = parser_for(protocol)
    raw = json.dumps(doc).encode()
    with unguarded():
        parser.parse_request(raw)
        parser.parse_response(raw, 200)
