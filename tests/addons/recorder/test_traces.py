"""Identity: turns beside traces, and a subagent's calls under the tool call that started it."""

from __future__ import annotations

import json
import time

from addons.messages import Route
from tests.recording import RecorderHarness, ended, head, response

PROMPT = 'Find every caller of parse() and list them.\nReturn "file:line" pairs.'
TASK = {"type": "tool_use", "id": "toolu_task", "name": "Task",
        "input": {"description": "find callers", "prompt": PROMPT}}  # fmt: skip


def reply(content: list, stop: str = "end_turn") -> bytes:
    return json.dumps({"id": f"msg_{time.time_ns()}", "type": "message", "role": "assistant",
                       "model": "claude-sonnet-4-5", "content": content, "stop_reason": stop,
                       "usage": {"input_tokens": 50, "output_tokens": 5}}).encode()  # fmt: skip


def result(call_id: str) -> dict:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "a.py:3"}


def send(rec: RecorderHarness, n: int, system: str, messages: list, answer: bytes) -> None:
    body = json.dumps(
        {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": system, "messages": messages}
    )
    now = time.time()
    rec.close(ended(head(f"f{n}", started=now), resp=response(200, started=now), body=answer,
                    request_body=body.encode(), route=Route("anthropic", "anthropic")))  # fmt: skip


def test_a_subagent_hangs_under_its_task_call_and_turns_follow_user_inputs(tmp_path):
    rec = RecorderHarness(tmp_path)
    main = [{"role": "user", "content": "Refactor parse()."}]
    send(rec, 0, "main agent", main, reply([TASK], "tool_use"))  # 1: the main agent starts a subagent
    sub = [{"role": "user", "content": PROMPT}]
    use = {"type": "tool_use", "id": "toolu_grep", "name": "Grep", "input": {"pattern": "parse("}}
    send(rec, 1, "subagent", sub, reply([use], "tool_use"))  # 2: the subagent's first call
    sub += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result("toolu_grep")]}]
    send(rec, 2, "subagent", sub, reply([{"type": "text", "text": "a.py:3"}]))  # 3: its last answer
    main += [{"role": "assistant", "content": [TASK]}, {"role": "user", "content": [result("toolu_task")]}]
    send(rec, 3, "main agent", main, reply([{"type": "text", "text": "done"}]))  # 4: main gets the result
    main += [{"role": "assistant", "content": [{"type": "text", "text": "done"}]},
             {"role": "user", "content": "Now add a test."}]  # fmt: skip
    send(rec, 4, "main agent", main, reply([{"type": "text", "text": "ok"}]))  # 5: a new user input
    calls = rec.rows("SELECT id, turn_id, trace_id, parent_tool_call_id FROM model_calls ORDER BY id")
    (task,) = rec.rows("SELECT id FROM tool_calls WHERE tool_name = 'Task'")
    assert [c["parent_tool_call_id"] for c in calls] == [None, task["id"], task["id"], None, None]
    turns = [c["turn_id"] for c in calls]
    assert len(set(turns[:4])) == 1 and turns[4] != turns[0]  # the subagent works inside the user's turn
    assert calls[1]["trace_id"] != calls[0]["trace_id"]  # but in its own tool loop
    items = rec.rows("SELECT DISTINCT turn_id FROM model_items WHERE model_call_id IN (2, 3)")
    assert [i["turn_id"] for i in items] == [turns[0]]
    rec.shutdown()
