"""Gemini parser: recorded shapes (tests/fixtures/gemini), every split point, both stream forms."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addons.body import ResponseReader
from addons.providers.collect import Collector
from addons.providers.gemini import RULES, Gemini, GeminiEvents, _parse_request

FIX = Path(__file__).parent.parent / "fixtures" / "gemini"
PARSER = Gemini()


def read(wire: bytes, pieces: list[bytes], framing: str) -> dict:
    reader = ResponseReader(PARSER, framing=framing, content_encoding=None, status=200)
    for piece in pieces:
        reader.feed(piece)
    return asdict(reader.finish())


@pytest.mark.parametrize(("name", "framing"), [("stream_thinking.sse", "sse"), ("stream_tools.sse", "sse"),
                                                ("array_stream.json", "json-array")])  # fmt: skip
def test_every_split_point(name, framing):
    wire = (FIX / name).read_bytes()
    whole = read(wire, [wire], framing)
    for cut in range(1, len(wire)):
        assert read(wire, [wire[:cut], wire[cut:]], framing) == whole, cut


def test_thinking_stream_running_totals():
    s = read((FIX / "stream_thinking.sse").read_bytes(), [(FIX / "stream_thinking.sse").read_bytes()], "sse")
    assert s["thinking"].startswith("**Considering First Interactions**") and "ünï 🎉" in s["thinking"]
    assert s["text"] == "Hi there! How can I help you today? <ok>"
    assert (s["model"], s["message_id"], s["stop_reason"], s["complete"]) == (
        "gemini-2.5-flash",
        "jHIPaZKcEoOR0-kPxMfy0Ag",
        "STOP",
        True,
    )
    usage = s["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["reasoning"]) == (2, 9 + 313, 313)
    assert usage["raw"]["totalTokenCount"] == 324


def test_function_calls_with_and_without_ids():
    wire = (FIX / "stream_tools.sse").read_bytes()
    s = read(wire, [wire], "sse")
    calls = [(c["call_id"], c["name"], json.loads(c["arguments"])) for c in s["tool_calls"]]
    assert calls == [
        ("flveizpn", "bash", {"command": 'ls -R "src"'}),
        ("gemini_read_1", "read", {"path": "a]b}.txt"}),
    ]
    assert s["usage"]["cache_read"] == 1024 and s["usage"]["input_tokens"] == 1964 and s["text"] == ""


def test_request_results_match_call_ids():
    info = PARSER.parse_request((FIX / "request_tool_results.json").read_bytes())
    assert (info.system_prompt, info.messages_count, info.tools_count) == ("Be terse.", 3, 2)
    assert [(r.call_id, r.tool_name, r.content) for r in info.tool_results] == [
        ("flveizpn", "bash", '{"output":"README.md\\nsrc"}'),
        ("gemini_read_1", "read", '{"output":"x"}'),
    ]


def test_array_stream_and_errors():
    wire = (FIX / "array_stream.json").read_bytes()
    s = read(wire, [wire[i : i + 1] for i in range(len(wire))], "json-array")
    assert s["text"] == 'Hello [there] {x} — done "quoted"' and s["usage"]["output_tokens"] == 7
    err = PARSER.parse_response((FIX / "error_429_array.json").read_bytes(), 429)
    assert (err.error_type, err.complete) == ("RESOURCE_EXHAUSTED", True)


def test_stream_vs_body_parity():
    wire = (FIX / "array_stream.json").read_bytes()
    streamed = read(wire, [wire], "json-array")
    whole = asdict(PARSER.parse_response(wire, 200))
    for key in ("text", "usage", "tool_calls", "stop_reason", "message_id", "model"):
        assert streamed[key] == whole[key]


def test_blocked_prompt():
    s = PARSER.parse_response(b'{"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 4}}',
                              200)  # fmt: skip
    assert (s.stop_reason, s.complete, s.usage.input_tokens) == ("SAFETY", True, 4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=50), st.builds(json.dumps, st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(
        ["candidates", "content", "parts", "text", "functionCall", "usageMetadata", "error", "response",
         "finishReason", "args", "name", "thought"]), c, max_size=4), max_leaves=12))), max_size=6))  # fmt: skip
def test_never_raises(datas):
    """The unguarded internals (the entry points would hide a bug behind their guards)."""
    chunks, collector = GeminiEvents(), Collector(RULES)
    for data in datas:
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        collector.add_all(chunks.chunk(obj))
        PARSER.read_response(data.encode(), 200)
        _parse_request(data.encode())
    collector.finish()
