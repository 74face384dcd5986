"""SSEDecoder: WHATWG framing at any chunking (capsem reference 9.1 cases and more)."""

from __future__ import annotations

import re
import tracemalloc
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addons.framing import SSEDecoder, SSEEvent, make_framer
from addons.framing_array import JSONArrayDecoder


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
    """Runs of ordinary events are read by two regex scans, one event alone by one; any mix of lines
    (comments, ids, several data lines, blank lines, garbage), cut anywhere, with LF or CRLF line
    ends, gives what reading every line does."""
    import addons.framing as framing

    wire = "".join(lines).encode()
    points = sorted({c for c in cuts if c <= len(wire)} | {0, len(wire)})
    pieces = [wire[a:b] for a, b in pairwise(points)]
    by_line = [line.encode() for line in lines]  # an id or a pending event from an earlier piece
    fast = _read(pieces), _read(by_line)
    crlf = [piece.replace(b"\n", b"\r\n") for piece in pieces]  # CRLF-only text: its CRs dropped at once
    assert (_read(crlf), _read([line.replace(b"\n", b"\r\n") for line in by_line])) == fast
    plain, one = framing._PLAIN_EVENTS, framing._PLAIN_EVENT
    framing._PLAIN_EVENTS = framing._PLAIN_EVENT = re.compile(r"(?!)")  # never match: every line by the rules
    try:
        assert (_read(pieces), _read(by_line)) == fast
    finally:
        framing._PLAIN_EVENTS, framing._PLAIN_EVENT = plain, one


class ByteByByte:
    """The JSON-array framing rules read one byte at a time: the oracle `JSONArrayDecoder`, which
    jumps over whole elements, strings and runs of bytes, must agree with at any chunking."""

    def __init__(self, max_element: int) -> None:
        self.max_element, self.invalid_lines, self.overlong_lines = max_element, 0, 0
        self.elem, self.depth, self.in_str, self.escape = bytearray(), 0, False, False

    def feed(self, data: bytes) -> list[SSEEvent]:
        events, stray = [], False
        for byte in (data[i : i + 1] for i in range(len(data))):
            if self.depth == 0:
                if byte == b"{":
                    self.depth, self.elem = 1, bytearray(byte)
                elif byte not in b" \t\r\n,[]":
                    stray = True
                continue
            self.elem += byte
            if self.escape:
                self.escape = False
            elif self.in_str:
                self.escape, self.in_str = byte == b"\\", byte != b'"'
            elif byte == b'"':
                self.in_str = True
            elif byte in (b"{", b"["):
                self.depth += 1
            elif byte in (b"}", b"]"):
                self.depth -= 1
                if self.depth == 0:
                    events.append(SSEEvent(None, self.elem.decode("utf-8", "replace")))
        if self.depth and len(self.elem) > self.max_element:
            self.overlong_lines += 1
            self.elem, self.depth, self.in_str, self.escape = bytearray(), 0, False, False
        self.invalid_lines += stray
        return events

    def flush(self) -> list[SSEEvent]:
        text = self.elem.decode("utf-8", "replace") if self.depth and self.elem else None
        self.elem, self.depth = bytearray(), 0
        return [] if text is None else [SSEEvent(None, text)]


def json_array_reads(framer, pieces: list[bytes]) -> tuple:
    events = [e for p in pieces for e in framer.feed(p)]
    return events, framer.flush(), framer.invalid_lines, framer.overlong_lines


JSON_BITS = [b"{", b"}", b"[", b"]", b'"', b"\\", b",", b" ", b"\r\n", b"a", b"\xc3\xa9", b"\xff", b'{"a":"x"}',
             b'"k":[1,{"t":"}]\\"["}]', b"{" * 14, b"}" * 14]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    bits=st.lists(st.sampled_from(JSON_BITS), max_size=60),
    cuts=st.lists(st.integers(0, 400), max_size=6),
    max_element=st.sampled_from([16, 64 * 2**20]),
)
def test_json_array_reads_as_byte_by_byte_at_any_chunking(bits, cuts, max_element):
    """Whole elements in one scan, strings and runs skipped at once: the same events, invalid and
    overlong counts and flushed rest as reading one byte at a time, however the bytes are cut
    (elements nested deeper than the one-scan pattern, split anywhere, too long, stray bytes)."""
    data = b"[" + b"".join(bits) + b"]"
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in pairwise(bounds)]
    expected = json_array_reads(ByteByByte(max_element), pieces)
    assert json_array_reads(JSONArrayDecoder(max_element), pieces) == expected
    whole = json_array_reads(ByteByByte(max_element), [data])
    assert json_array_reads(JSONArrayDecoder(max_element), [data]) == whole


def test_json_array_elements_nested_deeper_than_one_scan_reads():
    deep = b'{"a":' + b"[" * 30 + b'"]}"' + b"]" * 30 + b"}"
    wire = b"[" + deep + b",\r\n" + b'{"b":{"c":[1,"\\"}"]}}' + b"]"
    for size in (1, 3, len(wire)):
        events = json_array_reads(
            make_framer("json-array"), [wire[i : i + size] for i in range(0, len(wire), size)]
        )
        assert [e.data for e in events[0]] == [deep.decode(), '{"b":{"c":[1,"\\"}"]}}']
        assert events[1:] == ([], 0, 0)
