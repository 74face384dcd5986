"""SSEDecoder: WHATWG framing at any chunking (capsem reference 9.1 cases and more)."""

from __future__ import annotations

import re
import tracemalloc
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addons.framing import SSEDecoder, SSEEvent, make_framer


def decode(*pieces: bytes) -> list[SSEEvent]:
    d = SSEDecoder()
    out = [ev for p in pieces for ev in d.feed(p)]
    return out + d.flush()


def ev(data: str, event: str | None = None, id: str | None = None) -> SSEEvent:
    return SSEEvent(event, data, id)


def test_basic_shapes():
    assert decode(b"data: hello\n\n") == [ev("hello")]
    assert decode(b"event: ping\ndata: {}\n\n") == [ev("{}", "ping")]
    assert decode(b"data: a\n\ndata: b\n\n") == [ev("a"), ev("b")]
    assert decode(b"data: a\ndata: b\n\n") == [ev("a\nb")]
    assert decode(b"data:x\n\n") == [ev("x")]
    assert decode(b"data:  two spaces\n\n") == [ev(" two spaces")]
    assert decode(b"data: a:b:c\n\n") == [ev("a:b:c")]


def test_line_endings():
    assert decode(b"data: a\r\n\r\ndata: b\r\rdata: c\n\r\n") == [ev("a"), ev("b"), ev("c")]
    assert decode(b"data: a\r", b"\n", b"\r\n") == [ev("a")]
    assert decode(b"data: a\r", b"\ndata: b\r", b"\r") == [ev("a\nb")]


def test_comments_unknown_fields_and_no_carry_over():
    assert decode(b": keepalive\nretry: 10\nfoo: bar\nevent: x\ndata: 1\n\ndata: 2\n\n") == [
        ev("1", "x"),
        ev("2"),
    ]
    assert decode(b"id: 7\ndata: a\n\ndata: b\n\n") == [ev("a", id="7"), ev("b", id="7")]


def test_empty_and_blank():
    assert decode(b"") == []
    assert decode(b"\n\n\n\n") == []
    assert decode(b"event: only\n\n") == []
    assert decode(b"data:\n\n") == [ev("")]


def test_flush_emits_unterminated_event():
    assert decode(b"data: tail") == [ev("tail")]
    assert decode(b"data: a\n\ndata: tail\n") == [ev("a"), ev("tail")]


def test_unicode_is_not_a_line_break_and_split_chars_survive():
    text = "a\u2028b\u0085c 🎉 ünï"
    wire = f"data: {text}\n\n".encode()
    for cut in range(len(wire)):
        assert decode(wire[:cut], wire[cut:]) == [ev(text)]


def test_garbage_then_valid_and_bom():
    d = SSEDecoder()
    assert d.feed(b"\xff\xfe\x00\n\ndata: ok\n\n") == [ev("ok")]
    assert d.invalid_lines == 1
    assert decode(b"\xef\xbb", b"\xbfdata: bom\n\n") == [ev("bom")]


def test_long_lines():
    big = "x" * 100_000
    assert decode(f"data: {big}\n\n".encode()) == [ev(big)]
    d = SSEDecoder(max_line=100)
    out = d.feed(b"data: " + b"y" * 150) + d.feed(b"y" * 500 + b"\ndata: ok\n\n") + d.flush()
    assert out == [ev("ok")] and d.overlong_lines == 1


def feed_measured(framer, chunks: list[bytes]) -> tuple[list[SSEEvent], int]:
    """The events, and the bytes the framer allocated while fed (the sum of each feed's peak):
    what it copies, a deterministic measure of its work."""
    tracemalloc.start()
    events, work = [], 0
    try:
        for chunk in chunks:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            out = framer.feed(chunk)
            work += tracemalloc.get_traced_memory()[1] - before
            events += out
    finally:
        tracemalloc.stop()
    return events + framer.flush(), work


@pytest.mark.parametrize(
    ("framing", "head", "tail"),
    [("sse", b"data: ", b"\n\n"), ("ndjson", b'{"a":"', b'"}\n'), ("json-array", b'[{"a":"', b'"}]')],
)
def test_a_long_line_in_small_chunks_costs_linear_work(framing, head, tail):
    """A 512 KiB line in 256-byte chunks: each byte is copied a few times, not once per chunk.

    (Framers that rebuild their pending buffer on every chunk copy ~1000x the line here.)
    """
    size = 512 * 1024
    wire = head + b"x" * size + tail
    framer = make_framer(framing)
    events, work = feed_measured(framer, [wire[i : i + 256] for i in range(0, len(wire), 256)])
    assert work < 32 * size
    payload = "x" * size
    assert [e.data for e in events] == [payload if framing == "sse" else '{"a":"' + payload + '"}']
    assert framer.overlong_lines == framer.invalid_lines == 0


def test_overlong_line_fed_in_pieces_is_dropped_once():
    d = SSEDecoder(max_line=1000)
    pieces = [b"data: " + b"y" * 100] + [b"y" * 100] * 50 + [b"\ndata: ok\n\n"]
    out = [ev for p in pieces for ev in d.feed(p)] + d.flush()
    assert out == [ev("ok")] and d.overlong_lines == 1


def test_one_byte_chunks():
    wire = b'event: message_start\r\ndata: {"a": 1}\r\n\r\n: c\r\nevent: x\rdata: 2\r\r'
    assert decode(*[wire[i : i + 1] for i in range(len(wire))]) == [
        ev('{"a": 1}', "message_start"),
        ev("2", "x"),
    ]


_text = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=30
)


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(st.tuples(st.one_of(st.none(), _text.filter(lambda s: s == s.lstrip(" "))),
                              st.lists(_text, min_size=1, max_size=3)), max_size=6),
    ending=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    cuts=st.lists(st.integers(0, 2000), max_size=8),
)  # fmt: skip
def test_roundtrip_any_split(events, ending, cuts):
    wire = b""
    for name, lines in events:
        if name is not None:
            wire += b"event: " + name.encode() + ending
        for line in lines:
            wire += b"data: " + line.encode() + ending
        wire += ending
    points = sorted({c for c in cuts if c <= len(wire)} | {0, len(wire)})
    got = decode(*[wire[a:b] for a, b in pairwise(points)])
    assert got == [ev("\n".join(lines), name) for name, lines in events]


_ORDINARY = st.sampled_from(["data: x\n\n", "event: e\ndata: {\"a\": 1}\n\n", "event: \ndata: x\n\n",
                             "data: \n\n", "data: é 🎉\n\n", "event: other\ndata: y\n\n"])  # fmt: skip
_ODD = st.sampled_from(["data:nospace\n", "data\n", "event: e\n", "id: 7\n", "id: 8\0\n", ": comment\n",
                        "retry: 10\n", "junk: 1\n", "\n", "data: two\n"])  # fmt: skip


def _read(pieces: list[bytes]) -> tuple[list[SSEEvent], int]:
    decoder = SSEDecoder()
    events = [e for piece in pieces for e in decoder.feed(piece)] + decoder.flush()
    return events, decoder.invalid_lines


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_ORDINARY | _ORDINARY | _ODD, max_size=40), cuts=st.lists(st.integers(0, 600), max_size=8)
)
def test_ordinary_events_read_at_once_are_what_the_line_by_line_rules_give(lines, cuts):
    """Runs of ordinary events are read by two regex scans; any mix of lines (comments, ids,
    several data lines, blank lines, garbage), cut anywhere, gives what reading every line does."""
    import addons.framing as framing

    wire = "".join(lines).encode()
    points = sorted({c for c in cuts if c <= len(wire)} | {0, len(wire)})
    pieces = [wire[a:b] for a, b in pairwise(points)]
    by_line = [line.encode() for line in lines]  # an id or a pending event from an earlier piece
    fast = _read(pieces), _read(by_line)
    plain = framing._PLAIN_EVENTS
    framing._PLAIN_EVENTS = re.compile(r"(?!)")  # never matches: every line by the rules
    try:
        assert (_read(pieces), _read(by_line)) == fast
    finally:
        framing._PLAIN_EVENTS = plain
