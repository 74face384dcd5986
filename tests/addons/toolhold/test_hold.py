"""The hold machines over real provider streams (tests/fixtures), cut at every point.

Allowed calls: the agent receives exactly the upstream's bytes, however the chunks fall
(mid-event, mid-line, mid-UTF-8). Denied calls: the answer the real SDK parses has no tool
call, names the rule, and ends as a normal end of turn; among parallel calls only the denied
one is replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addons.toolhold import HeldCall, SseHold, calls_in, machine_for, rewrite_json
from addons.toolhold.openai_responses import call_of
from tests.addons.toolhold import sdk_parse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
STREAMS = {
    "anthropic": FIXTURES / "anthropic" / "stream_thinking_tools.sse",
    "openai_chat": FIXTURES / "openai_chat" / "stream_parallel_tools.sse",
    "openai_responses": FIXTURES / "openai_responses" / "stream_gpt5_tool.sse",
    "gemini": FIXTURES / "gemini" / "stream_tools.sse",
}
EXPECTED_CALLS = {"anthropic": 2, "openai_chat": 2, "openai_responses": 1, "gemini": 2}


def run(protocol: str, pieces: list[bytes], decide) -> bytes:
    machine = machine_for(protocol, decide)
    assert machine is not None
    hold = SseHold(machine)
    sent = [c for p in pieces if p for c in hold(p)] + hold(b"")
    assert all(sent), "an empty chunk would end an HTTP/1.1 chunked body"
    out = b"".join(sent)
    assert hold.failure is None
    return out


def cut(data: bytes, points: list[int]) -> list[bytes]:
    points = sorted({p for p in points if 0 < p < len(data)})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def allow(calls: list[HeldCall]):
    def decide(call: HeldCall) -> None:
        calls.append(call)

    return decide


def deny(names: set[str] | None = None):
    return lambda call: "no-rm" if names is None or call.name in names else None


@pytest.mark.parametrize("protocol", sorted(STREAMS))
def test_allowed_calls_pass_byte_identical_at_every_cut(protocol):
    data = STREAMS[protocol].read_bytes()
    for point in range(1, len(data)):
        calls: list[HeldCall] = []
        assert run(protocol, cut(data, [point]), allow(calls)) == data
        assert len(calls) == EXPECTED_CALLS[protocol]
    assert run(protocol, [bytes([b]) for b in data], allow([])) == data  # one byte at a time


@pytest.mark.parametrize("protocol", sorted(STREAMS))
@settings(max_examples=40, deadline=None)
@given(points=st.lists(st.integers(min_value=1, max_value=20_000), max_size=12))
def test_allowed_and_denied_do_not_depend_on_the_chunks(protocol, points):
    data = STREAMS[protocol].read_bytes()
    assert run(protocol, cut(data, points), allow([])) == data
    assert run(protocol, cut(data, points), deny()) == run(protocol, [data], deny())


def test_the_calls_are_read_whole():
    calls: list[HeldCall] = []
    run("anthropic", [STREAMS["anthropic"].read_bytes()], allow(calls))
    assert [c.name for c in calls] == ["Read", "Grep"]
    assert all(isinstance(c.arguments, dict) and c.arguments for c in calls)
    calls = []
    run("openai_chat", [STREAMS["openai_chat"].read_bytes()], allow(calls))
    assert [c.call_id.startswith("call_") for c in calls] == [True, True]
    assert all(c.arguments for c in calls)


def test_anthropic_denied_ends_the_turn_and_the_sdk_reads_it():
    out = run("anthropic", [STREAMS["anthropic"].read_bytes()], deny())
    message = sdk_parse.anthropic_final(out)
    assert not [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "end_turn"
    texts = [b.text for b in message.content if b.type == "text"]
    assert sum("'no-rm'" in t and "not run" in t for t in texts) == 2
    original = sdk_parse.anthropic_final(STREAMS["anthropic"].read_bytes())
    assert message.usage == original.usage


def test_anthropic_only_the_denied_parallel_call_is_replaced():
    out = run("anthropic", [STREAMS["anthropic"].read_bytes()], deny({"Grep"}))
    message = sdk_parse.anthropic_final(out)
    assert [b.name for b in message.content if b.type == "tool_use"] == ["Read"]
    assert message.stop_reason == "tool_use"
    original = sdk_parse.anthropic_final(STREAMS["anthropic"].read_bytes())
    assert [b.type for b in message.content] == [*[b.type for b in original.content][:-1], "text"]


def test_openai_chat_denied_and_parallel():
    data = STREAMS["openai_chat"].read_bytes()
    completion = sdk_parse.chat_final(run("openai_chat", [data], deny()))
    choice = completion.choices[0]
    assert not choice.message.tool_calls and choice.finish_reason == "stop"
    assert choice.message.content.count("not run") == 2
    names = [c.function.name for c in sdk_parse.chat_final(data).choices[0].message.tool_calls]
    first = names[0]
    calls: list[HeldCall] = []
    run("openai_chat", [data], allow(calls))
    completion = sdk_parse.chat_final(
        run("openai_chat", [data], lambda c: "r" if c.call_id == calls[0].call_id else None)
    )
    choice = completion.choices[0]
    assert [c.id for c in choice.message.tool_calls] == [calls[1].call_id]
    assert choice.finish_reason == "tool_calls" and "not run" in choice.message.content
    assert json.loads(choice.message.tool_calls[0].function.arguments) == calls[1].arguments
    assert first


def test_openai_responses_denied_becomes_a_message():
    data = STREAMS["openai_responses"].read_bytes()
    response = sdk_parse.responses_final(run("openai_responses", [data], deny()))
    assert not [i for i in response.output if i.type in ("function_call", "custom_tool_call")]
    assert "not run" in response.output_text and response.status == "completed"
    assert response.usage == sdk_parse.responses_final(data).usage


def test_openai_responses_over_websocket_messages():
    data = STREAMS["openai_responses"].read_bytes()
    from addons.toolhold.sse import data_of, split_events

    messages = [data_of(raw) for raw in split_events(bytearray(data), final=True)]
    messages = [m for m in messages if m]
    for decide, kept in ((allow([]), True), (deny(), False)):
        machine = machine_for("openai_responses", decide, sse=False)
        out = [o for m in messages for o in machine.event(m, m)] + machine.finish()
        assert (out == messages) is kept
        response = sdk_parse.responses_events(out)
        assert bool([i for i in response.output if i.type == "function_call"]) is kept


def test_gemini_denied_part_becomes_text():
    data = STREAMS["gemini"].read_bytes()
    chunks = sdk_parse.gemini_chunks(run("gemini", [data], deny()))
    assert not any(c.function_calls for c in chunks)
    assert any("not run" in (c.text or "") for c in chunks)
    assert any(c.function_calls for c in sdk_parse.gemini_chunks(data))


JSON = {
    "anthropic": (FIXTURES / "anthropic" / "message_tool_use.json", sdk_parse.anthropic_json),
    "openai_chat": (FIXTURES / "openai_chat" / "response_tool_calls.json", sdk_parse.chat_json),
    "openai_responses": (FIXTURES / "openai_responses" / "response_gpt5_tool.json", sdk_parse.responses_json),
}


@pytest.mark.parametrize("protocol", sorted(JSON))
def test_whole_json_answers(protocol):
    path, parse = JSON[protocol]
    data = path.read_bytes()
    calls = calls_in(protocol, data)
    assert calls and all(c.name for c in calls)
    assert rewrite_json(protocol, data, lambda c: None) is None  # allowed: nothing to change
    parsed = parse(rewrite_json(protocol, data, deny()))
    assert "not run" in json.dumps(parsed.model_dump())
    if protocol == "anthropic":
        assert parsed.stop_reason == "end_turn" and not [b for b in parsed.content if b.type == "tool_use"]
    if protocol == "openai_chat":
        assert parsed.choices[0].finish_reason == "stop" and not parsed.choices[0].message.tool_calls
    if protocol == "openai_responses":
        assert not [i for i in parsed.output if i.type == "function_call"] and "not run" in parsed.output_text


def test_gemini_whole_answers_object_and_array():
    data = STREAMS["gemini"].read_bytes()
    chunks = [
        json.loads(c.model_dump_json(exclude_none=True, by_alias=True)) for c in sdk_parse.gemini_chunks(data)
    ]
    body = json.dumps(chunks).encode()
    assert [c.name for c in calls_in("gemini", body)] == [c.name for c in calls_in("gemini", data)]
    rewritten = json.loads(rewrite_json("gemini", body, deny()))
    assert "functionCall" not in json.dumps(rewritten) and "not run" in json.dumps(rewritten)


def through_a_failing_decision(hold_type, protocol: str, data: bytes, size: int = 100) -> bytes:
    """What a hold of `hold_type` gives out for `data` (in `size`-byte chunks) when every decision
    raises; it must have noted the failure."""

    def broken(call):
        raise RuntimeError("boom")

    hold = hold_type(machine_for(protocol, broken))
    out = b"".join(hold.take(data[i : i + size]) for i in range(0, len(data), size)) + hold.take(b"")
    assert hold.failure is not None
    return out


def test_a_failing_decision_lets_the_answer_through_unchanged():
    data = STREAMS["anthropic"].read_bytes()
    assert through_a_failing_decision(SseHold, "anthropic", data) == data


def test_a_text_delta_cut_in_two_goes_out_at_once_a_tool_calls_bytes_do_not():
    data = STREAMS["anthropic"].read_bytes()
    text, call = data.index(b"text_delta"), data.index(b'"tool_use"')
    hold = SseHold(machine_for("anthropic", allow([])))
    before = b"".join(hold(data[: text + 5]))  # mid-event: the delta's first bytes are out already
    assert before == data[: text + 5]
    middle = b"".join(hold(data[text + 5 : call + 3]))  # up to inside the call's first event
    assert before + middle == data[: data.rindex(b"event:", 0, call)]  # nothing of the call yet
    assert before + middle + b"".join(hold(data[call + 3 :]) + hold(b"")) == data


def test_a_responses_text_delta_cut_in_two_goes_out_at_once():
    data = (FIXTURES / "openai_responses" / "stream_text_reasoning.sse").read_bytes()
    text = data.index(b"event: response.output_text.delta") + 40
    hold = SseHold(machine_for("openai_responses", allow([])))
    assert b"".join(hold(data[:text])) == data[:text]
    assert b"".join(hold(data[text:]) + hold(b"")) == data[text:]


def _gemini_array() -> bytes:
    """The Gemini SSE fixture's chunks as the JSON array a stream without `alt=sse` sends."""
    from addons.toolhold.sse import data_of, split_events

    objects = [data_of(raw) for raw in split_events(bytearray(STREAMS["gemini"].read_bytes()), final=True)]
    return b"[" + b"\n,\r\n".join(o for o in objects if o) + b"\n]"


def test_gemini_json_array_streams_at_every_cut():
    from addons.toolhold.gemini import GeminiHold
    from addons.toolhold.json_array import ArrayHold

    data = _gemini_array()
    denied = None
    for point in range(1, len(data)):
        calls: list[HeldCall] = []
        hold = ArrayHold(GeminiHold(allow(calls)))
        sent = hold(data[:point]) + hold(data[point:]) + hold(b"")
        assert all(sent) and b"".join(sent) == data and len(calls) == 2
        hold = ArrayHold(GeminiHold(deny({"bash"})))
        out = b"".join(hold(data[:point]) + hold(data[point:]) + hold(b""))
        assert denied is None or out == denied
        denied = out
    parts = [p for r in json.loads(denied) for p in r["candidates"][0]["content"]["parts"]]
    assert [p["functionCall"]["name"] for p in parts if "functionCall" in p] == ["read"]
    assert any("not run" in p.get("text", "") for p in parts)


TEXT_EVENT = {
    "anthropic": b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                 b'"delta":{"type":"text_delta","text":"Let me look."}}\n\n',
    "openai_chat": b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Let me look."}}]}\n\n',
    "openai_responses": b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                        b'"delta":"Let me look."}\n\n',
    "gemini": b'data: {"candidates":[{"content":{"parts":[{"text":"Let me look."}]}}]}\n\n',
}  # fmt: skip


@pytest.mark.parametrize("protocol", sorted(STREAMS))
def test_events_with_no_call_in_them_go_out_unread(protocol):
    """Text with no call in it goes out without the machine reading it event by event (the
    answers' common case costs a search per chunk); the call after it is still held and denied."""
    head = TEXT_EVENT[protocol] * 50
    data = head + STREAMS[protocol].read_bytes()
    machine = machine_for(protocol, deny())
    read: list[bytes] = []
    event = machine.event
    machine.event = lambda raw, data: read.append(raw) or event(raw, data)  # type: ignore[method-assign]
    hold = SseHold(machine)
    assert hold.take(head[:-30]) + hold.take(head[-30:]) == head and read == []
    assert head + hold.take(data[len(head) :]) + hold.take(b"") == run(protocol, [data], deny())
    assert read and machine.rewritten


def test_gemini_code_assist_envelopes_are_held():
    """The Gemini CLI signed in with Google: each chunk is `{"response": {...}, "traceId": ...}`."""
    call = {"functionCall": {"name": "run_shell_command", "args": {"command": "rm -rf x"}}}
    chunk = {"response": {"candidates": [{"content": {"role": "model", "parts": [call]}}]}, "traceId": "t"}
    sse = b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"
    out = run("gemini", [sse[:20], sse[20:]], deny())
    parts = json.loads(out[6:])["response"]["candidates"][0]["content"]["parts"]
    assert parts == [{"text": parts[0]["text"]}] and "not run" in parts[0]["text"]
    assert json.loads(out[6:])["traceId"] == "t"
    whole = json.dumps(chunk).encode()
    assert [c.call_id for c in calls_in("gemini", whole)] == ["gemini_run_shell_command_0"]
    assert b"functionCall" not in rewrite_json("gemini", whole, deny())
    assert b"functionCall" not in rewrite_json("gemini", json.dumps([chunk, chunk]).encode(), deny())


def _responses_sse(item: dict, between: tuple[dict, ...] = (), *, added: dict | None = None,
                   done: bool = True) -> bytes:  # fmt: skip
    """A streamed Responses answer whose one output item is `item`: added in progress (as `added`,
    else as it is), the events `between` (its own deltas), then done (`done=False`: the stream is
    cut before that)."""
    events = [
        {"type": "response.created", "response": {"id": "resp_1", "output": []}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**(added or item), "status": "in_progress"},
        },
        *between,
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": [item]}},
    ][: None if done else 2 + len(between)]
    return b"".join(
        b"event: "
        + e["type"].encode()
        + b"\ndata: "
        + json.dumps({**e, "sequence_number": n}).encode()
        + b"\n\n"
        for n, e in enumerate(events)
    )


SHELL_CALL = {"type": "shell_call", "id": "sh_1", "call_id": "call_sh", "status": "completed",
              "action": {"commands": ["ls", "rm -rf capsem-doomed.txt"], "timeout_ms": 1000}}  # fmt: skip
PATCH_CALL = {"type": "apply_patch_call", "id": "ap_1", "call_id": "call_ap", "status": "completed",
              "operation": {"type": "delete_file", "path": "/etc/hosts"}}  # fmt: skip
SHELL_DELTAS = tuple(
    {"type": f"response.shell_call_command.{kind}", "output_index": 0, "command_index": i, **fields}
    for i, command in enumerate(SHELL_CALL["action"]["commands"])
    for kind, fields in (("added", {"command": ""}), ("delta", {"delta": command[:3], "obfuscation": "x"}),
                         ("delta", {"delta": command[3:]}), ("done", {"command": command}))
)  # fmt: skip
"""The events the API streams a shell call's commands as (no item id: by output and command index)."""
PATCH_EDIT = {**PATCH_CALL, "operation": {"type": "update_file", "path": "/etc/hosts",
                                          "diff": "@@\n-127.0.0.1 localhost\n+10.0.0.9 localhost\n"}}  # fmt: skip
_DIFF = "response.apply_patch_call_operation_diff"
PATCH_DELTAS = (
    {"type": f"{_DIFF}.delta", "item_id": "ap_1", "output_index": 0, "delta": "@@\n-127.0.0.1 localhost\n"},
    {"type": f"{_DIFF}.delta", "item_id": "ap_1", "output_index": 0, "delta": "+10.0.0.9 localhost\n"},
    {"type": f"{_DIFF}.done", "item_id": "ap_1", "output_index": 0, "diff": PATCH_EDIT["operation"]["diff"]},
)
"""The events the API streams a patch's diff as."""
ADDED = {"shell_call": {**SHELL_CALL, "action": {**SHELL_CALL["action"], "commands": []}},
         "apply_patch_call": {**PATCH_EDIT, "operation": {**PATCH_EDIT["operation"], "diff": ""}}}  # fmt: skip
"""Each call as `output_item.added` announces it, before its deltas."""


def test_the_responses_shell_and_apply_patch_tools_are_held():
    """The Responses API's own `shell` and `apply_patch` tools, which the agent runs: a rule on
    `command` (as for every shell tool) or on the patch's `path` decides them."""
    from addons.providers import parser_for
    from addons.proxy.policy import Policy, ToolTarget, tool_arguments
    from capsem.settings import parse

    policy = Policy.from_settings(parse({"policy": {"rules": [
        {"name": "no-rm", "action": "deny", "tool": "*", "tool_args": {"command": {"shell": "rm -rf"}}},
        {"name": "no-etc", "action": "deny", "tool": "apply_patch", "tool_args": {"path": "/etc/*"}}]}}))  # fmt: skip

    def decide(call: HeldCall) -> str | None:
        arguments = tool_arguments(call.text) if call.text is not None else call.arguments  # as ToolGate
        verdict = policy.decide_tool(ToolTarget(call.name, arguments, None, None))
        return verdict.rule if verdict.decision == "denied" else None

    for item, rule in ((SHELL_CALL, "no-rm"), (PATCH_CALL, "no-etc")):
        sse = _responses_sse(item)
        calls: list[HeldCall] = []
        assert run("openai_responses", [sse[:50], sse[50:]], allow(calls)) == sse and len(calls) == 1
        out = run("openai_responses", [sse], decide)
        assert f"policy rule '{rule}'" in out.decode() and item["type"].encode() not in out
        whole = {"id": "resp_1", "status": "completed", "output": [item]}
        assert [c.call_id for c in calls_in("openai_responses", json.dumps(whole).encode())] == [
            item["call_id"]
        ]
        assert item["type"].encode() not in rewrite_json(
            "openai_responses", json.dumps(whole).encode(), decide
        )
        # `capsem policy test` decides the recorded call the same way (its arguments as stored)
        (recorded,) = (
            parser_for("openai_responses").parse_response(json.dumps(whole).encode(), 200).tool_calls
        )
        held = HeldCall(recorded.call_id, recorded.name, None, recorded.arguments)
        assert decide(held) == rule
    harmless = {**SHELL_CALL, "action": {"commands": ["ls"]}}
    assert run("openai_responses", [_responses_sse(harmless)], decide) == _responses_sse(harmless)
    # with the deltas the API streams them with: held with the call, gone with a denied one
    for item, between, rule in ((SHELL_CALL, SHELL_DELTAS, "no-rm"), (PATCH_EDIT, PATCH_DELTAS, "no-etc")):
        sse = _responses_sse(item, between, added=ADDED[item["type"]])
        out = run("openai_responses", cut(sse, list(range(0, len(sse), 97))), decide)
        assert f"policy rule '{rule}'" in out.decode()
        assert b"rm -rf" not in out and b"10.0.0.9" not in out and b"shell_call_command" not in out
        assert b"operation_diff" not in out
        calls = []
        assert run("openai_responses", cut(sse, list(range(0, len(sse), 97))), allow(calls)) == sse
        assert [(c.name, c.arguments) for c in calls] == [(call_of(item).name, call_of(item).arguments)]


def _chat_sse(chunks: list[dict]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def test_a_chat_custom_tool_call_is_held_by_its_input():
    """A Chat Completions custom (free-form) tool: `custom.input` arrives in pieces, as text."""

    def delta(d: dict, finish: str | None = None) -> dict:
        return {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-5",
                "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}  # fmt: skip

    stream = _chat_sse([
        delta({"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_c", "type": "custom", "custom": {"name": "exec", "input": ""}}]}),
        delta({"tool_calls": [{"index": 0, "custom": {"input": "rm -rf "}}]}),
        delta({"tool_calls": [{"index": 0, "custom": {"input": "/tmp/x"}}]}),
        delta({}, "tool_calls"),
    ])  # fmt: skip
    calls: list[HeldCall] = []
    for point in range(1, len(stream), 13):
        assert run("openai_chat", cut(stream, [point]), allow(calls)) == stream
    assert {(c.call_id, c.name, c.text) for c in calls} == {("call_c", "exec", "rm -rf /tmp/x")}
    denied = run("openai_chat", [stream], lambda call: "no-rm" if "rm -rf" in (call.text or "") else None)
    assert b'"custom"' not in denied and b"exec tool call was denied by policy rule 'no-rm'" in denied
    assert b'"finish_reason": "stop"' in denied or b'"finish_reason":"stop"' in denied
    call = {"id": "call_c", "type": "custom", "custom": {"name": "exec", "input": "rm -rf /"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    whole = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}]}
    assert [(c.name, c.arguments) for c in calls_in("openai_chat", json.dumps(whole).encode())] == [
        ("exec", {"input": "rm -rf /"})
    ]
    assert b'"custom"' not in rewrite_json("openai_chat", json.dumps(whole).encode(), deny())
    # the recorder files it under the same id, with its input as its arguments
    from addons.body import ResponseReader
    from addons.items import request_items
    from addons.providers import parser_for

    reader = ResponseReader(parser_for("openai_chat"), framing="sse", content_encoding=None, status=200)
    reader.feed(stream)
    for summary in (
        reader.finish(),
        parser_for("openai_chat").parse_response(json.dumps(whole).encode(), 200),
    ):
        assert [(c.call_id, c.name) for c in summary.tool_calls] == [("call_c", "exec")]
        assert summary.tool_calls[0].arguments.startswith("rm -rf /")
    request = {"model": "gpt-5", "tools": [{"type": "custom", "custom": {"name": "exec"}}],
               "messages": [message, {"role": "tool", "tool_call_id": "call_c", "content": "done"}]}  # fmt: skip
    (result,) = parser_for("openai_chat").parse_request(json.dumps(request).encode()).tool_results
    assert (result.call_id, result.tool_name) == ("call_c", "exec")
    items = request_items("openai_chat", json.dumps(request).encode())
    assert [(i.kind, i.tool_name) for i in items][:2] == [("tool_definition", "exec"), ("tool_call", "exec")]
