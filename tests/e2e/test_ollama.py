"""Ollama's native API through real mitmdump: NDJSON streams and JSON, chat tool loop, generate.

The tests share mitmdumps (tests/shared_proxy.py), each reading its own scenario's rows: two, one for
each chat loop (Ollama has no call ids: capsem names a call `ollama_<tool>_<n>`, the same in both
loops, and a session records the result of a call id once)."""

from __future__ import annotations

import base64
import json

import pytest

from tests.conftest import rows
from tests.e2e.test_capture_sdk import assert_tool_calls, http_client
from tests.shared_proxy import SharedProxy

TOOLS = [{"type": "function", "function": {"name": "ls", "description": "list files", "parameters": {
    "type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]}}}]  # fmt: skip


@pytest.fixture(scope="module")
def shared(emulator, tmp_path_factory) -> dict[bool, SharedProxy]:
    """Per `stream`, a mitmdump (no upstream: the emulator's plain-HTTP port is the Ollama server)
    that ran that chat loop; the streamed one also the generate and error scenarios. Stopped."""
    proxies: dict[bool, SharedProxy] = {}
    try:
        for stream in (True, False):
            proxies[stream] = SharedProxy(
                emulator, tmp_path_factory.mktemp(f"ollama-{stream}"), upstream=False
            )
            proxies[stream].run("loop", lambda p, s=stream: chat_loop_traffic(p, emulator, s))
        proxies[True].run("generate", lambda p: post(p, emulator, "/api/generate", {
            "model": "llama3.2", "prompt": "hi", "system": "S"}, "chunk=3; scenario=thinking")[0])  # fmt: skip
        proxies[True].run("error", lambda p: post(p, emulator, "/api/chat", {"model": "nope", "messages": []},
                                                  "scenario=error"))  # fmt: skip
    finally:
        for proxy in proxies.values():
            proxy.stop()
    return proxies


def post(proxy, emu, path: str, body: dict, control: str = "") -> tuple[bytes, list[dict]]:
    with http_client(proxy) as client, client.stream(
        "POST", f"{emu.http_url}{path}", json=body, headers={"x-emulator": control}
    ) as resp:  # fmt: skip
        raw = b"".join(resp.iter_raw())
    return raw, [json.loads(line) for line in raw.splitlines() if line.strip()]


def chat_loop_traffic(proxy, emu, stream: bool) -> None:
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "list src"}]
    _, lines = post(proxy, emu, "/api/chat", {"model": "qwen3:8b", "messages": messages, "tools": TOOLS,
                                               "stream": stream}, "chunk=5")  # fmt: skip
    calls = [c for line in lines for c in line.get("message", {}).get("tool_calls") or []]
    messages += [{"role": "assistant", "content": "", "tool_calls": calls},
                 {"role": "tool", "tool_name": "ls", "content": "a.py b.py"}]  # fmt: skip
    post(
        proxy, emu, "/api/chat", {"model": "qwen3:8b", "messages": messages, "tools": TOOLS, "stream": stream}
    )


@pytest.mark.parametrize("stream", [True, False])
def test_chat_tool_loop(shared, stream):
    db, s, exchanges = shared[stream].exchanges("loop")
    rows_ = shared[stream].model_calls(s)
    for call, ex in zip(rows_, exchanges, strict=True):
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
    ids = ",".join(str(c["id"]) for c in rows_)
    (resp,) = rows(db, "SELECT model_call_id, call_id, content_preview, tool_name FROM tool_responses "
                       f"WHERE model_call_id IN ({ids})")  # fmt: skip
    assert resp == {"model_call_id": rows_[1]["id"], "call_id": "ollama_ls_0", "content_preview": "a.py b.py",
                    "tool_name": "ls"}  # fmt: skip


def test_generate_stream_bytes_unchanged(shared):
    s = shared[True].scenario("generate")
    (ex,) = s.model_exchanges
    assert s.result == base64.b64decode(ex["response_body_b64"])
    (call,) = shared[True].model_calls(s)
    assert (
        call["text_content"] == ex["expected"]["text"]
        and call["thinking_content"] == ex["expected"]["thinking"]
    )
    assert call["stream"] == 1 and call["system_prompt_preview"] == "S" and call["ttft_ms"] is not None


def test_error_body(shared):
    s = shared[True].scenario("error")
    (call,) = shared[True].model_calls(s, "status_code, error_type, error_message")
    assert call == {"status_code": 404, "error_type": "error", "error_message": "model 'nope' not found"}
