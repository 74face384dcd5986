"""Every API × content encoding × streamed or not, through one real mitmdump against the emulator:
the client gets the emulator's exact bytes and every model_calls / tool_calls column matches the
emulator's record. (Anthropic and OpenAI Chat also run the rarer encodings in test_capture_sdk.)

The tests share one mitmdump (tests/shared_proxy.py); each reads its own scenario's rows."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from addons.items import call_items, request_items
from assembler.cli import cli
from tests.conftest import rows
from tests.e2e.test_capture_sdk import (
    TOOLS_A,
    TOOLS_O,
    assert_call_matches,
    assert_tool_calls,
    http_client,
)
from tests.shared_proxy import Scenario, SharedProxy

ENCODINGS = ["identity", "gzip", "deflate", "br", "zstd"]
USER = [{"role": "user", "content": "look around"}]
BEDROCK_MODEL = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
GEMINI = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash"
GEMINI_TOOLS = [{"functionDeclarations": [{"name": t["name"], "description": t["description"],
                                           "parameters": t["input_schema"]} for t in TOOLS_A]}]  # fmt: skip


def request_for(api: str, stream: bool) -> tuple[str, dict]:
    """(url, JSON body) of a tool-offering model call in the API's own shape."""
    if api == "anthropic":
        return "https://api.anthropic.com/v1/messages", {
            "model": "claude-haiku-4-5", "max_tokens": 99, "stream": stream, "tools": TOOLS_A, "messages": USER}  # fmt: skip
    if api == "openai_chat":
        extra = {"stream_options": {"include_usage": True}} if stream else {}
        return "https://api.openai.com/v1/chat/completions", {
            "model": "gpt-4.1", "stream": stream, "tools": TOOLS_O, "messages": USER, **extra}  # fmt: skip
    if api == "openai_responses":
        tools = [{"type": "function", **t["function"]} for t in TOOLS_O]
        return "https://api.openai.com/v1/responses", {
            "model": "gpt-5", "stream": stream, "tools": tools, "input": "look around"}  # fmt: skip
    if api == "gemini":
        url = f"{GEMINI}:streamGenerateContent?alt=sse" if stream else f"{GEMINI}:generateContent"
        return url, {
            "contents": [{"role": "user", "parts": [{"text": "look around"}]}],
            "tools": GEMINI_TOOLS,
        }
    if api == "ollama":
        return "http://localhost:11434/api/chat", {
            "model": "qwen3:8b", "stream": stream, "tools": TOOLS_O, "messages": USER}  # fmt: skip
    if api == "bedrock":
        action = "invoke-with-response-stream" if stream else "invoke"
        return f"https://bedrock-runtime.us-east-1.amazonaws.com/model/{quote(BEDROCK_MODEL, safe=':')}/{action}", {
            "anthropic_version": "bedrock-2023-05-31", "max_tokens": 200, "tools": TOOLS_A, "messages": USER}  # fmt: skip
    raise AssertionError(api)


APIS = ["anthropic", "openai_chat", "openai_responses", "gemini", "ollama", "bedrock"]
CASES = [(encoding, stream) for encoding in ENCODINGS for stream in (False, True)]
PARITY = [("gzip", False), ("gzip", True)]  # the encoding is in parity_control


def parity_control(api: str) -> str:
    return f"seed=parity-{api}; tools=2; cache_read=300; cache_write=120; reasoning=40; encoding=gzip"


def send_all(proxy, api: str, cases: list[tuple[str, bool]], control) -> list[tuple[int, bytes]]:
    """(status, raw bytes) of a model call of `api` per (encoding, stream) case, `control(encoding)`
    its x-emulator header."""
    received = []
    with http_client(proxy) as client:
        for encoding, stream in cases:
            url, body = request_for(api, stream)
            with client.stream("POST", url, json=body, headers={"x-emulator": control(encoding)}) as resp:
                received.append((resp.status_code, b"".join(resp.iter_raw())))
    return received


@pytest.fixture(scope="module")
def shared(emulator, tmp_path_factory) -> SharedProxy:
    """Both tests' traffic of every API through one mitmdump, then stopped."""
    shared = SharedProxy(emulator, tmp_path_factory.mktemp("matrix"))
    try:
        for api in APIS:
            shared.run(f"matrix {api}",
                       lambda p, a=api: send_all(p, a, CASES, lambda e: f"encoding={e}; chunk=5; tools=2"))  # fmt: skip
            shared.run(f"parity {api}",
                       lambda p, a=api: send_all(p, a, PARITY, lambda _e: parity_control(a)))  # fmt: skip
    finally:
        shared.stop()
    return shared


def finish(shared: SharedProxy, name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Scenario]:
    """The shared session.db (CAPSEM_HOME its home, for the CLI) and scenario `name`."""
    s = shared.scenario(name)
    monkeypatch.setenv("CAPSEM_HOME", str(shared.home))
    return shared.db, s


@pytest.mark.parametrize("api", APIS)
def test_every_api_every_encoding_streamed_and_not(shared, monkeypatch, api):
    db, s = finish(shared, f"matrix {api}", monkeypatch)
    assert [status for status, _ in s.result] == [200] * len(CASES)
    received = [raw for _, raw in s.result]
    cases = CASES
    exchanges = s.model_exchanges
    calls = rows(db, f"SELECT * FROM model_calls WHERE net_event_id IN ({s.ids()}) ORDER BY id")
    assert len(exchanges) == len(calls) == len(cases)
    runner = CliRunner()
    conn = sqlite3.connect(db)
    for (encoding, stream), raw, ex, call in zip(cases, received, exchanges, calls, strict=True):
        label = f"{api} {encoding} stream={stream}"
        assert raw == base64.b64decode(ex["response_body_b64"]), label  # bytes unchanged
        for direction, logged in (
            ("request", "request_body_decoded_b64"),
            ("response", "response_body_decoded_b64"),
        ):
            shown = runner.invoke(
                cli, ["show-call", str(call["id"]), f"--{direction}", "--raw"], catch_exceptions=False
            )
            assert shown.exit_code == 0, shown.output
            assert shown.stdout_bytes == base64.b64decode(ex[logged]), (
                f"{label} {direction}"
            )  # exact, decoded
        request = base64.b64decode(ex["request_body_decoded_b64"])
        items = [i.hash for i in request_items(call["protocol"], request)]
        assert items and call_items(conn, call["id"]) == items, (
            label
        )  # the items of the call are the request's
        assert call["stream"] == int(stream) and call["complete"] == 1, label
        assert_call_matches(call, ex)
        assert_tool_calls(db, call["id"], ex)
        assert len(ex["expected"]["tool_calls"]) == 2, label
    nets = rows(
        db,
        f"SELECT response_content_encoding, decode_error FROM net_events WHERE id IN ({s.ids()}) ORDER BY id",
    )
    assert [n["decode_error"] for n in nets] == [None] * len(cases)
    assert [n["response_content_encoding"] or "identity" for n in nets] == [e for e, _ in cases]


@pytest.mark.parametrize("api", APIS)
def test_streamed_and_not_give_the_same_usage_and_cost(shared, monkeypatch, api):
    """Parity: the same answer (same emulator seed) recorded streamed and not has the same tokens,
    breakdown, cost, text and tool calls."""
    db, s = finish(shared, f"parity {api}", monkeypatch)
    assert [status for status, _ in s.result] == [200, 200]
    whole, streamed = rows(db, f"SELECT * FROM model_calls WHERE net_event_id IN ({s.ids()}) ORDER BY id")
    assert (whole["stream"], streamed["stream"]) == (0, 1)
    for call, ex in zip((whole, streamed), s.model_exchanges, strict=True):
        assert_call_matches(call, ex)  # cache and reasoning breakdown included
    for column in ("model", "input_tokens", "output_tokens", "estimated_cost_usd", "text_content", "stop_reason",
                   "price_source"):  # fmt: skip
        assert whole[column] == streamed[column], column
    assert whole["output_tokens"] > 0 and whole["input_tokens"] > 0
    breakdown = [
        {k: v for k, v in json.loads(c["usage_details"]).items() if k != "raw"} for c in (whole, streamed)
    ]
    assert breakdown[0] == breakdown[1]
    tools = [rows(db, "SELECT call_index, tool_name, arguments FROM tool_calls WHERE model_call_id = ? ORDER BY "
                      "call_index", (c["id"],)) for c in (whole, streamed)]  # fmt: skip
    for t in tools[0] + tools[1]:  # a JSON body carries an object, a stream its text: compare values
        t["arguments"] = json.loads(t["arguments"])
    assert tools[0] == tools[1] and len(tools[0]) == 2
