"""The compiled fast path (capsem/native) reads exactly what the pure-Python path reads.

Each test reads the same bytes twice, once with the compiled `frame_plain` and once with it
turned off (the reference), and compares the framed events or the whole `ResponseSummary`: the
recorded fixture streams of every provider cut every way, and generated Anthropic streams whose
text deltas are written in every shape the compiled reader must take or hand back (escapes,
surrogates, control characters, invalid UTF-8, blanks, other keys, CR line ends, comments, ids).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addons.body import ResponseReader
from addons.framing import SSEDecoder
from addons.providers import parser_for
from capsem import native

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
STREAMS = sorted(FIXTURES.glob("*/*.sse"))
PROTOCOL = {"anthropic": "anthropic", "openai_chat": "openai_chat", "openai_responses": "openai_responses",
            "gemini": "gemini"}  # fmt: skip

pytestmark = pytest.mark.skipif(native.frame_plain is None, reason=f"fast path: {native.status()}")


def _read(protocol: str, pieces: list[bytes], compiled: bool, monkeypatch: pytest.MonkeyPatch):
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(native, "frame_plain", None)
        reader = ResponseReader(parser_for(protocol), framing="sse", content_encoding=None, status=200)
        for piece in pieces:
            reader.feed(piece)
        return reader.finish()


def _frame(pieces: list[bytes], compiled: bool, kind: int, monkeypatch: pytest.MonkeyPatch):
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(native, "frame_plain", None)
        decoder = SSEDecoder()
        decoder.native_kind = kind
        events = [ev for piece in pieces for ev in decoder.feed(piece)] + decoder.flush()
        return events, decoder.invalid_lines, decoder.overlong_lines


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def test_the_switch_turns_it_off(monkeypatch):
    """The reference really is another path: with the fast path off, a text delta is an event."""
    data = (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"hi"}}\n\n'
    )
    on, *_ = _frame([data], True, 1, monkeypatch)
    off, *_ = _frame([data], False, 1, monkeypatch)
    assert on == [["hi"]]
    assert [(e.event, e.data) for e in off] == [("content_block_delta", data[33:-2].decode())]


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_streams_read_the_same_cut_anywhere(path, monkeypatch):
    data = path.read_bytes()
    protocol = PROTOCOL[path.parent.name]
    whole = _read(protocol, [data], False, monkeypatch)
    assert _read(protocol, [data], True, monkeypatch) == whole
    for size in (1, 7, 64, 1000):
        pieces = [data[i : i + size] for i in range(0, len(data), size)]
        assert _read(protocol, pieces, True, monkeypatch) == _read(protocol, pieces, False, monkeypatch)
    crlf = data.replace(b"\n", b"\r\n")
    assert _read(protocol, [crlf], True, monkeypatch) == _read(protocol, [crlf], False, monkeypatch)


def _delta_data(text: str, *, spaced: bool, index: int) -> str:
    sep = (", ", ": ") if spaced else (",", ":")
    return json.dumps({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}},
                      separators=sep, ensure_ascii=spaced)  # fmt: skip


TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["", " ", "\\", '"', "\n", "é", "😀"]
)
ODD_DATA = st.sampled_from([
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\\ud83d"}}',  # lone surrogate
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\\udc00x"}}',
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\\ud83d\\ude00"}}',
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\tb"}}',  # raw control
    '{"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"x"}}',
    '{"type":"content_block_delta","index":-1,"delta":{"type":"text_delta","text":"x"}}',
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x","more":1}}',
    '{"type":"content_block_delta","index":0,"delta":{"text":"x","type":"text_delta"}}',
    '{"ty\\u0070e":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}',
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}} trailing',
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}      ',
    ' {"type" :"content_block_delta" , "index":3,"delta": {"type":"text_delta","text":"\\u00e9\\/\\b"} }',
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\\x"}}',
    '{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"t"}}',
    '{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"a"}}',
    '{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"f","input":{}}}',
    '{"type":"content_block_stop","index":1}',
    '{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}',
    '{"type": "ping"}',
    "not json",
    '{"type":"message_stop"}',
])  # fmt: skip


@st.composite
def anthropic_stream(draw) -> bytes:
    start = ('{"type":"message_start","message":{"id":"msg_1","model":"claude","usage":{"input_tokens":3,'
             '"output_tokens":1}}}')  # fmt: skip
    lines = [f"event: message_start\ndata: {start}\n\n".encode()]
    for _ in range(draw(st.integers(0, 12))):
        choice = draw(st.integers(0, 9))
        if choice < 5:
            data = _delta_data(draw(TEXT), spaced=draw(st.booleans()), index=draw(st.integers(0, 3))).encode()
        elif choice < 8:
            data = draw(ODD_DATA).encode()
        else:
            data = _delta_data("ab", spaced=False, index=0).encode()
            data = data.replace(b"ab", draw(st.sampled_from([b"\xff", b"\xc3", b"\xe2\x82", b"ok\xc3\xa9"])))
        event = draw(st.sampled_from([b"event: content_block_delta\n", b"", b"event: other\n", b"event:x\n"]))
        extra = draw(st.sampled_from([b"", b"", b"", b": comment\n", b"id: 7\n", b"\n", b"data: more\n"]))
        lines.append(event + extra + b"data: " + data + b"\n\n" + draw(st.sampled_from([b"", b"\n"])))
    lines.append(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    data = b"".join(lines)
    ending = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    return data.replace(b"\n", ending) if ending != b"\n" else data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=anthropic_stream(), cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_generated_anthropic_streams_read_the_same(data, cuts, monkeypatch):
    pieces = _cut(data, cuts)
    assert _read("anthropic", pieces, True, monkeypatch) == _read("anthropic", pieces, False, monkeypatch)
    plain_on = _frame(pieces, True, 0, monkeypatch)
    assert plain_on == _frame(pieces, False, 0, monkeypatch)  # plain framing: the same events


def test_a_text_run_is_each_text_of_the_reference(monkeypatch):
    """The lists the compiled framer hands over hold exactly the reference's non-empty texts."""
    texts = ["a", "", "é\n", '"q"', "😀", "\\"]
    data = b"".join(
        b"event: content_block_delta\ndata: " + _delta_data(t, spaced=i % 2 == 0, index=0).encode() + b"\n\n"
        for i, t in enumerate(texts)
    )
    events, *_ = _frame([data], True, 1, monkeypatch)
    assert events == [[t for t in texts if t]]


def _golden(folder: Path) -> list[str]:
    """`python -m tests.golden`'s dump of its in-process sessions (the export tests' session and
    every fixture stream in 7-byte chunks), written under `folder`."""
    from tests.cli.export_session import build_session
    from tests.golden import dump_db, fixture_session

    out: list[str] = []
    dump_db(build_session(folder, t0=1_800_000_000.0), out, volatile=False)
    fixtures = folder / "sessions" / "20261123-120000-f1f1"
    fixtures.mkdir(parents=True)
    dump_db(fixture_session(fixtures), out, volatile=False)
    return out


def test_the_golden_rows_are_the_same_with_the_fast_path_off(tmp_path, monkeypatch):
    on = _golden(tmp_path / "on")
    monkeypatch.setattr(native, "frame_plain", None)
    off = _golden(tmp_path / "off")
    assert len(on) > 100
    assert on == off


FIELD_TEXT = st.lists(
    st.sampled_from(['"text"', '"content"', '"reasoning_content"', '"reasoning"', '"delta"', '"texts"', '"',
                     ":", " ", "\t", "\\", "\\\"", "\\n", "\n", "a", "é", "😀", "{", "}", ",", '"arguments"',
                     '"response": "', '"text":"', '"partial_json" :\t"']),
    max_size=40,
).map("".join)  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(text=FIELD_TEXT)
def test_delta_fields_finds_what_the_regex_finds(text):
    from capsem.stream_scrub import _DELTA_RE

    assert native.delta_fields(text) == _DELTA_RE.findall(text)


def test_delta_fields_on_real_bodies():
    from capsem.stream_scrub import _DELTA_RE

    total = 0
    for path in STREAMS:
        text = path.read_text()
        found = native.delta_fields(text)
        assert found == _DELTA_RE.findall(text)
        total += len(found)
    assert total > 100  # the corpus holds fields to find


ESCAPED_TEXT = st.lists(
    st.sampled_from(['"text":"', '"content": "', '"', "\\n", "\\u00e9", "\\ud83d", "\\ude00", "\\ud83d\\ude00",
                     "\\u12", "\\uzzzz", "\\x", "\\/", "\\b", "\x01", "\t", "a", "😀", ","]),
    max_size=30,
).map("".join)  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(text=FIELD_TEXT | ESCAPED_TEXT)
def test_delta_channels_joins_what_the_python_scrubber_joins(text):
    from capsem import stream_scrub

    compiled = native.delta_channels(text)
    saved, native.delta_channels = native.delta_channels, None
    try:
        assert compiled == stream_scrub._joined(text)
    finally:
        native.delta_channels = saved


@settings(max_examples=500, deadline=None)
@given(
    noted=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 9)), max_size=3).map(sorted),
    chunks=st.lists(st.tuples(st.integers(0, 100), st.floats(-2, 5, allow_nan=False)), max_size=12),
    limit=st.integers(0, 8),
)
def test_note_ends_notes_what_the_python_loop_notes(noted, chunks, limit):
    from addons.recorder import streams

    started = 1.0005  # halves of a ms land on ties: round half to even, as Python's round
    ends, times = sorted(e for e, _ in chunks), [started + t / 2000 for _, t in chunks]

    def run(compiled: bool) -> list:
        read = streams.StreamRead(reader=None, started=started, chunks=list(noted))  # type: ignore[arg-type]
        read.held, read.held_sizes, read.held_at = [b"x" * len(ends)], [1] * len(ends), list(times)
        read.reader = type("R", (), {"feed_joined": lambda self, data, sizes: list(ends)})()
        saved, kept = native.note_ends, streams.MAX_CHUNKS
        native.note_ends, streams.MAX_CHUNKS = (saved if compiled else None), limit
        try:
            read.feed_held()
        finally:
            native.note_ends, streams.MAX_CHUNKS = saved, kept
        return read.chunks

    assert run(True) == run(False)
