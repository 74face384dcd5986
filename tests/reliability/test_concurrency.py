"""50 concurrent tool loops (real anthropic and openai SDKs, 25 each, streamed and not) through
one mitmdump: every model call, tool call and tool result recorded exactly once, each loop in
one trace, nothing lost, nothing duplicated."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import anthropic
import openai
import pytest

from tests.conftest import rows
from tests.e2e.test_capture_sdk import (
    ANTHROPIC_KEY,
    OPENAI_KEY,
    TOOLS_A,
    TOOLS_O,
    assert_call_matches,
    finish,
    http_client,
    model_exchanges,
)

LOOPS = 25  # per SDK


def claude_loop(proxy, n: int) -> int:
    client = anthropic.Anthropic(api_key=ANTHROPIC_KEY, http_client=http_client(proxy), max_retries=0,
                                 default_headers={"x-emulator": "tools=2; chunk=9"})  # fmt: skip
    messages: list = [{"role": "user", "content": f"loop {n}: read and search"}]
    with client.messages.stream(
        model="claude-sonnet-4-5", max_tokens=512, tools=TOOLS_A, messages=messages
    ) as s:
        first = s.get_final_message()
    uses = [b for b in first.content if b.type == "tool_use"]
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id, "content": f"r{n}"}
                                              for u in uses]}]  # fmt: skip
    client.messages.create(model="claude-sonnet-4-5", max_tokens=512, tools=TOOLS_A, messages=messages)
    return len(uses)


def gpt_loop(proxy, n: int) -> int:
    client = openai.OpenAI(api_key=OPENAI_KEY, http_client=http_client(proxy), max_retries=0,
                           default_headers={"x-emulator": "tools=2"})  # fmt: skip
    messages: list = [{"role": "user", "content": f"loop {n}: read and search"}]
    first = client.chat.completions.create(model="gpt-4.1", messages=messages, tools=TOOLS_O)
    calls = first.choices[0].message.tool_calls or []
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages += [{"role": "tool", "tool_call_id": c.id, "content": f"r{n}"} for c in calls]
    stream = client.chat.completions.create(model="gpt-4.1", messages=messages, tools=TOOLS_O, stream=True,
                                            stream_options={"include_usage": True})  # fmt: skip
    list(stream)
    return len(calls)


def test_fifty_concurrent_tool_loops_lose_and_duplicate_nothing(mitmdump, emu, capsem_home):
    run_loops(mitmdump, emu, capsem_home, LOOPS)


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_soak_five_hundred_tool_loops(mitmdump, emu, capsem_home):
    run_loops(mitmdump, emu, capsem_home, 250)


def run_loops(mitmdump, emu, capsem_home, loops: int) -> None:
    """`loops` anthropic and `loops` openai tool loops, 50 at a time, then every row checked."""
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    with ThreadPoolExecutor(max_workers=50) as pool:
        jobs = [pool.submit(claude_loop, proxy, n) for n in range(loops)]
        jobs += [pool.submit(gpt_loop, proxy, n) for n in range(loops)]
        asked = sum(job.result(timeout=600) for job in jobs)
    db = finish(proxy, capsem_home)
    exchanges = {ex["expected"]["message_id"]: ex for ex in model_exchanges(emu)}
    calls = rows(db, "SELECT * FROM model_calls")
    assert len(exchanges) == len(calls) == 4 * loops
    assert {c["message_id"] for c in calls} == set(exchanges)  # each answer recorded once
    for call in calls:
        assert_call_matches(call, exchanges[call["message_id"]])
    tool_calls = rows(db, "SELECT call_id, trace_id FROM tool_calls")
    results = rows(db, "SELECT call_id, trace_id, content_preview FROM tool_responses")
    assert len(tool_calls) == len({t["call_id"] for t in tool_calls}) == asked == 4 * loops
    assert sorted(r["call_id"] for r in results) == sorted(t["call_id"] for t in tool_calls)
    trace_of = {t["call_id"]: t["trace_id"] for t in tool_calls}
    assert all(r["trace_id"] == trace_of[r["call_id"]] for r in results)
    traces = rows(db, "SELECT trace_id, COUNT(*) AS n FROM model_calls GROUP BY trace_id")
    assert len(traces) == 2 * loops and {t["n"] for t in traces} == {2}  # one trace per loop
    assert len(rows(db, "SELECT id FROM net_events")) == 4 * loops
    (session,) = rows(capsem_home / "main.db", "SELECT * FROM sessions")
    assert (session["total_tool_calls"], session["total_requests"]) == (4 * loops, 4 * loops)
    assert json.loads(calls[0]["usage_details"])["raw"]
