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


ASCII_FIELD_TEXT = st.lists(
    st.sampled_from(['"text":"', '"content" : "', '"', ":", "\\", '\\"', "\\n", "\\\n", "\n", "a", "}", ",",
                     '"texts"', '"tex"', '"reasoning"', '"reasoning_content":"', '"refusal":', '"delta"', "t",
                     "reasoning", '"arguments"', "text", " "]),
    max_size=60,
).map("".join)  # fmt: skip
"""One-byte text (what most bodies are): the walk that looks for a key at each quote and finds a
value's end by `memchr`."""


@settings(max_examples=1000, deadline=None)
@given(text=ASCII_FIELD_TEXT)
def test_delta_fields_finds_what_the_regex_finds_in_one_byte_text(text):
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
    saved, native.delta_channels = native.delta_channels, None  # the pure-Python path
    try:
        assert compiled == stream_scrub._joined(text)
    finally:
        native.delta_channels = saved


@settings(max_examples=1000, deadline=None)
@given(text=FIELD_TEXT | ASCII_FIELD_TEXT | ESCAPED_TEXT)
def test_delta_split_blanks_what_the_python_scrubber_blanks(text):
    """The body with its delta values blanked, and its channels, in one walk: what the Python
    path makes of them (equal strs are of one kind: a text left with no non-ASCII character is
    made one-byte again)."""
    from capsem import stream_scrub

    compiled = native.delta_split(text)
    names = ("delta_split", "delta_channels", "delta_places")
    saved = [getattr(native, name) for name in names]
    for name in names:
        setattr(native, name, None)
    try:
        assert compiled == stream_scrub._split(text)
    finally:
        for name, value in zip(names, saved, strict=True):
            setattr(native, name, value)


@settings(max_examples=1000, deadline=None)
@given(
    text=FIELD_TEXT | ASCII_FIELD_TEXT | ESCAPED_TEXT,
    keys=st.sets(
        st.sampled_from(
            ["text", "content", "reasoning_content", "arguments", "response", "partial_json", "texts"]
        )
    ),
)
def test_delta_places_places_what_the_python_scrubber_places(text, keys):
    """Where the values lie that `delta_channels` lists, read without decoding them (empty ones
    and those `json.loads` refuses left out): the Python scrubber's places, and as many per key
    as `delta_channels` lists."""
    from capsem import stream_scrub

    compiled = native.delta_places(text, keys)
    assert compiled == [(key, start, end) for key, start, end, _ in stream_scrub._spans(text, keys)]
    channels = native.delta_channels(text)
    for key in keys:
        assert sum(found == key for found, _, _ in compiled) == len(channels.get(key, []))


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


# -- the other providers' text chunks (OpenAI Chat, OpenAI Responses, Gemini) ---------------------

RAW_TEXT = st.sampled_from([
    b'"plain"', b'""', b'" "', b'"\\u00e9\\/\\b\\f\\r\\t\\n"', b'"\\"q\\" \\\\"', b'"\\ud83d\\ude00"', b'"\\ud83d"',
    b'"\\udc00x"', b'"\\ud83dx"', b'"a\tb"', b'"a\x01"', b'"\\x"', b'"\\u12"', b'"\\uzzzz"', b'"\xff"', b'"\xc3"',
    b'"\xe2\x82"', b'"ok\xc3\xa9"', b'"\xed\xa0\x80"', b'"\xf4\x90\x80\x80"', b'"\xc0\xaf"', b'"\xe0\x80\xaf"',
    "\"é😀 ünï\"".encode(), b'"12345678abcdefgh\\n12345678"', b"null", b"5", b"true", b"{}", b'["a"]',
])  # fmt: skip
RAW_VALUE = st.sampled_from([
    b"0", b"-0", b"12", b"-1.5e-3", b"1E+2", b"0.25", b"1e5", b"01", b"1.", b"-", b".5", b"1e", b"+1",
    b"123456789012345678901234567890", b"NaN", b"Infinity", b"true", b"false", b"null", b"nul", b"{}", b"[]",
    b'{"a":[1,{"b":null,"c":"\\u00e9"}],"d":-2.5E3}', b'[1, [2, [3, {"x": []}]], "s"]', b'"\\ud800"', b'"x\xff"',
    b'"\\ud83d\\ude00"', b"[" * 70 + b"]" * 70, b"[" * 20 + b"]" * 20, b'{"a" : 1 , "b" :[ ] }', b"{,}", b"[1,]",
    b'{"a":1,}', b'{"a"}', b'{"\\u0061":1}', b'"tab\tinside"',
])  # fmt: skip
RAW_PAIR = st.sampled_from([
    b'"extra":0', b'"x\\u0069d":"k"', b'"id":"chat-2"', b'"model":"m-2"', b'"\xc3\xa9t\xc3\xa9":[]',
    b'"responseId":"r2"', b'"modelVersion":null', b'"obfuscation":"ab"',
])  # fmt: skip
TEXT_MARK, VALUE_MARK, PAIR_MARK = "@@text@@", "@@value@@", "@@pair@@"


def _rarely(draw, n: int) -> bool:
    """True once in n + 1 draws (a plain integer draw would favour 0: true far more often)."""
    return draw(st.sampled_from([False] * n + [True]))


def _doc(draw, obj: dict) -> bytes:
    """`obj` as JSON text written any way: keys shuffled, blanks or none, ASCII or UTF-8, and the
    placeholders replaced by raw JSON drawn from the lists above (valid or not)."""

    def shuffled(value):
        if isinstance(value, dict):
            items = [(k, shuffled(v)) for k, v in value.items()]
            return dict(draw(st.permutations(items)))
        if isinstance(value, list):
            return [shuffled(v) for v in value]
        return value

    spaced = draw(st.booleans())
    text = json.dumps(shuffled(obj), separators=(", ", ": ") if spaced else (",", ":"),
                      ensure_ascii=draw(st.booleans()))  # fmt: skip
    if _rarely(draw, 3):
        text = text.replace(":", " :\t", 1)
    data = text.encode()
    while f'"{TEXT_MARK}"'.encode() in data:
        data = data.replace(f'"{TEXT_MARK}"'.encode(), draw(RAW_TEXT), 1)
    while f'"{VALUE_MARK}"'.encode() in data:
        data = data.replace(f'"{VALUE_MARK}"'.encode(), draw(RAW_VALUE), 1)
    sep = b", " if spaced else b","
    return (
        data.replace(f'"{PAIR_MARK}": 0'.encode(), draw(RAW_PAIR))
        .replace(f'"{PAIR_MARK}":0'.encode(), draw(RAW_PAIR))
        .replace(b"{" + sep + b"}", b"{}")
    )


def _text_value(draw, weird: bool):
    """A text: a drawn str, or in a weird chunk sometimes raw JSON of any shape (TEXT_MARK)."""
    return TEXT_MARK if weird and _rarely(draw, 2) else draw(TEXT)


def _sometimes(draw, weird: bool, obj: dict, extras: dict) -> dict:
    """`obj` with, in a weird chunk, some of `extras` added (each drawn in or not)."""
    for key, value in extras.items() if weird else ():
        if _rarely(draw, 5):
            obj[key] = value
    return obj


def _sse(draw, docs: list[bytes]) -> bytes:
    out = []
    for doc in docs:
        event = draw(st.sampled_from([b"", b"", b"", b"event: x\n"]))
        extra = draw(st.sampled_from([b""] * 60 + [b": comment\n", b"id: 7\n", b"\n", b"data: more\n"]))
        out.append(event + extra + b"data: " + doc + b"\n\n" + draw(st.sampled_from([b"", b"", b"\n"])))
    data = b"".join(out)
    ending = draw(st.sampled_from([b"\n", b"\n", b"\r\n", b"\r"]))
    return data.replace(b"\n", ending) if ending != b"\n" else data


@st.composite
def chat_stream(draw) -> bytes:
    docs = []
    for _ in range(draw(st.integers(1, 14))):
        weird = _rarely(draw, 2)  # one chunk in three has odd shapes; the others are plain text chunks
        delta: dict = {"content": _text_value(draw, weird)}
        delta = _sometimes(draw, weird, delta, {"role": "assistant", "refusal": draw(st.sampled_from([None, "no"])),
                                         "reasoning_content": draw(st.sampled_from([None, "r"])),
                                         "reasoning": draw(st.sampled_from([None, "r2"])),
                                         "tool_calls": draw(st.sampled_from([None, [{"index": 0, "id": "c1",
                                             "function": {"name": "f", "arguments": "{}"}}]])),
                                         "extra": VALUE_MARK})  # fmt: skip
        choice: dict = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        choice = _sometimes(draw, weird, choice, {"finish_reason": draw(st.sampled_from(["stop", "", "length", 3])),
                                           "index": draw(st.sampled_from([1, "0", 0.0, None, VALUE_MARK])),
                                           "delta": draw(st.sampled_from([None, 5, {}])), "more": VALUE_MARK})  # fmt: skip
        if _rarely(draw, 6):
            del choice["index"]
        chunk: dict = {"id": draw(st.sampled_from(["chat-1", "chat-1", "chat-1", "chat-2", "", "ch\\u0061t"])),
                       "object": "chat.completion.chunk", "created": 1753343173,
                       "model": draw(st.sampled_from(["m-1", "m-1", "m-1", "m-2"])),
                       "system_fingerprint": "fp_1", "choices": [choice], "usage": None, "obfuscation": "kq3"}  # fmt: skip
        chunk = _sometimes(draw, weird, chunk, {
            "usage": draw(st.sampled_from([{"prompt_tokens": 3, "completion_tokens": 2}, 5, []])),
            "choices": draw(st.sampled_from([[], [choice, choice], [5], None, {"index": 0}])),
            "error": draw(st.sampled_from([None, {"message": "bad", "type": "server_error"}, "x"])),
            "object": draw(st.sampled_from(["error", None, 5, "chat.completion.chunk"])),
            "id": draw(st.sampled_from([None, 5, ["x"]])), "model": draw(st.sampled_from([None, 7])),
            "x": VALUE_MARK, PAIR_MARK: 0,
        })  # fmt: skip
        if weird and _rarely(draw, 4):
            del chunk[draw(st.sampled_from(["id", "model", "choices"]))]
        docs.append(_doc(draw, chunk))
        if _rarely(draw, 12):
            docs.append(
                draw(st.sampled_from([b"[DONE]", b"not json", b"[1, 2]", b"{}", b'{"id": "chat-3"}']))
            )
    return _sse(draw, docs)


@st.composite
def responses_stream(draw) -> bytes:
    start = b'{"type":"response.created","response":{"id":"resp_1","model":"gpt-5","output":[]}}'
    docs = [start]
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.integers(0, 9))
        weird = _rarely(draw, 2)
        if kind < 7:
            event: dict = {"type": "response.output_text.delta", "sequence_number": 10,
                           "item_id": draw(st.sampled_from(["msg_1", "msg_1", "msg_2", "", "m\\u0073g_1"])),
                           "output_index": draw(st.sampled_from([0, 1])),
                           "content_index": draw(st.sampled_from([0, 0, 1, "0", -1, 1.0, None, VALUE_MARK])),
                           "delta": _text_value(draw, weird), "logprobs": [], "obfuscation": "Zx"}  # fmt: skip
            event = _sometimes(draw, weird, event, {"x": VALUE_MARK, PAIR_MARK: 0,
                                             "type": draw(st.sampled_from(["response.output_text.done",
                                                                           "response.refusal.delta"]))})  # fmt: skip
            if weird and _rarely(draw, 4):
                del event[draw(st.sampled_from(["item_id", "content_index", "delta", "type"]))]
            docs.append(_doc(draw, event))
        elif kind < 9:
            item = draw(st.sampled_from(["msg_1", "msg_2", "msg_3"]))
            done = {"type": "response.output_text.done", "item_id": item, "output_index": 0, "content_index": 0,
                    "text": draw(st.sampled_from(["whole", "", "plain"]))}  # fmt: skip
            docs.append(json.dumps(done).encode())
        else:
            docs.append(draw(st.sampled_from([b"[DONE]", b"not json", b'{"type":"response.in_progress"}'])))
    docs.append(b'{"type":"response.completed","response":{"id":"resp_1","model":"gpt-5","status":"completed",'
                b'"output":[{"type":"message","id":"msg_1","content":[{"type":"output_text","text":"x"}]}],'
                b'"usage":{"input_tokens":3,"output_tokens":2}}}')  # fmt: skip
    return _sse(draw, docs)


@st.composite
def gemini_stream(draw) -> bytes:
    docs = []
    for _ in range(draw(st.integers(1, 14))):
        weird = _rarely(draw, 2)
        parts = []
        for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3, 0])) if weird else 1):
            part: dict = {"text": _text_value(draw, weird)}
            if _rarely(draw, 2):
                part["thought"] = True
            part = _sometimes(draw, weird, part, {"thought": draw(st.sampled_from([True, False, None, "yes", 1])),
                                           "functionCall": draw(st.sampled_from([None, {"name": "f", "args": {}}])),
                                           "thoughtSignature": "c2ln", "x": VALUE_MARK})  # fmt: skip
            parts.append(part)
        content: dict = {"parts": parts, "role": "model"}
        content = _sometimes(draw, weird, content, {"parts": draw(st.sampled_from([None, 5, [5], [], "p"]))})
        candidate: dict = {"content": content, "index": 0}
        if _rarely(draw, 5):
            candidate["finishReason"] = "STOP"
        candidate = _sometimes(draw, weird, candidate, {
            "finishReason": draw(st.sampled_from(["STOP", "", None, 5, "MAX_TOKENS", "ST\\u004fP"])),
            "content": draw(st.sampled_from([None, 5, {}])), "safetyRatings": VALUE_MARK,
        })  # fmt: skip
        chunk: dict = {"candidates": [candidate],
                       "usageMetadata": {"promptTokenCount": 2, "totalTokenCount": draw(st.integers(3, 9)),
                                         "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 2}]},
                       "modelVersion": draw(st.sampled_from(["gemini-2.5-flash"] * 3 + ["gemini-2.5-pro"])),
                       "responseId": draw(st.sampled_from(["r1", "r1", "r1", "r2", "", "r\\u0031"]))}  # fmt: skip
        chunk = _sometimes(draw, weird, chunk, {
            "usageMetadata": draw(st.sampled_from([None, 5, {"totalTokenCount": 1e3}, VALUE_MARK])),
            "candidates": draw(st.sampled_from([[], [candidate, candidate], [5], None])),
            "error": draw(st.sampled_from([None, {"code": 429, "message": "quota", "status": "RESOURCE"}, "x"])),
            "response": draw(st.sampled_from([None, {"candidates": []}])),
            "promptFeedback": {"blockReason": "SAFETY"}, "responseId": draw(st.sampled_from([None, 5])),
            "createTime": "2026", "x": VALUE_MARK, PAIR_MARK: 0,
        })  # fmt: skip
        if weird and _rarely(draw, 4):
            del chunk[draw(st.sampled_from(["usageMetadata", "modelVersion", "responseId", "candidates"]))]
        docs.append(_doc(draw, chunk))
        if _rarely(draw, 12):
            docs.append(draw(st.sampled_from([b"[DONE]", b"not json", b"[1, 2]", b"{}"])))
    return _sse(draw, docs)


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("protocol", "streams"),
    [("openai_chat", chat_stream()), ("openai_responses", responses_stream()), ("gemini", gemini_stream())],
)
def test_generated_streams_of_the_other_providers_read_the_same(protocol, streams, monkeypatch):
    """Every shape the compiled reader must take or hand back, whole and cut at random."""

    real, taken = native.frame_plain, []

    def counting(*args):
        out = real(*args)
        taken.append(out is not None and any(type(ev) is list for ev in out))
        return out

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=streams, cuts=st.lists(st.integers(0, 10_000), max_size=6))
    def check(data, cuts):
        for pieces in ([data], _cut(data, cuts)):
            with monkeypatch.context() as m:
                m.setattr(native, "frame_plain", counting)
                compiled = _read(protocol, pieces, True, monkeypatch)
            assert compiled == _read(protocol, pieces, False, monkeypatch)

    check()
    # the compiled reader did take text chunks (not only hand them back); how many depends on what
    # hypothesis draws (28 seeds: 33 to 117 runs of OpenAI Chat chunks), so the bar is low
    assert sum(taken) > 5


CHAT_TEXT = (b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
             b'"delta":{"content":"%s"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x"}'
             b"\n\n")  # fmt: skip
RESPONSES_TEXT = (b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":1,'
                  b'"item_id":"msg_1","output_index":0,"content_index":0,"delta":"%s","obfuscation":"Zx"}\n\n')  # fmt: skip
GEMINI_TEXT = (b'data: {"candidates": [{"content": {"parts": [{"text": "%s"%s}],"role": "model"},"index": 0}],'
               b'"usageMetadata": {"totalTokenCount": %d},"modelVersion": "g","responseId": "r"}\n\n')  # fmt: skip


def _frame_with(events: list[bytes], kind: int, state) -> list:
    decoder = SSEDecoder()
    decoder.native_kind, decoder.native_state = kind, (lambda: state)
    return decoder.feed(b"".join(events)) + decoder.flush()


def test_the_other_providers_text_chunks_come_as_runs():
    """The runs the compiled framer hands over (so the comparisons above compare two paths): a
    Chat chunk whose id and model are the reader's, or the first chunk's after it was handed back;
    Responses deltas keyed by (item id, content index); Gemini texts, thoughts, the last usage."""
    chat = [CHAT_TEXT % t for t in (b"a", b"", b"\\u00e9", b"b")]
    assert _frame_with(chat, 2, ("c1", "m")) == [["a", "é", "b"]]
    first, *rest = _frame_with(chat, 2, (None, None))
    assert first.data.startswith('{"id":"c1"') and rest == [["é", "b"]]
    assert _frame_with(chat, 2, ("c1", "other"))[1:] == [["é", "b"]]

    responses = [RESPONSES_TEXT % t for t in (b"a", b"b")] + [
        (RESPONSES_TEXT % b"c").replace(b"msg_1", b"msg_2")
    ]
    assert _frame_with(responses, 3, None) == [[("msg_1", 0), "a", "b"], [("msg_2", 0), "c"]]

    gemini = [GEMINI_TEXT % (b"t", b', "thought": true', 5), GEMINI_TEXT % (b"x", b"", 7)]
    assert _frame_with(gemini, 4, ("r", "g")) == [[["x"], ["t"], b'{"totalTokenCount": 7}', None]]


@pytest.mark.parametrize(
    ("protocol", "chunk", "fields"),
    [
        ("openai_chat", CHAT_TEXT % b"x", ((b'"id":', b'"c1"'), (b'"model":', b'"m"'))),
        (
            "gemini",
            GEMINI_TEXT % (b"x", b"", 5),
            ((b'"responseId": ', b'"r"'), (b'"modelVersion": ', b'"g"')),
        ),
    ],
)
def test_a_chunk_whose_id_or_model_changed_is_the_readers(protocol, chunk, fields, monkeypatch):
    """The reader says a new id or model (`Meta`): the compiled reader hands such a chunk back, in
    the same pass as the chunks before it (the first non-empty one is the summary's)."""
    for key, value in fields:
        for before in (b'""', b"null", b'"other"', b"5", b'"c\\u0031"', b'"r\\u0031"'):
            data = chunk.replace(key + value, key + before) + chunk + chunk.replace(key + value, key + before)
            off = _read(protocol, [data], False, monkeypatch)
            assert _read(protocol, [data], True, monkeypatch) == off
            if before in (b'""', b"null"):
                assert value.strip(b'"').decode() in (off.message_id, off.model)


@settings(max_examples=500, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"\r", b"\n", b"\r\n", b"data: x", b"\xff"]), max_size=20).map(
        b"".join
    )
)
def test_crlf_to_lf_is_the_framers_translate(data):
    """LF for CRLF when no CR stands alone (a CR ending the data may be half of a CRLF: None)."""
    from addons.framing import _LONE_CR

    assert native.crlf_to_lf(data) == (None if _LONE_CR.search(data) else data.translate(None, b"\r"))
