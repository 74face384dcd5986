"""Where the input tokens went: parts that add up exactly to the provider's count, priced with its cache split."""

from __future__ import annotations

import json
import time

from addons.messages import Route
from addons.recorder.breakdown import PARTS, scale, split
from pricing.estimate import count_tokens
from tests.recording import RecorderHarness, ended, head, response

SYSTEM = "You are a careful coding agent. " * 40
TOOLS = [{"name": "read_file", "description": "Read a file from the workspace. " * 20, "input_schema": {"type": "object"}},
         {"name": "mcp__files__delete", "description": "Delete a file on the MCP server. " * 10,
          "input_schema": {"type": "object"}}]  # fmt: skip
FIRST = [{"role": "user", "content": "Fix the failing test in the parser module, please. " * 10}]
RESULT = "def parse(text):\n    return text.split()\n" * 30


def answer(input_tokens: int, cache_read: int, tool: bool) -> bytes:
    content = [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "p.py"}}] if tool else [
        {"type": "text", "text": "done"}]  # fmt: skip
    return json.dumps({"id": f"msg_{input_tokens}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                       "content": content, "stop_reason": "tool_use" if tool else "end_turn",
                       "usage": {"input_tokens": input_tokens - cache_read, "cache_read_input_tokens": cache_read,
                                 "output_tokens": 12}}).encode()  # fmt: skip


def send(rec: RecorderHarness, n: int, messages: list, reply: bytes) -> None:
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 100, "system": SYSTEM, "tools": TOOLS,
                       "messages": messages}).encode()  # fmt: skip
    now = time.time()
    rec.close(ended(head(f"f{n}", started=now), resp=response(200, started=now), body=reply, request_body=body,
                    route=Route("anthropic", "anthropic")))  # fmt: skip


def test_a_known_request_splits_like_a_hand_count_and_adds_up_exactly(tmp_path):
    rec = RecorderHarness(tmp_path)
    send(rec, 0, FIRST, answer(700, 0, tool=True))
    use = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "p.py"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": RESULT}
    second = [*FIRST, {"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    send(rec, 1, second, answer(1500, 900, tool=False))
    parts = {r["part"]: r for r in rec.rows("SELECT * FROM input_breakdown WHERE model_call_id = 2")}
    assert sum(r["tokens"] for r in parts.values()) == 1500  # exactly the provider's count
    assert sum(r["cache_read_tokens"] for r in parts.values()) == 900
    hand = {  # counted by hand on the request's own pieces
        "tool_definitions": count_tokens(json.dumps(TOOLS[0])), "mcp_tool_definitions": count_tokens(json.dumps(TOOLS[1])),
        "system": count_tokens(SYSTEM), "history": count_tokens(json.dumps(FIRST[0])) + count_tokens(json.dumps(second[1])),
        "tool_results": count_tokens(json.dumps(second[2])),
    }  # fmt: skip
    expected = scale(hand, 1500)
    for name, want in expected.items():
        assert abs(parts[name]["tokens"] - want) <= max(3, 0.1 * want), name  # JSON spacing differs: ~5 %
    # cache reads cover the start of the prompt: the tool definitions and the system prompt first
    assert parts["tool_definitions"]["cache_read_tokens"] == parts["tool_definitions"]["tokens"]
    assert parts["tool_results"]["cache_read_tokens"] == 0
    costs = [r["cost_usd"] for r in parts.values()]
    assert all(c is not None and c > 0 for c in costs)
    rec.shutdown()


def test_scale_and_split_are_exact():
    assert sum(scale({"system": 3, "history": 3, "new_input": 3}, 10).values()) == 10
    assert scale(dict.fromkeys(PARTS, 0), 50) == dict.fromkeys(PARTS, 0)
    parts = split(
        {"tool_definitions": 10, "system": 5, "history": 20, "new_input": 5}, 12, 8, (1.0, 0.1, 1.25)
    )
    by = {p.name: p for p in parts}
    assert (by["tool_definitions"].cache_read, by["system"].cache_read, by["system"].cache_write) == (
        10,
        2,
        3,
    )
    assert by["history"].cache_write == 5 and by["new_input"].cache_read == by["new_input"].cache_write == 0
    assert by["tool_definitions"].cost_usd == 10 * 0.1 and by["new_input"].cost_usd == 5 * 1.0
