"""OpenAI Responses parser: requests, whole bodies, streams at any chunking, WebSocket turns, fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addons.body import ResponseReader
from addons.budgets import ws_turn_ended
from addons.framing import SSEEvent
from addons.providers import detect, parser_for
from addons.providers.openai_responses import OpenAIResponses, _parse_request
from addons.recorder.websocket import WebSocketTurns, request_of
from addons.records import RequestInfo, ResponseSummary, ToolCall, ToolResult, Usage
from tests.providers.contract import Contract

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "openai_responses"
PARSER = OpenAIResponses()


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def read(chunks: list[bytes], encoding: str | None = None, framing: str | None = "sse") -> ResponseSummary:
    reader = ResponseReader(PARSER, framing=framing, content_encoding=encoding, status=200)
    for c in chunks:
        reader.feed(c)
    return reader.finish()


def ev(obj: object) -> SSEEvent:
    return SSEEvent(None, obj if isinstance(obj, str) else json.dumps(obj))


# -- expected summaries ---------------------------------------------------------------------

U_GPT5 = {"input_tokens": 75, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 155,
          "output_tokens_details": {"reasoning_tokens": 128}, "total_tokens": 230}  # fmt: skip
U_CACHED = {"input_tokens": 16909, "input_tokens_details": {"cached_tokens": 15744, "cache_write_tokens": 100},
            "output_tokens": 54, "output_tokens_details": {"reasoning_tokens": 20}, "total_tokens": 16963}  # fmt: skip
U_TEXT = {"input_tokens": 14, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
          "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 64}  # fmt: skip
U_INC = {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 16,
         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 46}  # fmt: skip
GPT5_CALL = ToolCall(
    0, "call_5dp5Uj0Loqn1YcyIpqSq6sLX", "get_weather", '{ "location": "New York City, USA" }'
)
GPT5 = ResponseSummary(
    message_id="resp_68d9303e6d688193a1c5dd0eb0d5b0a90f3f6b5bdbbe0ec1", model="gpt-5-2025-08-07",
    stop_reason="completed", tool_calls=[GPT5_CALL], complete=True, content_started=True,
    usage=Usage(input_tokens=75, output_tokens=155, cache_read=0, reasoning=128, raw=U_GPT5),
)  # fmt: skip
STREAMS = {
    "stream_gpt5_tool.sse": GPT5,
    "stream_text_reasoning.sse": ResponseSummary(
        message_id="resp_0a1b",
        model="gpt-5-mini-2025-08-07",
        text='Hello "wörld" \\ done.',
        thinking="**Checking** café 🎉\n\nSecond part.",
        stop_reason="completed",
        complete=True,
        content_started=True,
        usage=Usage(
            input_tokens=16909,
            output_tokens=54,
            cache_read=15744,
            cache_write=100,
            reasoning=20,
            raw=U_CACHED,
        ),
    ),
    "stream_error.sse": ResponseSummary(
        message_id="resp_err",
        model="gpt-4.1",
        text="Partial",
        complete=False,
        content_started=True,
        error_type="server_is_overloaded",
        error_message="Our servers are currently overloaded. Please try again later.",
    ),
    "stream_failed.sse": ResponseSummary(
        message_id="resp_fail",
        model="gpt-4.1",
        stop_reason="failed",
        complete=False,
        error_type="server_error",
        error_message="An error occurred while processing your request.",
    ),
    "stream_incomplete_tool.sse": ResponseSummary(
        message_id="resp_inc",
        model="gpt-5",
        stop_reason="incomplete:max_output_tokens",
        complete=True,
        content_started=True,
        tool_calls=[
            ToolCall(0, "call_A", "write_file", '{"path": "a.txt", "content": "\\u00e9', complete=False)
        ],
        usage=Usage(input_tokens=30, output_tokens=16, cache_read=0, reasoning=0, raw=U_INC),
    ),
}
BODIES = {
    "response_gpt5_tool.json": GPT5,
    "response_text.json": ResponseSummary(
        message_id="resp_689a0b2545288193953c892439b42e2800b2e36c65a1fd4b",
        model="gpt-4o-mini-2024-07-18",
        text="I can't provide real-time updates, but you can easily check the current weather in San Francisco.",
        stop_reason="completed",
        complete=True,
        content_started=True,
        usage=Usage(input_tokens=14, output_tokens=50, cache_read=0, cache_write=0, reasoning=0, raw=U_TEXT),
    ),
}


# -- detection ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "method", "protocol"),
    [
        ("/v1/responses", "POST", "openai_responses"),
        ("/v1/responses/", "POST", "openai_responses"),
        ("/openai/v1/responses", "POST", "openai_responses"),
        ("/responses", "POST", "openai_responses"),
        ("/v1/responses/resp_123", "GET", None),
        ("/v1/responses/resp_123", "POST", None),
        ("/v1/responses/resp_123/input_items", "GET", None),
        ("/v1/responses/resp_123/cancel", "POST", None),
        ("/v1/responses", "GET", None),
    ],
)
def test_detect(path: str, method: str, protocol: str | None) -> None:
    route = detect("api.openai.com", path, method)
    assert (route.protocol if route else None) == protocol
    if route:
        assert route.provider == "openai" and parser_for(route.protocol).name == "openai_responses"
    gateway = detect("llm.corp.example", "/v1/responses", "POST")
    assert gateway is not None and gateway.provider == "openai"


# -- requests -------------------------------------------------------------------------------


def test_request_with_history_and_results() -> None:
    info = PARSER.parse_request(fixture("request_tool_results.json"))
    assert info.model == "gpt-5" and info.stream is True
    assert info.system_prompt == "You are a helpful assistant."
    assert (info.messages_count, info.tools_count) == (6, 1)
    assert info.tool_results == [
        ToolResult("call_5dp5Uj0Loqn1YcyIpqSq6sLX", '"Sunny"', tool_name="get_weather"),
        ToolResult("call_prev", "line 1", tool_name=None),
    ]
    assert info.error is None
    assert "What is the weather" in info.prompt_text and "get_weather" in info.prompt_text
    assert "And tomorrow?" in info.prompt_text


def test_simple_request_and_system_fallback() -> None:
    info = PARSER.parse_request(fixture("request_simple.json"))
    assert info == RequestInfo(model="gpt-4o-mini", messages_count=1, prompt_text="Tell me a joke")
    dev = {"model": "m", "input": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "x"}],
           "instructions": None}  # fmt: skip
    assert PARSER.parse_request(json.dumps(dev).encode()).system_prompt == "Be brief."
    listed = {
        "model": "m",
        "instructions": [{"role": "system", "content": [{"type": "input_text", "text": "S"}]}],
    }
    assert PARSER.parse_request(json.dumps(listed).encode()).system_prompt == "S"
    custom = {"input": [{"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** x"},
                        {"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"}]}  # fmt: skip
    assert PARSER.parse_request(json.dumps(custom).encode()).tool_results == [
        ToolResult("c1", "ok", tool_name="apply_patch")
    ]


@pytest.mark.parametrize(
    ("body", "error"),
    [(b"", "empty request body"), (b"{nope", "request body is not valid JSON"),
     (b"[1]", "request body is a JSON list, not an object"), (b"\xff\xfe", "request body is not valid UTF-8")],
)  # fmt: skip
def test_bad_request_bodies(body: bytes, error: str) -> None:
    assert PARSER.parse_request(body).error == error
    assert PARSER.parse_request(b'{"model": "gpt-5", "input": [tru').model == "gpt-5"


CONTRACT = Contract(
    PARSER,
    "openai_responses",
    STREAMS,
    BODIES,
    fuzz_prefix="stream_gpt5_tool.sse",
    pairs=[("stream_gpt5_tool.sse", "response_gpt5_tool.json")],
)
"""What `tests/providers/test_contract.py` checks of this parser."""


# -- responses ------------------------------------------------------------------------------


def test_error_bodies() -> None:
    body = b'{"error": {"message": "Rate limit", "type": "requests", "param": null, "code": "rate_limit_exceeded"}}'
    assert PARSER.parse_response(body, 429) == ResponseSummary(error_type="requests", error_message="Rate limit",
                                                               complete=True)  # fmt: skip
    failed = {"id": "resp_f", "object": "response", "status": "failed", "model": "gpt-5", "output": [],
              "error": {"code": "server_error", "message": "boom"}, "usage": None}  # fmt: skip
    s = PARSER.parse_response(json.dumps(failed).encode(), 200)
    assert (s.message_id, s.stop_reason, s.error_type, s.error_message) == (
        "resp_f",
        "failed",
        "server_error",
        "boom",
    )
    assert (
        PARSER.parse_response(b"<html>bad gateway</html>", 502).error_message
        == "HTTP 502: <html>bad gateway</html>"
    )


def test_missing_deltas_are_reconciled_from_done_events() -> None:
    interp = PARSER.stream()
    for obj in [
        {"type": "response.created", "response": {"id": "r", "model": "m"}},
        {"type": "response.output_item.done", "output_index": 0,
         "item": {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}},
        {"type": "response.output_text.done", "item_id": "msg", "output_index": 1, "content_index": 0, "text": "hi"},
        {"type": "response.output_item.done", "output_index": 2,
         "item": {"id": "rs", "type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]}},
        {"type": "response.refusal.delta", "item_id": "m2", "output_index": 3, "content_index": 0, "delta": "no"},
        {"type": "response.some_new_event", "x": 1},
        {"type": "brand_new", "x": 1},
        {"type": "response.completed", "response": {"status": "completed"}},
        {"type": "response.output_text.delta", "delta": "after the end"},
    ]:  # fmt: skip
        interp.event(ev(obj))
    s = interp.finish()
    assert s.text == "hi\n\n[refusal] no" and s.thinking == "think"
    assert s.tool_calls == [ToolCall(0, "call_1", "f", "{}")]
    assert (s.complete, s.stop_reason, s.unknown_events, s.parse_errors) == (True, "completed", 1, 0)


def test_terminal_output_fills_an_empty_stream_and_garbage_is_counted() -> None:
    interp = PARSER.stream()
    for e in [ev("not json"), ev("[DONE]"), ev({"type": "response.completed", "response": json.loads(
            fixture("response_text.json"))})]:  # fmt: skip
        interp.event(e)
    s = interp.finish()
    assert s.text.startswith("I can't provide") and s.parse_errors == 1 and s.complete
    wrapped = PARSER.stream()
    wrapped.event(
        ev({"type": "error", "status": 429, "error": {"type": "usage_limit_reached", "message": "slow"}})
    )
    assert (wrapped.finish().error_type, wrapped.summary.error_message) == ("usage_limit_reached", "slow")


# -- WebSocket turns ------------------------------------------------------------------------


def test_websocket_turns() -> None:
    turns = WebSocketTurns()
    create = {
        "type": "response.create",
        "model": "gpt-5",
        "instructions": "Be terse.",
        "input": "hi",
        "tools": [],
    }
    assert request_of(create) == {"model": "gpt-5", "instructions": "Be terse.", "input": "hi", "tools": []}
    assert turns.message(True, json.dumps(create).encode(), True, 10.0) == []
    events = [
        line[6:]
        for line in fixture("stream_gpt5_tool.sse").decode().splitlines()
        if line.startswith("data: ")
    ]
    done = []
    for i, data in enumerate(events):
        done += turns.message(False, data.encode(), True, 11.0 + i)
    (turn,) = done
    assert turn.summary == GPT5 and turn.started == 10.0 and turn.ended == 11.0 + len(events) - 1
    assert turn.first_content == 15.0 and turn.request.system_prompt == "Be terse." and turn.request.stream
    assert turn.response_bytes == sum(len(e.encode()) for e in events) and turn.status == 200
    # a second turn, Realtime-style envelope, cut by the socket closing
    wrapped = {"type": "response.create", "response": {"model": "gpt-5", "input": "again"}}
    assert turns.message(True, json.dumps(wrapped).encode(), True, 50.0) == []
    assert turns.message(False, b'{"type":"response.output_text.delta","delta":"par"}', True, 51.0) == []
    (cut,) = turns.close(52.0)
    assert (cut.summary.text, cut.summary.complete, cut.request.model) == ("par", False, "gpt-5")
    assert cut.summary.error_message == "connection closed before the response ended"
    assert turns.message(False, b"\x00garbage", False, 53.0) == [] and turns.close(54.0) == []
    err = WebSocketTurns()
    err.message(True, b'{"type":"response.create","model":"m"}', True, 1.0)
    (t,) = err.message(
        False, b'{"type":"error","status":429,"error":{"type":"rate_limit","message":"x"}}', True, 2.0
    )
    assert (t.status, t.summary.error_type) == (429, "rate_limit")


def test_one_definition_of_a_websocket_turn_end() -> None:
    """`ws_turn_ended` (mitmdump's budgets and `WebSocketTurns` both call it) says exactly when the
    parser sees a response end, and a server message that only mentions an end does not end a turn
    (the byte search it replaces took `"error": null` in `response.created` for one)."""
    events = [
        line[6:]
        for line in fixture("stream_gpt5_tool.sse").decode().splitlines()
        if line.startswith("data: ")
    ]
    extra = ['{"type":"response.created","response":{"error":null}}', '{"type":"error","code":"x"}',
             '{"type":"response.output_text.delta","delta":"response.completed"}', '{"type":5}', "[1]", "x",
             '{"type":"response.failed","response":{"status":"failed"}}']  # fmt: skip
    for data in events + extra:
        interp = PARSER.stream()
        interp.event(SSEEvent(None, data))
        assert ws_turn_ended(data.encode()) is ws_turn_ended(data) is interp.terminal, data
    assert [ws_turn_ended(e) for e in events].count(True) == 1 and ws_turn_ended(events[-1])


# -- fuzzing --------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
TYPES = ["response.created", "response.output_item.added", "response.output_item.done",
         "response.function_call_arguments.delta", "response.function_call_arguments.done",
         "response.output_text.delta", "response.output_text.done", "response.reasoning_summary_text.delta",
         "response.reasoning_text.delta", "response.refusal.delta", "response.completed", "response.incomplete",
         "response.failed", "error", "response.custom_tool_call_input.delta"]  # fmt: skip
event_objs = st.fixed_dictionaries(
    {"type": st.sampled_from(TYPES) | json_values},
    optional={"item": st.fixed_dictionaries({"type": st.sampled_from(["function_call", "message", "reasoning"])},
                                            optional={"id": json_values, "call_id": json_values, "name": json_values,
                                                      "arguments": json_values, "summary": json_values,
                                                      "content": json_values}) | json_values,
              "item_id": json_values, "output_index": json_values, "delta": json_values, "text": json_values,
              "arguments": json_values, "response": json_values, "code": json_values, "error": json_values,
              "summary_index": json_values, "content_index": json_values},
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(event_objs.map(json.dumps) | st.text(max_size=10), max_size=12))
def test_fuzz_stream_never_raises(datas: list[str]) -> None:
    interp = PARSER.stream()
    for d in datas:
        interp.read(SSEEvent(None, d))  # the unguarded logic: event() would hide a bug
    s = interp.finish()
    assert all(c.call_id for c in s.tool_calls)


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=100)
    | st.fixed_dictionaries({}, optional={"object": st.just("response") | json_values, "output": json_values,
                                          "status": json_values, "usage": json_values, "error": json_values,
                                          "incomplete_details": json_values}).map(lambda v: json.dumps(v).encode())
    | st.fixed_dictionaries({}, optional={"model": json_values, "input": json_values, "instructions": json_values,
                                          "tools": json_values, "stream": json_values}).map(
        lambda v: json.dumps(v).encode()),
    st.integers(100, 599),
)  # fmt: skip
def test_fuzz_bodies_never_raise(body: bytes, status: int) -> None:
    assert isinstance(_parse_request(body), RequestInfo)
    assert isinstance(PARSER.read_response(body, status), ResponseSummary)
    turns = WebSocketTurns()
    turns.message(True, b'{"type":"response.create"}', True, 0.0)
    turns.message(False, body, True, 1.0)
    turns.close(2.0)


@settings(max_examples=200, deadline=None)
@given(event_objs.map(json.dumps) | st.text(max_size=10))
def test_fuzz_turn_end_agrees_with_the_parser(data: str) -> None:
    interp = PARSER.stream()
    interp.event(SSEEvent(None, data))
    assert ws_turn_ended(data) is interp.terminal


def test_the_apis_own_shell_and_patch_calls_and_codex_local_shell_are_tool_calls():
    """`shell_call`, `apply_patch_call` and `local_shell_call` carry no `name`: the agent runs them
    all the same, so they are tool calls named by their tool, with their action or operation."""
    from addons.items import request_items
    from tests.addons.toolhold.test_hold import PATCH_CALL, SHELL_CALL, _responses_sse

    local = {"type": "local_shell_call", "id": "ls_1", "call_id": "call_ls", "status": "completed",
             "action": {"type": "exec", "command": ["bash", "-lc", "ls"]}}  # fmt: skip
    expected = [
        ("shell", SHELL_CALL["action"]),
        ("apply_patch", PATCH_CALL["operation"]),
        ("local_shell", local["action"]),
    ]
    for item, (name, arguments) in zip((SHELL_CALL, PATCH_CALL, local), expected, strict=True):
        reader = ResponseReader(OpenAIResponses(), framing="sse", content_encoding=None, status=200)
        reader.feed(_responses_sse(item))
        for summary in (reader.finish(), OpenAIResponses().parse_response(json.dumps(
                {"id": "resp_1", "status": "completed", "output": [item]}).encode(), 200)):  # fmt: skip
            (call,) = summary.tool_calls
            assert (call.call_id, call.name, json.loads(call.arguments)) == (item["call_id"], name, arguments)
    request = {"model": "gpt-5.1", "input": [SHELL_CALL, {"type": "shell_call_output", "call_id": "call_sh",
                                                          "output": "removed"}]}  # fmt: skip
    (result,) = _parse_request(json.dumps(request).encode()).tool_results
    assert (result.call_id, result.tool_name, result.content) == ("call_sh", "shell", "removed")
    kinds = [(i.kind, i.tool_name) for i in request_items("openai_responses", json.dumps(request).encode())]
    assert kinds == [("tool_call", "shell"), ("tool_result", None)]


@pytest.mark.parametrize("kind", ["shell_call", "apply_patch_call"])
def test_a_shell_or_patch_call_is_built_from_its_own_deltas_when_the_stream_is_cut(kind: str) -> None:
    """`shell_call_command.*` and `apply_patch_call_operation_diff.*` (as the API names them) build
    the call's `action.commands` / `operation.diff`: whole, the item's `done` says the same; cut
    before it, the call is recorded incomplete with what the deltas had said, at every cut."""
    from tests.addons.toolhold.test_hold import (
        ADDED,
        PATCH_DELTAS,
        PATCH_EDIT,
        SHELL_CALL,
        SHELL_DELTAS,
        _responses_sse,
    )

    item, between = (SHELL_CALL, SHELL_DELTAS) if kind == "shell_call" else (PATCH_EDIT, PATCH_DELTAS)
    arguments = item["action"] if kind == "shell_call" else item["operation"]

    def recorded(sse: bytes, pieces: int = 1) -> ToolCall:
        reader = ResponseReader(OpenAIResponses(), framing="sse", content_encoding=None, status=200)
        size = -(-len(sse) // pieces)
        for i in range(0, len(sse), size):
            reader.feed(sse[i : i + size])
        (call,) = reader.finish().tool_calls
        return call

    whole = recorded(_responses_sse(item, between, added=ADDED[kind]), pieces=7)
    assert json.loads(whole.arguments) == arguments and whole.complete
    cut = _responses_sse(item, between, added=ADDED[kind], done=False)
    for pieces in (1, 3, 11):
        call = recorded(cut, pieces)
        assert (call.call_id, json.loads(call.arguments), call.complete) == (
            item["call_id"],
            arguments,
            False,
        )
    # cut after the last deltas but before their `.done`: the joined deltas
    last_delta = _responses_sse(item, between[:-1], added=ADDED[kind], done=False)
    assert json.loads(recorded(last_delta).arguments) == arguments
