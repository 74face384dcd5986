"""Conversation items: each content once, the new ones per call, and the questions SQL must answer."""

from __future__ import annotations

import json
import time

from addons.items import call_items, request_items
from benchmarks.bodies import conversation
from tests.addons.recorder.test_bodies import ANSWER, call
from tests.recording import RecorderHarness


def test_a_long_conversation_stores_each_item_once_and_marks_what_is_new(tmp_path):
    rec = RecorderHarness(tmp_path)
    bodies = conversation(12)
    for n, body in enumerate(bodies):
        call(rec, n, body, ANSWER, time.time())
    conn = rec.writer
    rec.writer.commit()
    calls = rec.rows(
        "SELECT id, system_hash, tools_hash, items_count, items_new FROM model_calls ORDER BY id"
    )
    first, second, last = calls[0], calls[1], calls[-1]
    assert first["items_new"] == first["items_count"] == 1 + 40 + 1  # system, 40 tools, one message
    # each later turn adds the assistant's text, its tool call and the tool result (each block its own
    # item, so parallel calls pair with their results); the moved cache_control changes nothing
    assert [c["items_new"] for c in calls[1:]] == [3] * 11
    assert len({c["system_hash"] for c in calls}) == 1 and len({c["tools_hash"] for c in calls}) == 1
    for (row_id,), body in zip(
        conn.conn.execute("SELECT id FROM model_calls ORDER BY id"), bodies, strict=True
    ):
        assert call_items(conn.conn, row_id) == [i.hash for i in request_items("anthropic", body)]
    # SQL: the exact system prompt of a call
    (system,) = rec.rows("SELECT content FROM item_contents WHERE hash = (SELECT system_hash FROM model_calls "
                         "WHERE id = ?)", (last["id"],))  # fmt: skip
    assert json.loads(system["content"]) == json.loads(bodies[-1])["system"]
    # SQL: what was new in a turn (the inputs) and what the model answered (the outputs)
    new = rec.rows("SELECT kind, role, call_id FROM model_items WHERE model_call_id = ? AND direction = 'input' "
                   "ORDER BY item_index", (second["id"],))  # fmt: skip
    assert [(r["kind"], r["role"], r["call_id"]) for r in new] == [
        ("message", "assistant", None), ("tool_call", "assistant", "toolu_0001"),
        ("tool_result", "user", "toolu_0001")]  # fmt: skip
    (text,) = rec.rows("SELECT i.content FROM model_items m JOIN item_contents i ON i.hash = m.content_hash "
                       "WHERE m.model_call_id = ? AND m.direction = 'output'", (second["id"],))  # fmt: skip
    assert json.loads(text["content"]) == "ok"
    # every content stored once: 1 system + 40 tools + 1 first message + 3 per later turn + 1 answer text
    assert rec.rows("SELECT COUNT(*) AS n FROM item_contents")[0]["n"] == 1 + 40 + 1 + 3 * 11 + 1
    rec.shutdown()


def test_a_changed_tool_surface_shows_in_tools_hash(tmp_path):
    rec = RecorderHarness(tmp_path)
    body = json.loads(conversation(1)[0])
    call(rec, 0, json.dumps(body).encode(), ANSWER, time.time())
    body["tools"] = body["tools"][:-1]
    call(rec, 1, json.dumps(body).encode(), ANSWER, time.time())
    a, b = rec.rows("SELECT tools_hash, system_hash FROM model_calls ORDER BY id")
    assert a["tools_hash"] != b["tools_hash"] and a["system_hash"] == b["system_hash"]
    rec.shutdown()


def test_items_of_every_api_shape():
    chat = {"model": "gpt-4.1", "tools": [{"type": "function", "function": {"name": "f"}}],
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                         {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "r"}]}  # fmt: skip
    assert [(i.kind, i.call_id, i.tool_name) for i in request_items("openai_chat", json.dumps(chat).encode())] == [
        ("tool_definition", None, "f"), ("system", None, None), ("message", None, None),
        ("tool_call", "c1", "f"), ("tool_result", "c1", None)]  # fmt: skip
    responses = {"instructions": "be brief", "tools": [{"type": "function", "name": "f"}],
                 "input": [{"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c1", "name": "f"},
                           {"type": "function_call_output", "call_id": "c1", "output": "r"}]}  # fmt: skip
    assert [i.kind for i in request_items("openai_responses", responses)] == [
        "system", "tool_definition", "message", "tool_call", "tool_result"]  # fmt: skip
    gemini = {"systemInstruction": {"parts": [{"text": "be brief"}]},
              "tools": [{"functionDeclarations": [{"name": "f"}, {"name": "g"}]}],
              "contents": [{"role": "user", "parts": [{"text": "hi"}]},
                           {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
                           {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]}  # fmt: skip
    assert [(i.kind, i.tool_name) for i in request_items("gemini", gemini)] == [
        ("system", None), ("tool_definition", "f"), ("tool_definition", "g"), ("message", None),
        ("tool_call", "f"), ("tool_result", "f")]  # fmt: skip
    assert request_items("anthropic", b"not json") == [] and request_items("unknown", {"x": 1}) == []


def test_parallel_tool_calls_and_their_results_are_items_of_their_own():
    anthropic = {"messages": [
        {"role": "user", "content": "read both"},
        {"role": "assistant", "content": [{"type": "text", "text": "reading"},
                                          {"type": "tool_use", "id": "t1", "name": "read", "input": {"p": "a"}},
                                          {"type": "tool_use", "id": "t2", "name": "read", "input": {"p": "b"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "A"},
                                     {"type": "tool_result", "tool_use_id": "t2", "content": "B"},
                                     {"type": "text", "text": "<system-reminder>"}]}]}  # fmt: skip
    items = request_items("anthropic", anthropic)
    assert [(i.kind, i.role, i.call_id, i.tool_name) for i in items] == [
        ("message", "user", None, None), ("message", "assistant", None, None),
        ("tool_call", "assistant", "t1", "read"), ("tool_call", "assistant", "t2", "read"),
        ("tool_result", "user", "t1", None), ("tool_result", "user", "t2", None),
        ("message", "user", None, None)]  # fmt: skip
    assert json.loads(items[5].content) == {"type": "tool_result", "tool_use_id": "t2", "content": "B"}
    assert json.loads(items[1].content) == {
        "role": "assistant",
        "content": [{"type": "text", "text": "reading"}],
    }
    chat = {"messages": [{"role": "assistant", "content": "both", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}]}  # fmt: skip
    assert [(i.kind, i.call_id, i.tool_name) for i in request_items("openai_chat", chat)] == [
        ("message", None, None), ("tool_call", "c1", "f"), ("tool_call", "c2", "g")]  # fmt: skip
    calls = [
        {"functionCall": {"id": "g1", "name": "f", "args": {}}},
        {"functionCall": {"id": "g2", "name": "g"}},
    ]
    gemini = {"contents": [{"role": "model", "parts": calls}]}
    assert [(i.kind, i.call_id, i.tool_name) for i in request_items("gemini", gemini)] == [
        ("tool_call", "g1", "f"), ("tool_call", "g2", "g")]  # fmt: skip
