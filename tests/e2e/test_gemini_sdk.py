"""Gemini through real mitmdump: the real google-genai SDK, JSON-array streams, Code Assist.

The tests share one mitmdump (tests/shared_proxy.py); each reads its own scenario's rows."""

from __future__ import annotations

import base64
import json
import ssl

import pytest
from google import genai
from google.genai import types

from tests.conftest import rows
from tests.e2e.test_capture_sdk import assert_tool_calls, http_client
from tests.shared_proxy import SharedProxy

API_KEY = "AIzaSyGEMINIe2eSECRETkey00000000000000"
WEATHER = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_weather", description="weather",
    parameters=types.Schema(type="OBJECT", properties={"city": types.Schema(type="STRING")},
                            required=["city"]))])  # fmt: skip


@pytest.fixture(scope="module")
def shared(emulator, tmp_path_factory) -> SharedProxy:
    """Every test's traffic through one mitmdump, then stopped."""
    shared = SharedProxy(emulator, tmp_path_factory.mktemp("gemini"))
    try:
        for gemini_ids in ("1", "0"):
            shared.run(f"loop {gemini_ids}", lambda p, g=gemini_ids: function_calling_traffic(p, g))
        shared.run("thinking", thinking_traffic)
        for encoding in ("identity", "gzip"):
            shared.run(f"json array {encoding}", lambda p, e=encoding: json_array_traffic(p, e))
        shared.run("code assist", code_assist_traffic)
    finally:
        shared.stop()
    return shared


def client(proxy, control: str = "") -> genai.Client:
    trust = ssl.create_default_context(cafile=proxy.ca_cert)
    headers = {"x-emulator": control} if control else None
    return genai.Client(api_key=API_KEY, http_options=types.HttpOptions(
        client_args={"proxy": proxy.url, "verify": trust}, headers=headers))  # fmt: skip


def assert_gemini_call(call: dict, ex: dict) -> None:
    exp = ex["expected"]
    assert (call["provider"], call["protocol"], call["host"]) == (
        "google",
        "gemini",
        "generativelanguage.googleapis.com",
    )
    assert call["model"] == exp["model"] and call["response_model"] == exp["response_model"]
    assert call["message_id"] == exp["message_id"] and (call["text_content"] or "") == exp["text"]
    assert (call["thinking_content"] or "") == exp["thinking"] and call["stop_reason"] == exp["stop_reason"]
    assert call["input_tokens"] == exp["input_tokens"] and call["output_tokens"] == exp["output_tokens"]
    details = json.loads(call["usage_details"])
    assert details["raw"] == exp["usage_raw"]
    for key in ("cache_read", "reasoning"):
        if exp.get(key):
            assert details[key] == exp[key]
    assert call["stream"] == int(ex["stream"]) and call["complete"] == 1
    assert call["estimated_cost_usd"] > 0


def function_calling_traffic(proxy, gemini_ids: str) -> tuple[str, types.FunctionCall]:
    """Two turns: a function call, then its answer streamed; (the streamed text, the call)."""
    c = client(proxy, f"gemini_ids={gemini_ids}; cache_read=40")
    config = types.GenerateContentConfig(tools=[WEATHER], system_instruction="Be terse.")
    contents = [types.Content(role="user", parts=[types.Part(text="weather in Paris?")])]
    first = c.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)
    call = first.candidates[0].content.parts[-1].function_call
    contents += [first.candidates[0].content, types.Content(role="user", parts=[types.Part(
        function_response=types.FunctionResponse(id=call.id, name=call.name, response={"temp": "18C"}))])]  # fmt: skip
    text = "".join(ch.text or "" for ch in c.models.generate_content_stream(
        model="gemini-2.5-flash", contents=contents, config=config))  # fmt: skip
    return text, call


@pytest.mark.parametrize("gemini_ids", ["1", "0"])
def test_function_calling_loop_streamed_and_not(shared, gemini_ids):
    db, s, exchanges = shared.exchanges(f"loop {gemini_ids}")
    text, call = s.result
    calls = shared.model_calls(s)
    assert len(calls) == 2 == len(exchanges)
    for call_row, ex in zip(calls, exchanges, strict=True):
        assert_gemini_call(call_row, ex)
        assert call_row["system_prompt_preview"] == "Be terse." and call_row["tools_count"] == 1
        assert_tool_calls(db, call_row["id"], ex)
    assert calls[1]["text_content"] == text
    assert calls[0]["trace_id"] == calls[1]["trace_id"]
    (resp,) = rows(db, "SELECT model_call_id, call_id, content_preview, tool_name FROM tool_responses "
                       f"WHERE model_call_id IN ({calls[0]['id']}, {calls[1]['id']})")  # fmt: skip
    expected_id = call.id or "gemini_get_weather_0"
    assert resp == {"model_call_id": calls[1]["id"], "call_id": expected_id, "content_preview": '{"temp":"18C"}',
                    "tool_name": "get_weather"}  # fmt: skip
    blobs = b"".join(p.read_bytes() for p in shared.home.rglob("*") if p.is_file())
    assert API_KEY.encode() not in blobs


def thinking_traffic(proxy) -> None:
    c = client(proxy, "scenario=thinking; encoding=gzip")  # kept: the SDK closes its HTTP client when dropped
    c.models.generate_content(model="gemini-2.5-pro", contents="think hard")


def test_thinking_and_gzip(shared):
    _db, s, (ex,) = shared.exchanges("thinking")
    (call,) = shared.model_calls(s)
    assert_gemini_call(call, ex)
    assert call["thinking_content"] and json.loads(call["usage_details"])["reasoning"] > 0


def json_array_traffic(proxy, encoding: str) -> bytes:
    url = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with http_client(proxy) as h, h.stream("POST", url, json=body, params={"key": API_KEY},
                                           headers={"x-emulator": f"encoding={encoding}; chunk=9"}) as resp:  # fmt: skip
        return b"".join(resp.iter_raw())


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_json_array_stream_without_alt_sse(shared, encoding):
    db, s, (ex,) = shared.exchanges(f"json array {encoding}")
    assert s.result == base64.b64decode(ex["response_body_b64"])
    (call,) = shared.model_calls(s)
    assert_gemini_call(call, ex)
    (net,) = rows(db, f"SELECT query FROM net_events WHERE id IN ({s.ids()})")
    assert API_KEY not in net["query"] and "key=hash:" in net["query"]


def code_assist_traffic(proxy) -> None:
    url = "https://cloudcode-pa.googleapis.com/v1internal:streamGenerateContent?alt=sse"
    body = {"model": "gemini-2.5-pro", "project": "p1",
            "request": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}}  # fmt: skip
    with http_client(proxy) as h:
        h.post(url, json=body, headers={"authorization": "Bearer ya29.CODEASSISTSECRET0000000000000"})


def test_code_assist_envelope(shared):
    _db, s, (ex,) = shared.exchanges("code assist")
    (call,) = shared.model_calls(s)
    assert call["model"] == "gemini-2.5-pro" and call["host"] == "cloudcode-pa.googleapis.com"
    assert (
        call["text_content"] == ex["expected"]["text"]
        and call["input_tokens"] == ex["expected"]["input_tokens"]
    )
