"""OpenAI Chat Completions parser: requests, whole bodies, streams at any chunking, and fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addons.framing import SSEEvent
from addons.providers.openai_chat import OpenAIChat, _parse_request, usage_from_openai
from addons.records import RequestInfo, ResponseSummary, ToolCall, ToolResult, Usage
from tests.providers.contract import Contract, run_events

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "openai_chat"
PARSER = OpenAIChat()


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def ref_events(body: bytes) -> list[SSEEvent]:
    """Reference framing for the LF-only, data-only fixtures (independent of SSEDecoder)."""
    events = []
    for block in body.decode("utf-8").split("\n\n"):
        if block.strip():
            data = [line[6:] if line.startswith("data: ") else line[5:] for line in block.split("\n")]
            events.append(SSEEvent(None, "\n".join(data)))
    return events


def run(events: list[SSEEvent]) -> ResponseSummary:
    return run_events(PARSER, events)


def chunk(delta: dict | None = None, finish: str | None = None, **extra) -> SSEEvent:
    obj = {
        "id": "chatcmpl-1",
        "model": "m",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }
    return SSEEvent(None, json.dumps({**obj, **extra}))


def data(obj: object) -> SSEEvent:
    return SSEEvent(None, obj if isinstance(obj, str) else json.dumps(obj))


# -- expected summaries ---------------------------------------------------------------------

DETAILS = {
    "reasoning_tokens": 0,
    "audio_tokens": 0,
    "accepted_prediction_tokens": 0,
    "rejected_prediction_tokens": 0,
}
U_TEXT = {
    "prompt_tokens": 14,
    "completion_tokens": 8,
    "total_tokens": 22,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": DETAILS,
}
U_TOOLS = {
    "prompt_tokens": 82,
    "completion_tokens": 51,
    "total_tokens": 133,
    "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
    "completion_tokens_details": DETAILS,
}
U_REASONING = {
    "prompt_tokens": 13,
    "completion_tokens": 120,
    "total_tokens": 133,
    "prompt_tokens_details": {"cached_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 98},
    "prompt_cache_hit_tokens": 0,
    "prompt_cache_miss_tokens": 13,
}
U_VLLM = {"prompt_tokens": 150, "total_tokens": 180, "completion_tokens": 30, "prompt_tokens_details": None}
WEATHER_ARGS = '{"city":"Caf\\u00e9 \\"Le Dôme\\"","units":"c"}'
SEARCH_ARGS = '{"query":"日本語 🎉 \\ud83d\\ude80"}'
TOOL_CALLS = [
    ToolCall(0, "call_dE5Z6KkzVSY93yvSqwy6f23n", "get_weather", WEATHER_ARGS, True),
    ToolCall(1, "call_lj379cUSecp5cibvDE93wDwD", "search_docs", SEARCH_ARGS, True),
]

STREAMS: dict[str, ResponseSummary] = {
    "stream_text_usage.sse": ResponseSummary(
        message_id="chatcmpl-AxaCVSudcLgXTmVEhj24BfQ80KSxX",
        model="gpt-4.1-2025-04-14",
        text="The capital of France is Paris.",
        thinking="",
        stop_reason="stop",
        usage=Usage(14, 8, 0, None, None, 0, {}, U_TEXT),
        tool_calls=[],
        complete=True,
        error_type=None,
        error_message=None,
        content_started=True,
        parse_errors=0,
        unknown_events=0,
    ),
    "stream_parallel_tools.sse": ResponseSummary(
        message_id="chatcmpl-lHXVp1MAncUTUlB4TLm27h3hvMYs8",
        model="gpt-4o-2024-08-06",
        stop_reason="tool_calls",
        usage=Usage(82, 51, 64, None, None, 0, {}, U_TOOLS),
        tool_calls=TOOL_CALLS,
        complete=True,
        content_started=True,
    ),
    "stream_reasoning.sse": ResponseSummary(
        message_id="5f7c3b1e-9a2d-4c8e-b6f1-2d3e4f5a6b7c",
        model="deepseek-reasoner",
        text="2 + 2 = 4.",
        thinking="The user asks for 2+2. That is 4.",
        stop_reason="stop",
        usage=Usage(13, 120, 0, None, None, 98, {}, U_REASONING),
        complete=True,
        content_started=True,
    ),
    "stream_vllm_tools.sse": ResponseSummary(
        message_id="chatcmpl-1cdad2730867db2792027a473e6292ee",
        model="Qwen/Qwen3-8B",
        thinking="Need the weather for Oslo.",
        stop_reason="tool_calls",
        usage=Usage(150, 30, raw=U_VLLM),
        tool_calls=[
            ToolCall(0, "chatcmpl-tool-92625fe335a558cb345e5906dbb04ffe", "get_weather", '{"city": "Oslo"}')
        ],
        complete=True,
        content_started=True,
    ),
    "stream_error.sse": ResponseSummary(
        message_id="chatcmpl-ZZ4l4NUDDHhWWBgxdk4rLSxI9TvJ1",
        model="gpt-4.1-2025-04-14",
        text="Once upon a time",
        stop_reason=None,
        usage=Usage(),
        complete=False,
        error_type="server_error",
        error_message="The server had an error while processing your request. Sorry about that!",
        content_started=True,
    ),
    "stream_azure_filter.sse": ResponseSummary(
        message_id="chatcmpl-Sks1w4YMg9Gwr5bpHizgxaTdFvc9p",
        model="gpt-4o-2024-11-20",
        text="Hello!",
        stop_reason="stop",
        complete=True,
        content_started=True,
    ),
    "stream_no_usage.sse": ResponseSummary(
        message_id="chatcmpl-AxaCVSudcLgXTmVEhj24BfQ80KSxY",
        model="gpt-4o-mini-2024-07-18",
        text="Hi there.",
        stop_reason="stop",
        complete=True,
        content_started=True,
    ),
    "stream_refusal.sse": ResponseSummary(
        message_id="chatcmpl-Dz5CE7uedmgYS9eUEmgl3Rc3s3sJa",
        model="gpt-4o-2024-08-06",
        text="[refusal] I'm sorry, I can't help with that.",
        stop_reason="stop",
        complete=True,
        content_started=True,
    ),
}

BODIES: dict[str, ResponseSummary] = {
    "response_text.json": ResponseSummary(
        message_id="chatcmpl-Dz5CE7uedmgYS9eUEmgl3Rc3s3sIz",
        model="gpt-4.1-2025-04-14",
        text="The capital of France is Paris.",
        stop_reason="stop",
        usage=Usage(14, 8, 0, None, None, 0, {}, U_TEXT),
        complete=True,
        content_started=True,
    ),
    "response_tool_calls.json": ResponseSummary(
        message_id="chatcmpl-uxWM9ENivr9MVOB2XDDrkhO4CqoFK",
        model="gpt-4o-2024-08-06",
        stop_reason="tool_calls",
        usage=Usage(82, 51, 64, None, None, 0, {}, U_TOOLS),
        tool_calls=TOOL_CALLS,
        complete=True,
        content_started=True,
    ),
    "response_reasoning.json": ResponseSummary(
        message_id="9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
        model="deepseek-reasoner",
        text="2 + 2 = 4.",
        thinking="The user asks for 2+2. That is 4.",
        stop_reason="stop",
        usage=Usage(13, 120, 0, None, None, 98, {}, U_REASONING),
        complete=True,
        content_started=True,
    ),
}

PAIRS = [
    ("stream_text_usage.sse", "response_text.json"),
    ("stream_parallel_tools.sse", "response_tool_calls.json"),
    ("stream_reasoning.sse", "response_reasoning.json"),
]


CONTRACT = Contract(PARSER, "openai_chat", STREAMS, BODIES, PAIRS, fuzz_prefix="stream_parallel_tools.sse")
"""What `tests/providers/test_contract.py` checks of this parser."""


# -- responses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "status", "expected"),
    [
        (
            "error_400.json",
            400,
            (
                "invalid_request_error",
                "This model's maximum context length is 128000 tokens. However, your messages resulted in "
                "130412 tokens. Please reduce the length of the messages.",
            ),
        ),
        (
            "error_429.json",
            429,
            (
                "tokens",
                "Rate limit reached for gpt-4.1 in organization org-abc123 on tokens per min (TPM): "
                "Limit 30000, Used 29949, Requested 1200. Please try again in 2.298s.",
            ),
        ),
    ],
)
def test_error_body(name: str, status: int, expected: tuple[str, str]) -> None:
    assert PARSER.parse_response(fixture(name), status) == ResponseSummary(
        error_type=expected[0], error_message=expected[1], complete=True
    )


def test_error_code_when_type_is_missing_and_vllm_old_shape() -> None:
    body = b'{"error": {"message": "bad key", "type": null, "code": "invalid_api_key"}}'
    assert PARSER.parse_response(body, 401) == ResponseSummary(
        error_type="invalid_api_key", error_message="bad key", complete=True
    )
    old = b'{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}'
    assert PARSER.parse_response(old, 400) == ResponseSummary(
        error_type="BadRequestError", error_message="too long", complete=True
    )


def test_non_json_bodies() -> None:
    assert PARSER.parse_response(b"<html>upstream connect error</html>", 503) == ResponseSummary(
        parse_errors=1, error_message="HTTP 503: <html>upstream connect error</html>"
    )
    assert PARSER.parse_response(b"", 200) == ResponseSummary(parse_errors=1)
    assert PARSER.parse_response(b"\x00\xff", 200) == ResponseSummary(parse_errors=1)
    assert PARSER.parse_response(b'{"id": "x"}', 200) == ResponseSummary(parse_errors=1)


def test_body_odd_shapes() -> None:
    body = {
        "id": "c1",
        "model": "m",
        "choices": [
            {"index": 1, "message": {"content": "second choice"}},
            {
                "index": 0,
                "message": {
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                    "refusal": "no",
                    "reasoning": "r",
                    "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}, "junk"],
                },
                "finish_reason": "length",
            },
        ],
        "usage": None,
    }
    assert PARSER.parse_response(json.dumps(body).encode(), 200) == ResponseSummary(
        message_id="c1",
        model="m",
        text="ab[refusal] no",
        thinking="r",
        stop_reason="length",
        tool_calls=[ToolCall(0, "openai_f_0", "f", '{"x":1}', complete=False)],
        complete=True,
        content_started=True,
    )


# -- stream event semantics -----------------------------------------------------------------


def test_no_finish_means_incomplete_tool_calls() -> None:
    s = run(
        [chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": '{"a'}}]})]
    )
    assert s.complete is False
    assert s.tool_calls == [ToolCall(0, "call_1", "f", '{"a', complete=False)]


def test_finish_without_done_is_complete_and_done_ends_the_stream() -> None:
    s = run([chunk({"content": "x"}), chunk({}, "stop")])
    assert (s.complete, s.stop_reason) == (True, "stop")
    interp = PARSER.stream()
    for e in [chunk({"content": "x"}), data("[DONE]"), chunk({"content": "late"}, "length"), data("{bad")]:
        interp.event(e)
    s = interp.finish()
    assert (s.text, s.complete, s.stop_reason, s.parse_errors) == ("x", True, None, 0)
    assert interp.finish() is s


def test_fragments_keyed_by_index_with_odd_servers() -> None:
    events = [
        chunk({"tool_calls": [{"index": 3, "id": "a", "function": {"name": "f", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 3, "id": "a", "function": {"name": "f", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 3, "id": "b", "function": {"name": "g", "arguments": "[1]"}}]}),
        chunk({"tool_calls": [{"index": 3, "function": {"arguments": "[2]"}}]}),
        chunk({"tool_calls": [{"id": "c", "function": {"name": "h", "arguments": "{"}}]}),
        chunk({"tool_calls": [{"function": {"arguments": "}"}}]}),
        chunk({"tool_calls": [{"index": 5, "function": {"arguments": "{}"}}, "junk"]}),
        chunk({}, "length"),
    ]
    assert run(events).tool_calls == [
        ToolCall(0, "a", "f", "{}"),
        ToolCall(1, "b", "g", "[1][2]"),
        ToolCall(2, "c", "h", "{}"),
        ToolCall(3, "openai__3", "", "{}", complete=False),
    ]


def test_usage_last_wins_and_choice_zero_only() -> None:
    u1, u2 = {"prompt_tokens": 1, "completion_tokens": 1}, {"prompt_tokens": 5, "completion_tokens": 6}
    events = [
        data({"id": "", "model": "", "choices": [], "usage": u1}),
        data(
            {
                "id": "x",
                "choices": [{"index": 1, "delta": {"content": "other"}}, {"delta": {"content": "mine"}}],
            }
        ),
        data({"choices": [{"index": 0, "finish_reason": "stop"}], "usage": u2}),
        data({"object": "chat.completion.chunk"}),
        data([1, 2]),
    ]
    s = run(events)
    assert (s.message_id, s.model, s.text, s.usage, s.complete) == (
        "x",
        None,
        "mine",
        Usage(5, 6, raw=u2),
        True,
    )
    assert (s.unknown_events, s.parse_errors) == (1, 1)


def test_error_chunk_with_finish_reason_stays_incomplete() -> None:
    s = run([chunk({"content": "a"}), chunk({}, "error", error={"code": 502, "message": "upstream died"})])
    assert (s.complete, s.error_type, s.error_message, s.stop_reason) == (
        False,
        "502",
        "upstream died",
        "error",
    )


def test_reasoning_prefers_reasoning_content_and_mistral_parts() -> None:
    events = [
        chunk({"reasoning_content": "A", "reasoning": "A"}),
        chunk({"reasoning": "B"}),
        chunk(
            {
                "content": [
                    {"type": "thinking", "thinking": [{"type": "text", "text": "C"}]},
                    {"type": "text", "text": "D"},
                ]
            }
        ),
    ]
    s = run(events)
    assert (s.thinking, s.text, s.content_started) == ("ABC", "D", True)


def test_content_started() -> None:
    interp = PARSER.stream()
    interp.event(chunk({"role": "assistant", "content": "", "refusal": None}))
    assert interp.summary.content_started is False
    interp.event(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}]}))
    assert interp.summary.content_started is True


def test_usage_normalization() -> None:
    raw = {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "prompt_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 30, "audio_tokens": 5},
        "completion_tokens_details": {
            "reasoning_tokens": 20,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 3,
            "rejected_prediction_tokens": 0,
        },
    }
    assert usage_from_openai(raw) == Usage(
        input_tokens=100,
        output_tokens=40,
        cache_read=60,
        cache_write=30,
        reasoning=20,
        extra={"input_audio_tokens": 5, "accepted_prediction_tokens": 3},
        raw=raw,
    )
    assert usage_from_openai({"prompt_cache_hit_tokens": 7}) == Usage(
        cache_read=7, raw={"prompt_cache_hit_tokens": 7}
    )
    assert usage_from_openai("x") == Usage(raw="x")


# -- requests -------------------------------------------------------------------------------


def test_request_with_history_and_new_results() -> None:
    body = fixture("request_tool_results.json")
    tools = json.dumps(json.loads(body)["tools"], ensure_ascii=False, separators=(",", ":"))
    prompt = "\n".join(
        [
            "Be terse.",
            "Use metric units.",
            "Weather in Paris and Rome?",
            'get_weather {"city":"Paris"}',
            "18C",
            "Paris done; now Rome and a fallback.",
            'get_weather {"city":"Rome"}',
            'search_docs {"query":"Rome"}',
            "21C, sunny",
            "doc one\ndoc two",
            tools,
        ]
    )
    assert PARSER.parse_request(body) == RequestInfo(
        model="gpt-4.1",
        stream=True,
        system_prompt="Be terse.\nUse metric units.",
        messages_count=8,
        tools_count=2,
        tool_results=[
            ToolResult("call_ERrt3qycGooyH7cI9UAEhZjS", "21C, sunny", False, "get_weather"),
            ToolResult("call_ifMfqaFuN2BFuIW5Y8zPFtjz", "doc one\ndoc two", False, "search_docs"),
        ],
        prompt_text=prompt,
        error=None,
    )


def test_simple_request() -> None:
    assert PARSER.parse_request(fixture("request_simple.json")) == RequestInfo(
        model="gpt-4o-mini",
        stream=False,
        system_prompt=None,
        messages_count=1,
        tools_count=0,
        tool_results=[],
        prompt_text="Say hi.",
        error=None,
    )


def test_results_followed_by_user_text_and_odd_messages() -> None:
    messages = [
        {"role": "assistant", "tool_calls": [{"id": "k", "function": {"name": "ls"}}, "junk", {"id": 3}]},
        {"role": "tool", "call_id": "k", "content": None},
        {"role": "tool", "tool_call_id": "z", "content": [{"type": "image_url"}]},
        {"role": "user", "content": "and now?"},
        "junk",
    ]
    info = PARSER.parse_request(json.dumps({"model": "m", "messages": messages, "functions": [{}]}).encode())
    assert info.tool_results == [ToolResult("k", "", False, "ls"), ToolResult("z", "[image_url]")]
    assert (info.messages_count, info.tools_count, info.prompt_text) == (5, 1, "ls \nand now?\n[{}]")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", RequestInfo(error="empty request body")),
        (b"<!DOCTYPE html><html></html>", RequestInfo(error="request body is not valid JSON")),
        (b'"just a string"', RequestInfo(error="request body is a JSON str, not an object")),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "model": "gpt-4o',
            RequestInfo(error="request body is not valid JSON"),
        ),
        (
            b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi',
            RequestInfo(model="gpt-4o", error="request body is not valid JSON"),
        ),
    ],
)
def test_bad_request_bodies(body: bytes, expected: RequestInfo) -> None:
    assert PARSER.parse_request(body) == expected


# -- fuzzing --------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
fragment = st.fixed_dictionaries(
    {},
    optional={
        "index": st.integers(-1, 2) | json_values,
        "id": st.sampled_from(["a", "b", ""]) | json_values,
        "function": st.fixed_dictionaries(
            {}, optional={"name": json_values, "arguments": st.text(max_size=4) | json_values}
        )
        | json_values,
    },
)
delta = st.fixed_dictionaries(
    {},
    optional={
        k: json_values | st.text(max_size=4)
        for k in ("content", "reasoning", "reasoning_content", "refusal", "role")
    }
    | {"tool_calls": st.lists(fragment | json_values, max_size=2) | json_values},
)
choice = st.fixed_dictionaries(
    {},
    optional={
        "index": st.integers(0, 1) | json_values,
        "delta": delta | json_values,
        "finish_reason": st.sampled_from(["stop", "length", "tool_calls"]) | json_values,
    },
)
chunks = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "model": json_values,
        "choices": st.lists(choice | json_values, max_size=2),
        "usage": json_values,
        "error": json_values,
        "object": json_values,
    },
)
events = st.builds(
    SSEEvent,
    st.none() | st.text(max_size=5),
    st.one_of(chunks.map(json.dumps), json_values.map(json.dumps), st.text(max_size=20), st.just("[DONE]")),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(events, max_size=10))
def test_fuzz_stream_never_raises(evs: list[SSEEvent]) -> None:
    interp = PARSER.stream()
    for e in evs:
        interp.read(e)  # the unguarded logic: the public event() would hide a bug
    s = interp.finish()
    assert all(c.call_id for c in s.tool_calls)
    assert s.parse_errors + s.unknown_events <= len(evs)


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=200)
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.fixed_dictionaries(
        {},
        optional={
            "choices": st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "message": delta | json_values,
                        "index": json_values,
                        "finish_reason": json_values,
                    },
                ),
                max_size=2,
            )
            | json_values,
            "usage": json_values,
            "error": json_values,
        },
    ).map(lambda v: json.dumps(v).encode()),
    st.integers(100, 599),
)
def test_fuzz_bodies_never_raise(body: bytes, status: int) -> None:
    assert isinstance(_parse_request(body), RequestInfo)
    assert isinstance(PARSER.read_response(body, status), ResponseSummary)


@settings(max_examples=200, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "model": json_values,
            "stream": json_values,
            "tools": json_values,
            "functions": json_values,
            "messages": st.lists(
                st.fixed_dictionaries(
                    {
                        "role": st.sampled_from(["system", "developer", "user", "assistant", "tool"])
                        | json_values
                    },
                    optional={
                        "content": json_values,
                        "tool_call_id": json_values,
                        "call_id": json_values,
                        "tool_calls": st.lists(fragment | json_values, max_size=2) | json_values,
                    },
                )
                | json_values,
                max_size=4,
            )
            | json_values,
        },
    )
)
def test_fuzz_request_shapes_never_raise(obj: dict) -> None:
    assert _parse_request(json.dumps(obj).encode()).error is None
