"""Ollama's native API through real mitmdump: NDJSON streams and JSON, chat tool loop, generate."""

from __future__ import annotations

import base64
import json

import pytest

from tests.conftest import rows
from tests.e2e.test_capture_sdk import assert_tool_calls, finish, http_client, model_exchanges

TOOLS = [{"type": "function", "function": {"name": "ls", "description": "list files", "parameters": {
    "type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]}}}]  # fmt: skip


@pytest.fixture
def proxy(mitmdump):
    return mitmdump()


def post(proxy, emu, path: str, body: dict, control: str = "") -> tuple[bytes, list[dict]]:
    with http_client(proxy) as client, client.stream(
        "POST", f"{emu.http_url}{path}", json=body, headers={"x-emulator": control}
    ) as resp:  # fmt: skip
        raw = b"".join(resp.iter_raw())
    return raw, [json.loads(line) for line in raw.splitlines() if line.strip()]


@pytest.mark.parametrize("stream", [True, False])
def test_chat_tool_loop(proxy, emu, capsem_home, stream):
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "list src"}]
    _, lines = post(proxy, emu, "/api/chat", {"model": "qwen3:8b", "messages": messages, "tools": TOOLS,
                                               "stream": stream}, "chunk=5")  # fmt: skip
    calls = [c for line in lines for c in line.get("message", {}).get("tool_calls") or []]
    messages += [{"role": "assistant", "content": "", "tool_calls": calls},
                 {"role": "tool", "tool_name": "ls", "content": "a.py b.py"}]  # fmt: skip
    post(
        proxy, emu, "/api/chat", {"model": "qwen3:8b", "messages": messages, "tools": TOOLS, "stream": stream}
    )
    db = finish(proxy, capsem_home)
    rows_ = rows(db, "SELECT * FROM model_calls ORDER BY id")
    for call, ex in zip(rows_, model_exchanges(emu), strict=True):
        exp = ex["expected"]
        assert (call["provider"], call["protocol"], call["model"], call["stream"]) == ("ollama", "ollama", "qwen3:8b",
                                                                                       int(stream))  # fmt: skip
        assert (call["text_content"] or "") == exp["text"] and call["stop_reason"] == "stop"
        assert (call["input_tokens"], call["output_tokens"]) == (exp["input_tokens"], exp["output_tokens"])
        assert json.loads(call["usage_details"])["raw"] == exp["usage_raw"]
        assert call["estimated_cost_usd"] is None and call["complete"] == 1
        assert call["system_prompt_preview"] == "Be terse." and call["tools_count"] == 1
        assert_tool_calls(db, call["id"], ex)
    assert rows_[0]["trace_id"] == rows_[1]["trace_id"]
    (resp,) = rows(db, "SELECT model_call_id, call_id, content_preview, tool_name FROM tool_responses")
    assert resp == {"model_call_id": rows_[1]["id"], "call_id": "ollama_ls_0", "content_preview": "a.py b.py",
                    "tool_name": "ls"}  # fmt: skip


def test_generate_stream_bytes_unchanged(proxy, emu, capsem_home):
    raw, _ = post(proxy, emu, "/api/generate", {"model": "llama3.2", "prompt": "hi", "system": "S"},
                  "chunk=3; scenario=thinking")  # fmt: skip
    db = finish(proxy, capsem_home)
    (ex,) = model_exchanges(emu)
    assert raw == base64.b64decode(ex["response_body_b64"])
    (call,) = rows(db, "SELECT * FROM model_calls")
    assert (
        call["text_content"] == ex["expected"]["text"]
        and call["thinking_content"] == ex["expected"]["thinking"]
    )
    assert call["stream"] == 1 and call["system_prompt_preview"] == "S" and call["ttft_ms"] is not None


def test_error_body(proxy, emu, capsem_home):
    post(proxy, emu, "/api/chat", {"model": "nope", "messages": []}, "scenario=error")
    db = finish(proxy, capsem_home)
    (call,) = rows(db, "SELECT status_code, error_type, error_message FROM model_calls")
    assert call == {"status_code": 404, "error_type": "error", "error_message": "model 'nope' not found"}
