"""Conversations follow the message history, not the system prompt: Claude Code's requests (a
first system block that changes every call, moved cache markers, reminders beside tool results,
trimmed thinking), Codex's `previous_response_id` turns and Gemini's each make one turn per user
input, and each call marks only what is new in it."""

from __future__ import annotations

import json
import time

from addons.messages import Route
from assembler.inspect import check_cache_breaks
from assembler.show_call_text import render_call
from assembler.view.queries import break_sentence, call_view, session_view
from capsem.store.schema import connect
from tests.addons.recorder.otlp.test_otlp import build
from tests.recording import RecorderHarness, ended, head, response

TOOLS = [
    {"name": n, "description": f"the {n} tool", "input_schema": {"type": "object"}} for n in ("Bash", "Read")
]
PROMPT = {"type": "text", "text": "You are Claude Code, Anthropic's CLI. Be concise.",
          "cache_control": {"type": "ephemeral"}}  # fmt: skip
BASH = {"type": "tool_use", "id": "toolu_bash1", "name": "Bash", "input": {"command": "pytest -x"}}
THINKING = {"type": "thinking", "thinking": "Run the tests first.", "signature": "EqQBCkY"}
REMINDER = {"type": "text", "text": "<system-reminder>The user's todo list is empty.</system-reminder>"}


def claude_code(cch: str, messages: list) -> dict:
    billing = {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.197; cch={cch};"}
    return {"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": [billing, PROMPT], "tools": TOOLS,
            "messages": messages}  # fmt: skip


def reply(content: list, stop: str = "end_turn") -> bytes:
    return json.dumps({"id": f"msg_{time.time_ns()}", "type": "message", "role": "assistant",
                       "model": "claude-sonnet-4-5", "content": content, "stop_reason": stop,
                       "usage": {"input_tokens": 50, "output_tokens": 5}}).encode()  # fmt: skip


ANTHROPIC = Route("anthropic", "anthropic")


def send(rec: RecorderHarness, n: int, body: dict, answer: bytes, *, path: str = "/v1/messages",
         host: str = "api.anthropic.com", route: Route = ANTHROPIC) -> None:  # fmt: skip
    now = time.time()
    rec.close(ended(head(f"f{n}", started=now, path=path, host=host), resp=response(200, started=now), body=answer,
                    request_body=json.dumps(body).encode(), route=route))  # fmt: skip


def new_items(rec: RecorderHarness, call_id: int) -> list[tuple[str, str | None]]:
    rows = rec.rows("SELECT kind, role FROM model_items WHERE model_call_id = ? AND direction = 'input' ORDER BY "
                    "item_index", (call_id,))  # fmt: skip
    return [(r["kind"], r["role"]) for r in rows]


def turns(rec: RecorderHarness) -> list[str]:
    return [r["turn_id"] for r in rec.rows("SELECT turn_id FROM model_calls ORDER BY id")]


def test_claude_code_tool_loop_is_one_turn_and_each_call_marks_only_what_is_new(tmp_path):
    rec = RecorderHarness(tmp_path)
    ask = {"role": "user", "content": [{"type": "text", "text": "fix the failing test",
                                        "cache_control": {"type": "ephemeral"}}]}  # fmt: skip
    send(rec, 0, claude_code("3f66f", [ask]), reply([THINKING, BASH], "tool_use"))
    moved = {"role": "user", "content": [{"type": "text", "text": "fix the failing test"}]}  # marker moved on
    result = {"type": "tool_result", "tool_use_id": "toolu_bash1", "content": "1 failed",
              "cache_control": {"type": "ephemeral"}}  # fmt: skip
    loop = [
        moved,
        {"role": "assistant", "content": [THINKING, BASH]},
        {"role": "user", "content": [result, REMINDER]},
    ]
    send(
        rec, 1, claude_code("6ac9c", loop), reply([{"type": "text", "text": "Fixed: the import was wrong."}])
    )
    trimmed = [
        moved,
        {"role": "assistant", "content": [BASH]},
        {"role": "user", "content": [result, REMINDER]},
        {"role": "assistant", "content": [{"type": "text", "text": "Fixed: the import was wrong."}]},
        {"role": "user", "content": "now add a test for it"},
    ]  # older thinking trimmed
    send(rec, 2, claude_code("91b2e", trimmed), reply([{"type": "text", "text": "Added."}]))

    first, second, third = turns(rec)
    assert first == second != third  # the tool loop is one turn; the next prompt starts another
    # the second call: a changed system prompt, the model's tool call (as resent) and the result with
    # its reminder are new; the first prompt and both tool definitions are not
    assert new_items(rec, 2) == [("system", "system"), ("message", "assistant"), ("tool_call", "assistant"),
                                 ("tool_result", "user"), ("message", "user")]  # fmt: skip
    assert ("tool_definition", None) not in new_items(rec, 3) and ("message", "user") in new_items(rec, 3)
    calls = rec.rows("SELECT items_count, items_new FROM model_calls ORDER BY id")
    assert calls[1]["items_new"] < calls[1]["items_count"] and calls[2]["items_new"] < calls[2]["items_count"]
    rec.shutdown()


def test_codex_turns_continue_by_previous_response_id(tmp_path):
    rec = RecorderHarness(tmp_path)
    route = Route("openai", "openai_responses")
    call = {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"cmd": "ls"}'}
    first = {"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-5", "output": [call],
             "usage": {"input_tokens": 40, "output_tokens": 6}}  # fmt: skip
    ask = {
        "model": "gpt-5",
        "instructions": "You are Codex.",
        "input": [{"role": "user", "content": "list files"}],
    }
    send(rec, 0, ask, json.dumps(first).encode(), path="/v1/responses", host="api.openai.com", route=route)
    more = {"model": "gpt-5", "instructions": "You are Codex.", "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "call_1", "output": "a.py"}]}  # fmt: skip
    done = {**first, "id": "resp_2", "output": [{"type": "message", "role": "assistant",
                                                 "content": [{"type": "output_text", "text": "a.py"}]}]}  # fmt: skip
    send(rec, 1, more, json.dumps(done).encode(), path="/v1/responses", host="api.openai.com", route=route)
    a, b = turns(rec)
    assert a == b and new_items(rec, 2) == [("tool_result", None)]
    rec.shutdown()


def test_gemini_tool_loop_is_one_turn(tmp_path):
    rec = RecorderHarness(tmp_path)
    route = Route("gemini", "gemini")
    path = "/v1beta/models/gemini-2.5-flash:generateContent"
    fn = {"functionCall": {"name": "bash", "args": {"command": "ls"}, "id": "c1"}}
    answer = {"candidates": [{"content": {"role": "model", "parts": [fn]}, "finishReason": "STOP"}],
              "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 3}}  # fmt: skip
    ask = [{"role": "user", "parts": [{"text": "ls the repo"}]}]
    body = {"systemInstruction": {"parts": [{"text": "Be terse."}]}, "contents": ask}
    send(
        rec,
        0,
        body,
        json.dumps(answer).encode(),
        path=path,
        host="generativelanguage.googleapis.com",
        route=route,
    )
    back = {"functionResponse": {"name": "bash", "id": "c1", "response": {"out": "a"}}}
    loop = [*ask, {"role": "model", "parts": [fn]}, {"role": "user", "parts": [back]}]
    text = {"candidates": [{"content": {"role": "model", "parts": [{"text": "a"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 1}}  # fmt: skip
    send(rec, 1, {**body, "contents": loop}, json.dumps(text).encode(), path=path,
         host="generativelanguage.googleapis.com", route=route)  # fmt: skip
    a, b = turns(rec)
    assert a == b and ("message", "user") not in new_items(rec, 2)
    rec.shutdown()


def usage_reply(content: list, *, read: int, write: int, fresh: int = 10, stop: str = "end_turn") -> bytes:
    usage = {"input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
             "output_tokens": 5}  # fmt: skip
    return json.dumps({"id": f"msg_{time.time_ns()}", "type": "message", "role": "assistant",
                       "model": "claude-sonnet-4-5", "content": content, "stop_reason": stop,
                       "usage": usage}).encode()  # fmt: skip


def test_a_changed_tool_definition_is_recorded_as_a_cache_break_with_its_cost(tmp_path):
    rec = RecorderHarness(tmp_path)
    ask = {"role": "user", "content": "fix the failing test"}
    send(rec, 0, claude_code("a1", [ask]), usage_reply([BASH], read=0, write=12_000, stop="tool_use"))
    result = {"type": "tool_result", "tool_use_id": "toolu_bash1", "content": "ok"}
    loop = [ask, {"role": "assistant", "content": [BASH]}, {"role": "user", "content": [result]}]
    send(
        rec,
        1,
        claude_code("b2", loop),
        usage_reply([{"type": "text", "text": "done"}], read=12_000, write=300),
    )
    changed = [{**TOOLS[0], "description": "the Bash tool, now with a timeout"}, TOOLS[1]]
    body = {**claude_code("c3", loop), "tools": changed}
    send(rec, 2, body, usage_reply([{"type": "text", "text": "done"}], read=0, write=12_350))
    breaks = rec.rows("SELECT * FROM cache_breaks")
    assert len(breaks) == 1, breaks  # the full read of call 2 is no break
    (found,) = breaks
    assert (found["model_call_id"], found["earlier_call_id"], found["cause"], found["item"]) == (
        3,
        2,
        "changed",
        "tool definition Bash",
    )
    assert (found["cached_tokens"], found["read_tokens"]) == (12_300, 0)
    # 12,300 tokens written again at Sonnet 4.5's rates: 12,300 × ($3.75 − $0.30) / 1M = $0.042435
    assert abs(found["extra_cost_usd"] - 0.042435) < 1e-9
    assert "now with a timeout" in found["after"] and "now with a timeout" not in found["before"]
    rec.writer.commit()
    conn = connect(rec.writer.path, readonly=True)
    (warning,) = check_cache_breaks(conn)  # inspect-session
    assert warning.severity == "warning" and warning.message.startswith(
        "1 cache break cost $0.0424 more than reading from the cache: tool definition Bash changed (calls 3;"
    )
    view = call_view(conn, "s", 3)  # the call page and show-call
    assert break_sentence(view.cache_break) == ("cache broke here: tool definition Bash changed, +$0.0424 (read 0 "
                                                "of the 12,300 tokens call 2 left cached)")  # fmt: skip
    assert "cache broke here: tool definition Bash changed" in render_call(view, 80)
    assert call_view(conn, "s", 2).cache_break is None
    page = session_view(conn, "s", None)  # the session page: what was read from cache, what breaks cost
    assert list(page.cache_breaks) == [3] and abs(page.lost_to_breaks - 0.042435) < 1e-9
    assert page.cache_read_share == 12_000 / (12_010 + 12_310 + 12_360)
    conn.close()
    spans = {
        s.attributes.get("capsem.model_call.id"): s.attributes
        for s in build(rec.db)
        if s.name.startswith("chat")
    }
    assert (
        spans[3]["capsem.cache_break.cause"] == "changed"
        and spans[3]["capsem.cache_break.item"] == ("tool definition Bash")
        and abs(spans[3]["capsem.cache_break.extra_cost_usd"] - 0.042435) < 1e-9
    )
    assert "capsem.cache_break.cause" not in spans[2]  # the OTLP call span says it too
    rec.shutdown()
