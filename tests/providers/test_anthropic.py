"""Anthropic Messages parser: requests, whole bodies, streams at any chunking, and fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addons.framing import SSEEvent
from addons.providers._common import content_text, error_fields, model_from_text
from addons.providers.anthropic import (
    AnthropicMessages,
    _parse_request,
    usage_from_anthropic,
)
from addons.records import RequestInfo, ResponseSummary, ToolCall, ToolResult, Usage
from tests.providers.contract import Contract, run_events

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "anthropic"
PARSER = AnthropicMessages()


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def ref_events(body: bytes) -> list[SSEEvent]:
    """Reference framing for the LF-only fixtures (independent of SSEDecoder)."""
    events = []
    for block in body.decode("utf-8").split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        events.append(SSEEvent(name, "\n".join(data)))
    return events


def run(events: list[SSEEvent]) -> ResponseSummary:
    return run_events(PARSER, events)


def ev(obj: dict, name: str | None = None) -> SSEEvent:
    return SSEEvent(name if name is not None else obj.get("type"), json.dumps(obj))


# -- expected summaries ---------------------------------------------------------------------

U_TEXT = {
    "input_tokens": 20,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
    "output_tokens": 9,
    "service_tier": "standard",
    "inference_geo": "not_available",
}
USAGE_TEXT = Usage(20, 9, 0, 0, 0, None, {"service_tier": "standard"}, U_TEXT)
U_TOOLS = {
    "input_tokens": 2,
    "cache_creation_input_tokens": 22,
    "cache_read_input_tokens": 13993,
    "output_tokens": 72,
    "service_tier": "standard",
}
USAGE_TOOLS = Usage(14017, 72, 13993, 22, None, None, {"service_tier": "standard"}, U_TOOLS)
THINKING_TOOLS = "The user wants the size of two files. I'll read both in parallel."
READ_ID, GREP_ID = "toolu_0146joIsA96s81Zu0S1xT59U", "toolu_01qeKpJOVjLECi5FbOTys0Yc"
U_1H = {
    "input_tokens": 12,
    "cache_creation_input_tokens": 3000,
    "cache_read_input_tokens": 20000,
    "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
    "output_tokens": 4,
    "service_tier": "standard",
}
NO_CACHE = {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
U_SEARCH = {
    "input_tokens": 2679,
    **NO_CACHE,
    "output_tokens": 61,
    "service_tier": "standard",
    "server_tool_use": {"web_search_requests": 1},
}

STREAMS: dict[str, ResponseSummary] = {
    "stream_text.sse": ResponseSummary(
        message_id="msg_01hllrDyxtZiXzW1x8M1GljM",
        model="claude-haiku-4-5-20251001",
        text="The capital of France is Paris.",
        thinking="",
        stop_reason="end_turn",
        usage=USAGE_TEXT,
        tool_calls=[],
        complete=True,
        error_type=None,
        error_message=None,
        content_started=True,
        parse_errors=0,
        unknown_events=0,
    ),
    "stream_thinking_tools.sse": ResponseSummary(
        message_id="msg_01ksl609pgOjNaxX8tC1p69o",
        model="claude-sonnet-4-5-20250929",
        text="Reading both files now.",
        thinking=THINKING_TOOLS,
        stop_reason="tool_use",
        usage=USAGE_TOOLS,
        tool_calls=[
            ToolCall(
                0, READ_ID, "Read", '{"file_path": "/tmp/caf\\u00e9/\\"notes\\".md", "limit": 40}', True
            ),
            ToolCall(1, GREP_ID, "Grep", '{"pattern": "日本語 🎉 \\ud83d\\ude80", "path": "/srv"}', True),
        ],
        complete=True,
        content_started=True,
    ),
    "stream_redacted_thinking.sse": ResponseSummary(
        message_id="msg_01gclgFRclcl0ATvJfZ9fbQK",
        model="claude-3-7-sonnet-20250219",
        text="The answer is 42.",
        thinking="[redacted thinking]\nLet me think about this carefully.",
        stop_reason="end_turn",
        usage=Usage(95, 120, 0, 0, None, None, {}, {"input_tokens": 95, **NO_CACHE, "output_tokens": 120}),
        complete=True,
        content_started=True,
    ),
    "stream_web_search.sse": ResponseSummary(
        message_id="msg_01UwBiiTiA75XCLynBodeRvm",
        model="claude-sonnet-4-5-20250929",
        text="I'll search for that.\nCapsem records agent traffic into SQLite.",
        stop_reason="end_turn",
        usage=Usage(
            2679, 61, 0, 0, None, None, {"web_search_requests": 1, "service_tier": "standard"}, U_SEARCH
        ),
        tool_calls=[
            ToolCall(
                0, "srvtoolu_01HfgM152abFgwwwaEf3Oa5Z", "web_search", '{"query": "capsem flight recorder"}'
            )
        ],
        complete=True,
        content_started=True,
    ),
    "stream_max_tokens_tool.sse": ResponseSummary(
        message_id="msg_01ExMZEEa26Sb7gM02iCPO2D",
        model="claude-sonnet-4-5-20250929",
        text="Writing the file.",
        stop_reason="max_tokens",
        usage=Usage(310, 64, 0, 0, None, None, {}, {"input_tokens": 310, **NO_CACHE, "output_tokens": 64}),
        tool_calls=[
            ToolCall(
                0,
                "toolu_017RU56xnnlrHHgMJZ0R2Qsp",
                "Write",
                '{"file_path": "/tmp/out.txt", "content": "line 1\\nline',
                False,
            )
        ],
        complete=True,
        content_started=True,
    ),
    "stream_refusal.sse": ResponseSummary(
        message_id="msg_01p0jqmlOsN4LSihxcXAfK75",
        model="claude-sonnet-4-5-20250929",
        text="",
        stop_reason="refusal",
        usage=Usage(41, 1, 0, 0, None, None, {}, {"input_tokens": 41, **NO_CACHE, "output_tokens": 1}),
        complete=True,
        content_started=False,
    ),
    "stream_error.sse": ResponseSummary(
        message_id="msg_01hllrDyxtZiXzW1x8M1GljN",
        model="claude-opus-4-1-20250805",
        text="Sure, here",
        stop_reason=None,
        usage=Usage(1200, None, 0, 0, None, None, {}, {"input_tokens": 1200, **NO_CACHE, "output_tokens": 1}),
        complete=False,
        error_type="overloaded_error",
        error_message="Overloaded",
        content_started=True,
    ),
    "stream_cache_1h.sse": ResponseSummary(
        message_id="msg_01gclgFRclcl0ATvJfZ9fbQL",
        model="claude-opus-4-1-20250805",
        text="Cached.",
        stop_reason="end_turn",
        usage=Usage(23012, 4, 20000, 3000, 2000, None, {"service_tier": "standard"}, U_1H),
        complete=True,
        content_started=True,
    ),
}

BODIES: dict[str, ResponseSummary] = {
    "message_text.json": ResponseSummary(
        message_id="msg_014ICI8l7hbeH3gSMLu2rKFS",
        model="claude-haiku-4-5-20251001",
        text="The capital of France is Paris.",
        stop_reason="end_turn",
        usage=USAGE_TEXT,
        complete=True,
        content_started=True,
    ),
    "message_thinking_tools.json": ResponseSummary(
        message_id="msg_01MT2DpmlFKyU2pQVvL4BO2B",
        model="claude-sonnet-4-5-20250929",
        text="Reading both files now.",
        thinking=THINKING_TOOLS,
        stop_reason="tool_use",
        usage=USAGE_TOOLS,
        tool_calls=[
            ToolCall(0, READ_ID, "Read", '{"file_path":"/tmp/café/\\"notes\\".md","limit":40}', True),
            ToolCall(1, GREP_ID, "Grep", '{"pattern":"日本語 🎉 🚀","path":"/srv"}', True),
        ],
        complete=True,
        content_started=True,
    ),
    "message_tool_use.json": ResponseSummary(
        message_id="msg_01ksl609pgOjNaxX8tC1p69p",
        model="claude-sonnet-4-5-20250929",
        text="I'll check the weather.",
        stop_reason="tool_use",
        usage=Usage(
            380,
            58,
            0,
            0,
            0,
            None,
            {"service_tier": "standard"},
            {
                "input_tokens": 380,
                **NO_CACHE,
                "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
                "output_tokens": 58,
                "service_tier": "standard",
            },
        ),
        tool_calls=[
            ToolCall(0, "toolu_01BBgDxDTc7xdoDgEWCX5PPW", "get_weather", '{"city":"Zürich","days":3}')
        ],
        complete=True,
        content_started=True,
    ),
}

ERRORS = {
    ("error_429.json", 429): (
        "rate_limit_error",
        "This request would exceed the rate limit for your organization of 50,000 input tokens per minute.",
    ),
    ("error_529.json", 529): ("overloaded_error", "Overloaded"),
    ("error_400.json", 400): ("invalid_request_error", "prompt is too long: 205429 tokens > 200000 maximum"),
    ("error_529.json", 200): ("overloaded_error", "Overloaded"),
}


CONTRACT = Contract(PARSER, "anthropic", STREAMS, BODIES, fuzz_prefix="stream_thinking_tools.sse",
                    pairs=[("stream_text.sse", "message_text.json"),
                           ("stream_thinking_tools.sse", "message_thinking_tools.json")])  # fmt: skip
"""What `tests/providers/test_contract.py` checks of this parser."""


# -- responses ------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "expected"), ERRORS.items(), ids=[f"{n}-{s}" for n, s in ERRORS])
def test_error_body(key: tuple[str, int], expected: tuple[str, str]) -> None:
    name, status = key
    assert PARSER.parse_response(fixture(name), status) == ResponseSummary(
        error_type=expected[0], error_message=expected[1], complete=True
    )


def test_non_json_bodies() -> None:
    html = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"
    assert PARSER.parse_response(html, 502) == ResponseSummary(
        parse_errors=1, error_message="HTTP 502: " + html.decode()
    )
    assert PARSER.parse_response(b"", 200) == ResponseSummary(parse_errors=1)
    assert PARSER.parse_response(b"\xff\xfe\x00garbage", 200) == ResponseSummary(parse_errors=1)
    assert PARSER.parse_response(b"[1, 2]", 200) == ResponseSummary(parse_errors=1)
    assert PARSER.parse_response(b'{"type": "message"}', 200) == ResponseSummary(parse_errors=1)
    assert PARSER.parse_response(b'{"detail": "Not Found"}', 404) == ResponseSummary(
        error_message="Not Found", complete=True
    )


def test_body_without_usage_and_odd_blocks() -> None:
    body = {
        "id": "msg_1",
        "model": "m",
        "content": [
            {"type": "redacted_thinking", "data": "xx"},
            {"type": "thinking", "thinking": "a"},
            "junk",
            {"type": "tool_use", "name": "noid"},
            {"type": "text", "text": "after"},
        ],
        "stop_reason": None,
    }
    s = PARSER.parse_response(json.dumps(body).encode(), 200)
    assert s == ResponseSummary(
        message_id="msg_1",
        model="m",
        text="after",
        thinking="[redacted thinking]\na",
        tool_calls=[ToolCall(0, "anthropic_noid_0", "noid", "{}")],
        complete=True,
        content_started=True,
    )


# -- stream event semantics -----------------------------------------------------------------


def test_message_start_only_keeps_input_and_leaves_output_unknown() -> None:
    usage = {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 1}
    s = run([ev({"type": "message_start", "message": {"id": "msg_x", "model": "m", "usage": usage}})])
    assert s.usage == Usage(input_tokens=15, output_tokens=None, cache_read=5, raw=usage)
    assert s.complete is False
    assert s.stop_reason is None


def test_stop_reason_kept_without_message_stop_and_usage_assigned_not_added() -> None:
    events = [
        ev(
            {
                "type": "message_start",
                "message": {"id": "msg_x", "usage": {"input_tokens": 3, "output_tokens": 1}},
            }
        ),
        ev({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}}),
        ev({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 9, "input_tokens": None}}),
    ]
    s = run(events)
    assert (s.stop_reason, s.complete, s.usage.input_tokens, s.usage.output_tokens) == (
        "end_turn",
        False,
        3,
        9,
    )
    assert s.usage.raw == {"input_tokens": 3, "output_tokens": 9}


def test_dispatch_falls_back_to_event_name_and_counts_oddities() -> None:
    interp = PARSER.stream()
    interp.event(
        SSEEvent("content_block_start", '{"index": 0, "content_block": {"type": "text", "text": "Hi"}}')
    )
    interp.event(
        SSEEvent("content_block_delta", '{"index": 0, "delta": {"type": "text_delta", "text": "!"}}')
    )
    interp.event(SSEEvent("ping", ""))
    interp.event(SSEEvent(None, "[DONE]"))
    interp.event(SSEEvent("content_block_delta", "{not json"))
    interp.event(SSEEvent("shiny_new_event", '{"type": "shiny_new_event"}'))
    interp.event(ev({"type": "content_block_delta", "index": 0, "delta": {"type": "compaction_delta"}}))
    interp.event(ev({"type": "content_block_start", "index": 1}))
    interp.event(
        ev(
            {
                "type": "content_block_delta",
                "index": 7,
                "delta": {"type": "input_json_delta", "partial_json": "{"},
            }
        )
    )
    interp.event(SSEEvent("message_stop", "{}"))
    interp.event(
        ev({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "late"}})
    )
    s = interp.finish()
    assert (s.text, s.complete, s.parse_errors, s.unknown_events) == ("Hi!", True, 3, 2)
    assert interp.finish() is s and s.complete


def test_tool_input_whole_at_start_and_empty_arguments() -> None:
    events = [
        ev(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "t1", "name": "a", "input": {"k": "é"}},
            }
        ),
        ev({"type": "content_block_stop", "index": 0}),
        ev(
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "t2", "name": "b", "input": {}},
            }
        ),
        ev(
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": ""},
            }
        ),
        ev({"type": "content_block_stop", "index": 1}),
        ev(
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {"type": "tool_use", "id": "t3", "name": "c", "input": {"old": 1}},
            }
        ),
        ev(
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '{"n"'},
            }
        ),
        ev(
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": ":2}"},
            }
        ),
        ev({"type": "content_block_stop", "index": 2}),
        ev({"type": "content_block_stop", "index": 2}),
    ]
    assert run(events).tool_calls == [
        ToolCall(0, "t1", "a", '{"k":"é"}'),
        ToolCall(1, "t2", "b", "{}"),
        ToolCall(2, "t3", "c", '{"n":2}'),
    ]


def test_content_started_only_with_content() -> None:
    interp = PARSER.stream()
    interp.event(ev({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}}))
    interp.event(
        ev({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}})
    )
    interp.event(
        ev({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": ""}})
    )
    assert interp.summary.content_started is False
    interp.event(
        ev({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "x"}})
    )
    assert interp.summary.content_started is True


def test_error_event_without_error_object() -> None:
    s = run([ev({"type": "error"}), ev({"type": "message_stop"})])
    assert (s.error_type, s.error_message, s.complete) == ("error", None, False)
    s = run([SSEEvent("error", "upstream reset\n")])
    assert (s.error_type, s.error_message, s.complete, s.parse_errors) == (
        "error",
        "upstream reset",
        False,
        1,
    )


def test_usage_normalization() -> None:
    raw = {
        "input_tokens": 100,
        "cache_creation": {"ephemeral_5m_input_tokens": 30, "ephemeral_1h_input_tokens": 20},
        "output_tokens": 50,
        "output_tokens_details": {"thinking_tokens": 40},
        "server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 0},
        "service_tier": "priority",
    }
    assert usage_from_anthropic(raw) == Usage(
        input_tokens=150,
        output_tokens=50,
        cache_write=50,
        cache_write_1h=20,
        reasoning=40,
        extra={"web_search_requests": 2, "web_fetch_requests": 0, "service_tier": "priority"},
        raw=raw,
    )
    assert usage_from_anthropic(None) == Usage()
    assert usage_from_anthropic([1]) == Usage(raw=[1])
    assert usage_from_anthropic({"output_tokens": "7", "input_tokens": True}) == Usage(
        output_tokens=7, raw={"output_tokens": "7", "input_tokens": True}
    )


# -- requests -------------------------------------------------------------------------------


def test_request_with_history_and_new_results() -> None:
    body = fixture("request_tool_results.json")
    tools = json.dumps(json.loads(body)["tools"], ensure_ascii=False, separators=(",", ":"))
    prompt = "\n".join(
        [
            "You are terse.\nAnswer in English.",
            "Weather in Paris and Rome? Show a chart.",
            "Drawing the chart first.\nforecast_chart {}",
            'Two cities, two calls.\nget_weather {"city":"Paris"}\nget_weather {"city":"Rome"}\nread_doc {}',
            "18C, cloudy\nupstream timeout\nretry later\nThanks.",
            tools,
        ]
    )
    assert PARSER.parse_request(body) == RequestInfo(
        model="claude-sonnet-4-5",
        stream=True,
        system_prompt="You are terse.\nAnswer in English.",
        messages_count=5,
        tools_count=4,
        tool_results=[
            ToolResult("toolu_01EKqbqmZrGRXy18eN7m9kvY", "18C, cloudy", False, "get_weather"),
            ToolResult(
                "toolu_01Wq7u2zTXkN4bHc3mY8pDfR", "upstream timeout\nretry later", True, "get_weather"
            ),
            ToolResult("toolu_01Gh5sVw9LqP3eRt7yU1iOkJ", "[document]", False, "read_doc"),
            ToolResult("toolu_01Zz9yX8wV7uT6sR5qP4oN3m", "", False, None),
        ],
        prompt_text=prompt,
        error=None,
    )


def test_simple_request() -> None:
    assert PARSER.parse_request(fixture("request_simple.json")) == RequestInfo(
        model="claude-haiku-4-5-20251001",
        stream=False,
        system_prompt="You are a calculator.",
        messages_count=3,
        tools_count=0,
        tool_results=[],
        prompt_text="You are a calculator.\n2+2?\n4\nTimes 3?",
        error=None,
    )


def test_first_turn_results_and_placeholders() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": [{"type": "image", "source": {}}]},
                {"type": "tool_result", "tool_use_id": "b", "content": []},
                {
                    "type": "tool_result",
                    "tool_use_id": "c",
                    "content": [{"type": "tool_reference", "tool_name": "fetch"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "d",
                    "content": [{"type": "image"}, {"type": "text", "text": "t"}],
                },
                {"type": "tool_result", "tool_use_id": 5, "content": {"type": "text", "text": "one"}},
            ],
        },
    ]
    info = PARSER.parse_request(json.dumps({"model": "m", "messages": messages}).encode())
    assert info.tool_results == [
        ToolResult("a", "[image]"),
        ToolResult("b", ""),
        ToolResult("c", "[tool_reference: fetch]"),
        ToolResult("d", "t"),
        ToolResult("", "one"),
    ]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", RequestInfo(error="empty request body")),
        (b"  \n", RequestInfo(error="empty request body")),
        (b"<html><body>Bad Request</body></html>", RequestInfo(error="request body is not valid JSON")),
        (b"[1, 2]", RequestInfo(error="request body is a JSON list, not an object")),
        (
            b'{"model": "claude-\xff", "messages": []}',
            RequestInfo(model="claude-\ufffd", error="request body is not valid UTF-8"),
        ),
        (
            b'{"max_tokens": 10, "model" : "claude-\\"x\\"", "messages": [{"role": "user", "content": "hel',
            RequestInfo(model='claude-"x"', error="request body is not valid JSON"),
        ),
    ],
)
def test_bad_request_bodies(body: bytes, expected: RequestInfo) -> None:
    assert PARSER.parse_request(body) == expected


def test_truncated_request_keeps_model() -> None:
    info = PARSER.parse_request(fixture("request_tool_results.json")[:300])
    assert (info.model, info.messages_count, info.error) == (
        "claude-sonnet-4-5",
        0,
        "request body is not valid JSON",
    )


def test_common_helpers() -> None:
    assert model_from_text('{"model":""}') is None
    assert model_from_text("no model here") is None
    assert content_text(3) == "3"
    assert content_text([{"type": "image"}], placeholders=False) == ""
    assert error_fields({"error": "boom"}) == (None, "boom")
    assert error_fields({"object": "error", "type": "BadRequestError", "message": "m", "code": 400}) == (
        "BadRequestError",
        "m",
    )
    assert error_fields({"error": {"code": 429, "message": "slow"}}) == ("429", "slow")
    assert error_fields({"error": None}) is None


# -- fuzzing --------------------------------------------------------------------------------

EVENT_TYPES = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
    "other",
]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
block_or_delta = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            [
                "text",
                "thinking",
                "redacted_thinking",
                "tool_use",
                "server_tool_use",
                "text_delta",
                "thinking_delta",
                "input_json_delta",
                "signature_delta",
                "x",
            ]
        )
        | json_values
    },
    optional={
        k: json_values | st.text(max_size=5)
        for k in ("text", "thinking", "partial_json", "id", "name", "input")
    },
)
event_objects = st.fixed_dictionaries(
    {"type": st.sampled_from(EVENT_TYPES) | json_values},
    optional={
        "index": st.integers(-1, 3) | json_values,
        "content_block": block_or_delta | json_values,
        "delta": block_or_delta
        | st.fixed_dictionaries({}, optional={"stop_reason": json_values})
        | json_values,
        "usage": st.dictionaries(
            st.sampled_from(
                [
                    "input_tokens",
                    "output_tokens",
                    "cache_read_input_tokens",
                    "cache_creation",
                    "server_tool_use",
                ]
            ),
            json_values,
        )
        | json_values,
        "message": st.fixed_dictionaries({}, optional={"id": json_values, "usage": json_values})
        | json_values,
        "error": json_values,
    },
)
events = st.builds(
    SSEEvent,
    st.none() | st.sampled_from(EVENT_TYPES),
    st.one_of(event_objects.map(json.dumps), json_values.map(json.dumps), st.text(max_size=20)),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events, max_size=12))
def test_fuzz_stream_never_raises(evs: list[SSEEvent]) -> None:
    interp = PARSER.stream()
    for e in evs:
        interp.read(e)  # the unguarded logic: the public event() would hide a bug
    s = interp.finish()
    assert isinstance(s, ResponseSummary)
    assert s.parse_errors + s.unknown_events <= len(evs)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()), st.integers(100, 599))
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
            "system": json_values | st.lists(block_or_delta, max_size=2),
            "tools": json_values,
            "messages": st.lists(
                st.fixed_dictionaries(
                    {"role": st.sampled_from(["user", "assistant", "x"]) | json_values},
                    optional={
                        "content": json_values
                        | st.lists(
                            st.fixed_dictionaries(
                                {
                                    "type": st.sampled_from(
                                        ["text", "tool_use", "tool_result", "thinking", "image"]
                                    )
                                    | json_values
                                },
                                optional={
                                    "content": json_values,
                                    "tool_use_id": json_values,
                                    "id": json_values,
                                    "name": json_values,
                                    "text": json_values,
                                    "input": json_values,
                                },
                            ),
                            max_size=3,
                        )
                    },
                ),
                max_size=4,
            )
            | json_values,
        },
    )
)
def test_fuzz_request_shapes_never_raise(obj: dict) -> None:
    info = _parse_request(json.dumps(obj).encode())
    assert info.error is None


def test_events_typed_only_by_their_event_line() -> None:
    """A JSON without `type` (some relays strip it) is dispatched on the `event:` name."""
    interp = PARSER.stream()
    for name, obj in [
        ("message_start", {"message": {"id": "m", "model": "claude"}}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        ("message_stop", {}),
    ]:
        interp.event(SSEEvent(name, json.dumps(obj)))
    s = interp.finish()
    assert (s.text, s.stop_reason, s.usage.output_tokens, s.complete, s.unknown_events) == (
        "Hi",
        "end_turn",
        2,
        True,
        0,
    )
