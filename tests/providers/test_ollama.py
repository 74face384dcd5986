"""Ollama parser: NDJSON split at every byte gives one summary; stream/body parity; never raises."""

from __future__ import annotations

import json
from dataclasses import asdict

from hypothesis import given, settings
from hypothesis import strategies as st

from addons.body import ResponseReader
from addons.providers.collect import Collector
from addons.providers.ollama import RULES, Ollama, OllamaEvents, _parse_request

LINES = [
    {"model": "qwen3:8b", "created_at": "t", "message": {"role": "assistant", "content": "", "thinking": "hmm ü"},
     "done": False},
    {"model": "qwen3:8b", "created_at": "t", "message": {"role": "assistant", "content": "Hello 🎉 {x}"}, "done": False},
    {"model": "qwen3:8b", "created_at": "t", "message": {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "ls", "arguments": {"dir": "src \"a\""}}}]}, "done": False},
    {"model": "qwen3:8b", "created_at": "t", "message": {"role": "assistant", "content": ""}, "done": True,
     "done_reason": "stop", "prompt_eval_count": 26, "eval_count": 290, "total_duration": 5},
]  # fmt: skip
WIRE = b"".join(json.dumps(line, ensure_ascii=False).encode() + b"\n" for line in LINES)


def read(pieces: list[bytes]) -> dict:
    reader = ResponseReader(Ollama(), framing="ndjson", content_encoding=None, status=200)
    for piece in pieces:
        reader.feed(piece)
    return asdict(reader.finish())


def test_every_split_point_and_fields():
    whole = read([WIRE])
    for cut in range(1, len(WIRE)):
        assert read([WIRE[:cut], WIRE[cut:]]) == whole, cut
    assert (whole["text"], whole["thinking"], whole["stop_reason"], whole["complete"]) == (
        "Hello 🎉 {x}",
        "hmm ü",
        "stop",
        True,
    )
    assert [(c["call_id"], c["name"], c["arguments"]) for c in whole["tool_calls"]] == [
        ("ollama_ls_0", "ls", '{"dir":"src \\"a\\""}')
    ]
    assert (whole["usage"]["input_tokens"], whole["usage"]["output_tokens"]) == (26, 290)
    assert asdict(Ollama().parse_response(WIRE, 200)) == whole


def test_request_defaults_and_results():
    info = _parse_request(json.dumps({"model": "m", "messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"function": {"name": "ls"}}]},
        {"role": "tool", "content": "out"}]}).encode())  # fmt: skip
    assert info.stream is True and info.messages_count == 3
    assert [(r.call_id, r.tool_name, r.content) for r in info.tool_results] == [("ollama_ls_0", "ls", "out")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["message", "done", "response", "error", "eval_count", "model"]),
                                st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                                             lambda c: st.lists(c, max_size=3) | st.dictionaries(
                                                 st.sampled_from(["content", "tool_calls", "function", "arguments",
                                                                  "name", "thinking"]), c, max_size=3),
                                             max_leaves=10), max_size=4), max_size=5))  # fmt: skip
def test_unguarded_internals_never_raise(objs):
    lines, collector = OllamaEvents(), Collector(RULES)
    for obj in objs:
        collector.add_all(lines.chunk(obj))
        Ollama().read_response(json.dumps(obj).encode(), 200)
        _parse_request(json.dumps(obj).encode())
    collector.finish()
