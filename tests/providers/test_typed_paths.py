"""The typed fast path of each stream reader (`addons/providers/wire_shapes.py`) reads exactly what
its general path reads: the same wire, read once as shipped and once with `events` replaced by
`general` (every event decoded as a dict), gives the same summary, field for field. Odd events
(unknown, missing, duplicated fields, values of every wrong type, JSON msgspec refuses, bytes that
are not UTF-8, chunks split anywhere) and random mutations of every recorded event are fed to both,
unguarded (a bug the guard would hide fails). The fast path must also be taken for the recorded
content events, or the comparison would prove nothing."""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addons.body import ResponseReader
from addons.providers import parser_for
from addons.providers.anthropic import AnthropicEvents
from addons.providers.gemini import GeminiEvents
from addons.providers.openai_chat import ChatEvents
from addons.providers.openai_responses import ResponsesEvents
from tests.providers.contract import unguarded

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
READERS: dict[str, Any] = {
    "anthropic": AnthropicEvents,
    "openai_chat": ChatEvents,
    "openai_responses": ResponsesEvents,
    "gemini": GeminiEvents,
}
FOLDERS = {"anthropic": "anthropic", "openai_chat": "openai_chat", "openai_responses": "openai_responses",
           "gemini": "gemini"}  # fmt: skip
HOT = {  # the recorded event each fast path exists for
    "anthropic": "stream_text.sse",
    "openai_chat": "stream_text_usage.sse",
    "openai_responses": "stream_text_reasoning.sse",
    "gemini": "stream_thinking.sse",
}

CONTENT = {  # what marks those events
    "anthropic": b'"text_delta"',
    "openai_chat": b'"delta":{"content"',
    "openai_responses": b'"response.output_text.delta"',
    "gemini": b'"text"',
}


def read(protocol: str, pieces: list[bytes], *, general: bool, framing: str = "sse") -> dict:
    """The summary of these raw chunks, by the reader as shipped or by its general path only."""
    cls = READERS[protocol]
    patch = mock.patch.object(cls, "events", cls.general) if general else nullcontext()
    with patch, unguarded():
        reader = ResponseReader(parser_for(protocol), framing=framing, content_encoding=None, status=200)
        for piece in pieces:
            reader.feed(piece)
        return asdict(reader.finish())


def both(protocol: str, pieces: list[bytes], framing: str = "sse") -> dict:
    typed = read(protocol, pieces, general=False, framing=framing)
    assert typed == read(protocol, pieces, general=True, framing=framing)
    return typed


def sse(*datas: str, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return "".join(f"{head}data: {d}\n\n" for d in datas).encode()


def fixture_events(protocol: str) -> list[tuple[str | None, str]]:
    """(event name, data) of every JSON object event of the provider's recorded SSE streams."""
    out = []
    for path in sorted((FIXTURES / FOLDERS[protocol]).glob("*.sse")):
        for block in path.read_bytes().decode().replace("\r\n", "\n").split("\n\n"):
            lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if lines.get("data", "").startswith("{"):
                out.append((lines.get("event"), lines["data"]))
    return out


@pytest.mark.parametrize("protocol", list(READERS))
def test_the_fast_path_reads_the_recorded_content_events(protocol: str) -> None:
    wire = (FIXTURES / FOLDERS[protocol] / HOT[protocol]).read_bytes()
    cls = READERS[protocol]
    with mock.patch.object(cls, "general", autospec=True, side_effect=cls.general) as general:
        summary = read(protocol, [wire], general=False)
    events, content = wire.count(b"data:"), wire.count(CONTENT[protocol])
    assert summary["text"] and summary["parse_errors"] == 0 and content >= 2
    assert general.call_count <= events - content, (general.call_count, events, content)


@pytest.mark.parametrize("protocol", list(READERS))
def test_every_recorded_stream_reads_the_same_both_ways(protocol: str) -> None:
    for path in sorted((FIXTURES / FOLDERS[protocol]).glob("*.sse")):
        wire = path.read_bytes()
        both(protocol, [wire])
        both(protocol, [wire[i : i + 5] for i in range(0, len(wire), 5)])


WRONG = ['null', '1', '1.5', '-0', 'true', '"x"', '""', '[]', '["a"]', '{}', '{"x":1}',
         '123456789012345678901234567890', '1e400', '"\\ud83d"', '"\\u0000"']  # fmt: skip
"""Values of every JSON type (and ones msgspec refuses or reads differently) for a field."""

ANTHROPIC_ODD = [
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a","x":[1,{"y":2}]},"z":null}',
    '{"type":"content_block_delta","index":0}',
    '{"index":0,"delta":{"type":"text_delta","text":"no type"}}',
    '{"type":"content_block_delta","delta":5,"delta":{"type":"text_delta","text":"dup"}}',
    '{"type":"content_block_delta","delta":{"type":"text_delta","text":"dup"},"delta":5}',
    '{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","text":"b"}}',
    '{"type":"content_block_delta","type":"ping","delta":{"type":"text_delta","text":"b"}}',
    '{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"a\\""}}',
    '{"type":"content_block_delta","index":"1","delta":{"type":"input_json_delta","partial_json":":1}"}}',
    '{"type":"content_block_delta","index":2,"delta":{"type":"thinking_delta","thinking":"hm"}}',
    '{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}',
    '{"type":"content_block_delta","index":0,"delta":{"type":"new_delta","text":"t"}}',
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"nan"},"n":NaN}',
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"raw\tcontrol"}}',
    '["content_block_delta"]',
    "not json",
    "[DONE]",
]
ANTHROPIC_FIELDS = [("type",), ("index",), ("delta",), ("delta", "type"), ("delta", "text"),
                    ("delta", "thinking"), ("delta", "partial_json")]  # fmt: skip
ANTHROPIC_EVENT = {"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": "t", "thinking": "h", "partial_json": "{}"}}  # fmt: skip


def with_value(obj: dict, path: tuple[str, ...], raw: str) -> str:
    """`obj` as JSON with the field at `path` set to the raw JSON text `raw`."""
    marker = "\x00MARK\x00"
    copy = json.loads(json.dumps(obj))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = marker
    return json.dumps(copy).replace(json.dumps(marker), raw)


def wrong_types(event: dict, fields: list[tuple[str, ...]]) -> list[str]:
    return [with_value(event, path, raw) for path in fields for raw in WRONG]


def placed(protocol: str, odd: bytes, fixture: str | None = None) -> list[bytes]:
    """The hot fixture with `odd` after its first third, before its last event (a terminal one, after
    which events are ignored) and after its end (a usage report last is the one that counts)."""
    wire = (FIXTURES / FOLDERS[protocol] / (fixture or HOT[protocol])).read_bytes()
    sep = b"\r\n\r\n" if b"\r\n" in wire else b"\n\n"
    blocks = wire.split(sep)
    cut = max(1, len(blocks) // 3)
    last = len(blocks) - 1 - (blocks[-1].strip() == b"")  # (the text after the last separator)
    return [sep.join(blocks[:cut]) + sep + odd + sep.join(blocks[cut:]),
            sep.join(blocks[:last]) + sep + odd + sep.join(blocks[last:]), wire + odd]  # fmt: skip


def both_placed(protocol: str, odd: bytes, fixture: str | None = None) -> None:
    for wire in placed(protocol, odd, fixture):
        both(protocol, [wire])


@pytest.mark.parametrize(
    "data", ANTHROPIC_ODD + wrong_types(ANTHROPIC_EVENT, ANTHROPIC_FIELDS), ids=lambda d: d[:60]
)
def test_anthropic_odd_events_read_the_same_both_ways(data: str) -> None:
    tool = sse(
        '{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"n"}}'
    )
    for name in (None, "content_block_delta", "error"):
        both_placed("anthropic", tool + sse(data, event=name))


CALL = {"index": 0, "id": "call", "function": {"name": "f", "arguments": "{"}}
DELTA = {"content": "t", "reasoning_content": "r", "reasoning": "s", "refusal": None, "tool_calls": [CALL]}
CHAT_EVENT = {"id": "c", "object": "chat.completion.chunk", "model": "m", "usage": None,
              "choices": [{"index": 0, "finish_reason": None, "delta": DELTA}]}  # fmt: skip
CHAT_FIELDS = (
    [("id",), ("model",), ("object",), ("usage",), ("choices",), ("error",)]
    + [("choices", 0, key) for key in ("index", "finish_reason", "delta")]
    + [("choices", 0, "delta", key) for key in DELTA]
)
CHAT_ODD = [
    '{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"a"}}],"error":null}',
    '{"id":"c","model":"m","choices":[{"index":1,"delta":{"content":"b"}},{"index":0,"delta":{"content":"c"}}]}',
    '{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"a"}}, 5]}',
    '{"id":"c","model":"m","choices":[{"index":0.0,"delta":{"content":"f"}}]}',
    '{"id":"c","model":"m","choices":[{"index":false,"delta":{"content":"g"}}]}',
    '{"id":"c","model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}',
    '{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":[{"type":"text","text":"p"}]}}]}',
    '{"id":"c","model":"m","choices":[{"index":0,"delta":{"refusal":"no"}}]}',
    '{"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":{"x":1}}',
    '{"id":"c","model":"m","object":"error","message":"bad"}',
    '{"id":"d","model":"n","choices":[{"index":0,"delta":{"content":"dup"}}],"choices":null}',
    "[DONE]",
    "not json",
]


@pytest.mark.parametrize("data", CHAT_ODD + wrong_types(CHAT_EVENT, CHAT_FIELDS), ids=lambda d: d[:60])
def test_chat_odd_events_read_the_same_both_ways(data: str) -> None:
    both_placed("openai_chat", sse(data))


RESPONSES_EVENT = {"type": "response.output_text.delta", "item_id": "msg", "output_index": 0,
                   "content_index": 0, "summary_index": 0, "delta": "t"}  # fmt: skip
RESPONSES_FIELDS = [(key,) for key in RESPONSES_EVENT]
RESPONSES_TYPES = ["response.output_text.delta", "response.reasoning_summary_text.delta", "response.reasoning_text.delta",
                   "response.function_call_arguments.delta", "response.custom_tool_call_input.delta"]  # fmt: skip
RESPONSES_ODD = [
    '{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"{\\"x\\""}',
    '{"type":"response.function_call_arguments.delta","output_index":1,"delta":":2}"}',
    '{"type":"response.function_call_arguments.delta","item_id":"nope","output_index":7,"delta":"lost"}',
    '{"type":"response.custom_tool_call_input.delta","output_index":"1","delta":"patch"}',
    '{"type":"response.reasoning_text.delta","item_id":"rs","content_index":0,"delta":"raw reasoning"}',
    '{"type":"response.reasoning_text.delta","item_id":"rs_1","content_index":0,"delta":"beside the summary"}',
    '{"type":"response.function_call_arguments.delta","item_id":"fc_68d9303f2ea08193a7a3a5e4f5b36e3d0f3f6b5bdbbe0ec1",'
    '"output_index":7,"delta":"by item id"}',
    '{"type":"response.output_text.delta","output_index":3,"content_index":"1","delta":"no item"}',
    '{"type":"response.reasoning_summary_text.delta","item_id":"rs","summary_index":2,"delta":"think"}',
    '{"type":"response.output_text.delta","item_id":"","output_index":1.0,"delta":"empty item"}',
    '{"type":"response.refusal.delta","item_id":"msg","delta":"no"}',
    '{"delta":"no type"}',
    '{"type":"response.output_text.delta","delta":"a","delta":"b"}',
]


@pytest.mark.parametrize(
    "data",
    RESPONSES_ODD
    + [
        odd
        for kind in RESPONSES_TYPES
        for odd in wrong_types({**RESPONSES_EVENT, "type": kind}, RESPONSES_FIELDS)
    ],
    ids=lambda d: d[:60],
)
def test_responses_odd_events_read_the_same_both_ways(data: str) -> None:
    for name in (None, "response.output_text.delta", "response.function_call_arguments.delta"):
        both_placed("openai_responses", sse(data, event=name))
        both_placed("openai_responses", sse(data, event=name), "stream_gpt5_tool.sse")  # (calls started)


GEMINI_EVENT = {"candidates": [{"content": {"parts": [{"text": "t", "thought": True,
                                                       "functionCall": {"name": "f", "args": {"a": 1}}}]},
                                "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 2}, "responseId": "r", "modelVersion": "m"}  # fmt: skip
GEMINI_FIELDS = [("candidates",), ("usageMetadata",), ("responseId",), ("modelVersion",), ("error",),
                 ("response",), ("candidates", 0, "content"), ("candidates", 0, "finishReason"),
                 ("candidates", 0, "content", "parts")] + [
    ("candidates", 0, "content", "parts", 0, key) for key in ("text", "thought", "functionCall")]  # fmt: skip
GEMINI_ODD = [
    '{"candidates":[{"content":{"parts":[{"text":"a"},"x",{"text":"b"}]}}]}',
    '{"candidates":[5,{"content":{"parts":[{"text":"second"}]}}]}',
    '{"candidates":[{"content":{"parts":[{"text":"a"}]}}],"error":{"code":429,"status":"RESOURCE_EXHAUSTED"}}',
    '{"response":{"candidates":[{"content":{"parts":[{"text":"code assist"}]}}],"responseId":"ca"}}',
    '{"candidates":[],"promptFeedback":{"blockReason":"SAFETY"}}',
    '{"candidates":[{"content":{"parts":[{"text":"u"}]}}],"usageMetadata":{"a":1},"usageMetadata":null}',
    '{"candidates":[{"content":{"parts":[{"text":"u"}]}}],"usageMetadata":{"promptTokenCount":9},'
    '"usageMetadata":{"promptTokenCount":7}}',
    '{"candidates":[{"content":{"parts":[{"text":"u"}]}}],"usageMetadata":{"s":"\\ud83d"}}',
    '[{"candidates":[{"content":{"parts":[{"text":"in an array"}]}}]}]',
    "[DONE]",
    "",
]


@pytest.mark.parametrize("data", GEMINI_ODD + wrong_types(GEMINI_EVENT, GEMINI_FIELDS), ids=lambda d: d[:60])
def test_gemini_odd_events_read_the_same_both_ways(data: str) -> None:
    both_placed("gemini", sse(data).replace(b"\n", b"\r\n"))
    both("gemini", [b"[" + data.encode() + b",\r\n" + json.dumps(GEMINI_EVENT).encode() + b"]"], "json-array")


@pytest.mark.parametrize("protocol", list(READERS))
def test_bytes_that_are_not_utf8_and_any_split_read_the_same_both_ways(protocol: str) -> None:
    wire = placed(protocol, b'data: {"type":"\xff\xfe","text":"\xc3"}\n\n')[0]
    wire = wire.replace(b"text", b"te\xe9xt", 1).replace(b"ing", b"in\xf0\x9fg", 1)
    whole = both(protocol, [wire])
    for size in (1, 2, 7, 64):
        assert both(protocol, [wire[i : i + size] for i in range(0, len(wire), size)]) == whole


# -- random mutations of every recorded event ---------------------------------------------

VOCAB = ["content_block_delta", "text_delta", "thinking_delta", "input_json_delta", "message_stop",
         "response.output_text.delta", "response.reasoning_summary_text.delta", "response.completed",
         "STOP", "error", "tool_use", "chat.completion.chunk", "stop", "length"]  # fmt: skip
LEAVES = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=4) | st.sampled_from(VOCAB)  # fmt: skip
JSON_VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.sampled_from(["type", "text", "index", "x"]), inner, max_size=3),
                           max_leaves=6)  # fmt: skip


def mutate(draw: Any, value: Any) -> Any:
    """`value` with random subtrees replaced, keys dropped or added, list items appended."""
    if draw(st.integers(0, 9)) == 0:
        return draw(JSON_VALUES)
    if isinstance(value, dict):
        out = {k: mutate(draw, v) for k, v in value.items() if draw(st.integers(0, 7))}
        if draw(st.integers(0, 4)) == 0:
            out[draw(st.sampled_from(["x", "error", *value]))] = draw(JSON_VALUES)
        return out
    if isinstance(value, list):
        return [mutate(draw, v) for v in value] + (
            [draw(JSON_VALUES)] if draw(st.integers(0, 4)) == 0 else []
        )
    return value


@pytest.mark.parametrize("protocol", list(READERS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_recorded_events_read_the_same_both_ways(protocol: str, data: st.DataObject) -> None:
    events = fixture_events(protocol)
    odd = []
    for _ in range(data.draw(st.integers(1, 5))):
        name, text = data.draw(st.sampled_from(events))
        odd.append(sse(json.dumps(mutate(data.draw, json.loads(text))), event=name))
    both_placed(protocol, b"".join(odd))
