"""The provider emulator, checked with the real anthropic and openai SDKs as clients.

Every test compares what a client saw with the emulator's exchange log (`expected`, and the
exact body bytes in `response_body_b64`), which is the truth the capture tests rely on.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import zlib
from pathlib import Path

import anthropic
import brotli
import httpx
import openai
import pytest
import zstandard

from capsem.emulator import Emulator
from capsem.emulator.encoding import Encoder
from capsem.emulator.script import ANCHOR

ROOT = Path(__file__).resolve().parents[2]
CLAUDE, GPT = "claude-haiku-4-5", "gpt-4.1"
HI = [{"role": "user", "content": "What's the weather in Paris?"}]
SCHEMAS = [
    ("get_weather", {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                                      "metric": {"type": "boolean"}}}),
    ("read_file", {"type": "object", "properties": {"path": {"type": "string"}}}),
]  # fmt: skip
A_TOOLS = [{"name": n, "description": n, "input_schema": s} for n, s in SCHEMAS]
O_TOOLS = [
    {"type": "function", "function": {"name": n, "description": n, "parameters": s}} for n, s in SCHEMAS
]
# httpx decodes stacked encodings, but not with zstd in the stack (its flush feeds an ended zstd decoder)
SDK_ENCODINGS = [
    "identity",
    "gzip",
    "deflate",
    "deflate-raw",
    "br",
    "zstd",
    "gzip,br",
    "br,gzip",
    "deflate,br",
]


def claude(emu, control: str = "", base: str | None = None, **kw) -> anthropic.Anthropic:
    headers = {"x-emulator": control} if control else {}
    return anthropic.Anthropic(base_url=base or emu.http_url, api_key="sk-ant-test", max_retries=0,
                               default_headers=headers, **kw)  # fmt: skip


def gpt(emu, control: str = "", base: str | None = None, **kw) -> openai.OpenAI:
    headers = {"x-emulator": control} if control else {}
    return openai.OpenAI(base_url=(base or emu.http_url) + "/v1", api_key="sk-test", max_retries=0,
                         default_headers=headers, **kw)  # fmt: skip


def last(emu) -> dict:
    return emu.exchanges()[-1]


def trusting(emu) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=emu.ca_path)


def anthropic_stream(client: anthropic.Anthropic, **kw):
    """Stream with the SDK helper; return (final message, text seen, raw tool argument strings by index)."""
    text, args = "", {}
    with client.messages.stream(model=CLAUDE, max_tokens=256, messages=HI, **kw) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                args[event.index] = args.get(event.index, "") + event.delta.partial_json
            elif event.type == "text":
                text += event.text
        return stream.get_final_message(), text, [args[i] for i in sorted(args)]


def openai_stream(client: openai.OpenAI, **kw):
    """Stream chunks; return (chunks, text, {index: [id, name, arguments]})."""
    chunks = list(client.chat.completions.create(model=GPT, messages=HI, stream=True, **kw))
    text, calls = "", {}
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                call = calls.setdefault(tc.index, [None, None, ""])
                call[0] = tc.id or call[0]
                call[1] = (tc.function.name if tc.function else None) or call[1]
                call[2] += (tc.function.arguments if tc.function else None) or ""
    return chunks, text, calls


def decode(data: bytes, content_encoding: str | None) -> bytes:
    """Independent decoder: handles several gzip members and several zstd frames."""
    for name in reversed([e.strip() for e in (content_encoding or "").split(",") if e.strip()]):
        if name == "gzip":
            data = gzip.decompress(data)  # reads every member
        elif name == "deflate":
            try:
                data = zlib.decompress(data)
            except zlib.error:
                data = zlib.decompress(data, -zlib.MAX_WBITS)
        elif name == "br":
            data = brotli.decompress(data)
        elif name == "zstd":
            out, rest = b"", data
            while rest:
                d = zstandard.ZstdDecompressor().decompressobj()
                out += d.decompress(rest)
                rest = d.unused_data
            data = out
    return data


def sse_events(body: bytes) -> list[tuple[str | None, str]]:
    events = []
    for block in body.decode().split("\n\n"):
        if not block:
            continue
        name = next((ln[7:] for ln in block.split("\n") if ln.startswith("event: ")), None)
        data = "\n".join(ln[6:] for ln in block.split("\n") if ln.startswith("data: "))
        events.append((name, data))
    return events


# -- text ---------------------------------------------------------------------------------------


def test_anthropic_text_non_stream(emu):
    msg = claude(emu, "model_suffix=-20251001").messages.create(model=CLAUDE, max_tokens=64, messages=HI)
    ex = last(emu)
    exp = ex["expected"]
    assert msg.content[0].text == exp["text"] and ANCHOR in exp["text"]
    assert msg.id == exp["message_id"] and msg.id.startswith("msg_01") and len(msg.id) == 28
    assert msg.model == exp["response_model"] == CLAUDE + "-20251001" and exp["model"] == CLAUDE
    assert msg.stop_reason == exp["stop_reason"] == "end_turn"
    assert msg.usage.model_dump(exclude_none=True) == exp["usage_raw"]
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (exp["input_tokens"], exp["output_tokens"])
    headers = dict(ex["response_headers"])
    assert headers["request-id"].startswith("req_011C") and len(headers["request-id"]) == 28
    assert headers["content-length"] == str(len(base64.b64decode(ex["response_body_b64"])))
    assert (ex["scheme"], ex["host"], ex["method"], ex["path"], ex["status"]) == (
        "http", "127.0.0.1", "POST", "/v1/messages", 200)  # fmt: skip
    assert ex["stream"] is False and ex["complete"] is True
    assert json.loads(ex["request_body"])["messages"] == HI


def test_anthropic_text_stream(emu):
    msg, text, _ = anthropic_stream(claude(emu))
    ex = last(emu)
    exp = ex["expected"]
    assert text == exp["text"] == msg.content[0].text
    assert msg.usage.model_dump(exclude_none=True) == exp["usage_raw"]
    assert msg.usage.output_tokens == exp["output_tokens"]
    body = base64.b64decode(ex["response_body_b64"])
    events = sse_events(body)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"] and names[-1] == "message_stop"
    for name, data in events:
        assert json.loads(data)["type"] == name  # event: line equals the JSON type
    start = json.loads(events[0][1])["message"]["usage"]
    assert start["output_tokens"] < exp["output_tokens"]  # a placeholder
    assert b'"type":"message_stop"  ' in body  # Anthropic's trailing-space padding
    assert dict(ex["response_headers"])["transfer-encoding"] == "chunked"


def test_openai_text_non_stream_and_stream(emu):
    client = gpt(emu)
    resp = client.chat.completions.create(model=GPT, messages=HI)
    exp = last(emu)["expected"]
    body = base64.b64decode(last(emu)["response_body_b64"])
    assert body.startswith(b'{\n  "id": "chatcmpl-')  # pretty-printed like the real API
    assert resp.choices[0].message.content == exp["text"] and ANCHOR in exp["text"]
    assert resp.id == exp["message_id"] and len(resp.id) == len("chatcmpl-") + 29
    assert resp.usage.model_dump(exclude_none=True) == exp["usage_raw"]
    assert dict(last(emu)["response_headers"])["x-request-id"]

    chunks, text, _ = openai_stream(client)
    exp = last(emu)["expected"]
    assert text == exp["text"]
    assert all(c.usage is None and c.choices for c in chunks)  # no usage chunk unless asked
    assert exp["usage_raw"] is None and exp["output_tokens"] is None
    assert all(getattr(c, "obfuscation", None) for c in chunks)
    assert base64.b64decode(last(emu)["response_body_b64"]).endswith(b"data: [DONE]\n\n")

    chunks, text, _ = openai_stream(client, stream_options={"include_usage": True})
    exp = last(emu)["expected"]
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump(exclude_none=True) == exp["usage_raw"]
    assert chunks[-1].usage.prompt_tokens == exp["input_tokens"]
    assert chunks[-1].usage.completion_tokens == exp["output_tokens"]


def test_same_request_same_answer(emu):
    client = claude(emu)
    for _ in range(2):
        client.messages.create(model=CLAUDE, max_tokens=64, messages=HI)
    first, second = (e["expected"] for e in emu.exchanges())
    assert first == second
    other = client.messages.create(model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "x"}])
    assert other.id != first["message_id"]
    assert [e["id"] for e in emu.exchanges()] == sorted({e["id"] for e in emu.exchanges()})


def test_text_control_overrides_answer(emu):
    msg = claude(emu, "text=Just this.").messages.create(model=CLAUDE, max_tokens=64, messages=HI)
    assert msg.content[0].text == "Just this." == last(emu)["expected"]["text"]


# -- tool calls, thinking, usage ----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_parallel_tool_calls(emu, stream):
    client = claude(emu, "tools=2")
    if stream:
        msg, _, raw_args = anthropic_stream(client, tools=A_TOOLS)
    else:
        msg = client.messages.create(model=CLAUDE, max_tokens=256, messages=HI, tools=A_TOOLS)
    exp = last(emu)["expected"]
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert msg.stop_reason == exp["stop_reason"] == "tool_use"
    assert [(b.id, b.name) for b in uses] == [(c["call_id"], c["name"]) for c in exp["tool_calls"]]
    assert [c["name"] for c in exp["tool_calls"]] == ["get_weather", "read_file"]
    assert all(b.id.startswith("toolu_01") and len(b.id) == 30 for b in uses)
    assert [b.input for b in uses] == [json.loads(c["arguments"]) for c in exp["tool_calls"]]
    assert uses[0].input["city"] == 'city ünï "q0" \\ 🎉' and uses[0].input["metric"] is True
    if stream:
        assert raw_args == [c["arguments"] for c in exp["tool_calls"]]
        assert "\\u" in raw_args[1]  # the second call escapes non-ASCII: fragments cut inside \uXXXX
    else:
        body = base64.b64decode(last(emu)["response_body_b64"]).decode()
        assert all(c["arguments"] in body for c in exp["tool_calls"])


@pytest.mark.parametrize("stream", [False, True])
def test_openai_parallel_tool_calls(emu, stream):
    client = gpt(emu, "tools=2")
    if stream:
        chunks, _, calls = openai_stream(client, tools=O_TOOLS)
        got = [calls[i] for i in sorted(calls)]
        first = chunks[0].choices[0].delta
        assert first.role == "assistant"
        if not last(emu)["expected"]["text"]:  # a tool-call stream starts with content null and call 0
            assert first.content is None and first.tool_calls[0].index == 0
        finish = chunks[-1].choices[0].finish_reason
    else:
        resp = client.chat.completions.create(model=GPT, messages=HI, tools=O_TOOLS)
        got = [[t.id, t.function.name, t.function.arguments] for t in resp.choices[0].message.tool_calls]
        finish = resp.choices[0].finish_reason
    exp = last(emu)["expected"]
    assert finish == exp["stop_reason"] == "tool_calls"
    assert got == [[c["call_id"], c["name"], c["arguments"]] for c in exp["tool_calls"]]
    assert all(c["call_id"].startswith("call_") and len(c["call_id"]) == 29 for c in exp["tool_calls"])


def test_tool_results_get_a_final_answer(emu):
    messages = [*HI, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_01AAAAAAAAAAAAAAAAAAAAAA", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01AAAAAAAAAAAAAAAAAAAAAA",
                                      "content": "18C and cloudy"}]}]  # fmt: skip
    msg = claude(emu).messages.create(model=CLAUDE, max_tokens=64, messages=messages, tools=A_TOOLS)
    assert msg.stop_reason == "end_turn" and "18C and cloudy" in msg.content[0].text
    chat = [*HI, {"role": "assistant", "content": None, "tool_calls": [{"id": "call_x", "type": "function",
             "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_x", "content": "sunny, 21C"}]  # fmt: skip
    resp = gpt(emu).chat.completions.create(model=GPT, messages=chat, tools=O_TOOLS)
    assert resp.choices[0].finish_reason == "stop" and "sunny, 21C" in resp.choices[0].message.content


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_thinking(emu, stream):
    client = claude(emu, "scenario=thinking; redacted_thinking=1")
    if stream:
        msg, _, _ = anthropic_stream(client)
    else:
        msg = client.messages.create(model=CLAUDE, max_tokens=256, messages=HI)
    exp = last(emu)["expected"]
    kinds = [b.type for b in msg.content]
    assert kinds == ["redacted_thinking", "thinking", "text"]
    assert exp["thinking"] == "[redacted thinking]\n" + msg.content[1].thinking
    assert msg.content[1].signature and msg.content[2].text == exp["text"]
    msg = claude(emu, "scenario=thinking").messages.create(
        model=CLAUDE, max_tokens=256, messages=HI, tools=A_TOOLS
    )
    assert [b.type for b in msg.content if b.type != "text"] == ["thinking", "tool_use"]


@pytest.mark.parametrize("stream", [False, True])
def test_cache_and_reasoning_usage(emu, stream):
    control = "cache_read=1200; cache_write=300; cache_write_1h=100; reasoning=40"
    if stream:
        usage = anthropic_stream(claude(emu, control))[0].usage
    else:
        usage = claude(emu, control).messages.create(model=CLAUDE, max_tokens=64, messages=HI).usage
    exp = last(emu)["expected"]
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (1200, 300)
    assert usage.cache_creation.ephemeral_1h_input_tokens == 100
    assert usage.cache_creation.ephemeral_5m_input_tokens == 200
    assert (exp["cache_read"], exp["cache_write"], exp["cache_write_1h"]) == (1200, 300, 100)
    assert exp["input_tokens"] == usage.input_tokens + 1200 + 300  # Anthropic input excludes the cache
    assert usage.output_tokens == exp["output_tokens"]

    kw = {"stream_options": {"include_usage": True}} if stream else {}
    if stream:
        usage = openai_stream(gpt(emu, control), **kw)[0][-1].usage
    else:
        usage = gpt(emu, control).chat.completions.create(model=GPT, messages=HI).usage
    exp = last(emu)["expected"]
    assert usage.prompt_tokens_details.cached_tokens == exp["cache_read"] == 1200
    assert usage.prompt_tokens == exp["input_tokens"] and usage.prompt_tokens > 1200  # includes cached
    assert usage.completion_tokens_details.reasoning_tokens == exp["reasoning"] == 40
    assert usage.completion_tokens == exp["output_tokens"] > 40  # includes reasoning


# -- encodings, chunking, truncation ----------------------------------------------------------


@pytest.mark.parametrize("encoding", SDK_ENCODINGS)
def test_sdks_decode_every_encoding(emu, encoding):
    _, text, _ = anthropic_stream(claude(emu, f"encoding={encoding}"))
    ex = last(emu)
    assert text == ex["expected"]["text"]
    wire = None if encoding == "identity" else encoding.replace(",", ", ").replace("-raw", "")
    assert dict(ex["response_headers"]).get("content-encoding") == wire
    body = decode(base64.b64decode(ex["response_body_b64"]), wire)
    assert sse_events(body)[-1][0] == "message_stop"
    resp = gpt(emu, f"encoding={encoding}").chat.completions.create(model=GPT, messages=HI)
    assert resp.choices[0].message.content == last(emu)["expected"]["text"]


@pytest.mark.parametrize("encoding", ["gzip-multi", "zstd-frames", "gzip,zstd", "zstd,br"])
def test_raw_decoded_encodings(emu, encoding):
    """httpx cannot decode these (first gzip member only; zstd frames across reads; zstd in a stack)."""
    body = {"model": CLAUDE, "max_tokens": 64, "stream": True, "messages": HI}
    with httpx.Client() as client, client.stream("POST", emu.http_url + "/v1/messages", json=body,
                                                 headers={"x-emulator": f"encoding={encoding}"}) as resp:  # fmt: skip
        raw = b"".join(resp.iter_raw())
        wire = resp.headers["content-encoding"]
    ex = last(emu)
    assert raw == base64.b64decode(ex["response_body_b64"])
    assert wire == encoding.split("-")[0].replace(",", ", ")
    if encoding == "gzip-multi":  # one member per event
        assert raw.count(b"\x1f\x8b\x08") >= len(sse_events(decode(raw, wire)))
    elif encoding == "zstd-frames":  # one frame per event
        assert raw.count(b"\x28\xb5\x2f\xfd") >= len(sse_events(decode(raw, wire)))
    text = "".join(json.loads(d)["delta"].get("text", "") for n, d in sse_events(decode(raw, wire))
                   if n == "content_block_delta")  # fmt: skip
    assert text == ex["expected"]["text"]


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "deflate-raw", "br", "zstd", "gzip-multi",
                                      "zstd-frames", "gzip,br", "br,zstd"])  # fmt: skip
def test_every_event_decodes_on_arrival(encoding):
    """Each event's compressed bytes, fed to a streaming decoder, give back exactly that event."""
    events = [f"data: {{'n': {i}, 'text': 'ünï 🎉 {'x' * i}'}}\n\n".encode() for i in range(20)]
    encoder = Encoder(encoding)
    decoders = []
    for name in reversed(encoding.split(",")):
        if name.startswith("gzip"):
            decoders.append(_Restarting(lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)))
        elif name == "deflate":
            decoders.append(_Restarting(zlib.decompressobj))
        elif name == "deflate-raw":
            decoders.append(_Restarting(lambda: zlib.decompressobj(-zlib.MAX_WBITS)))
        elif name == "br":
            decoders.append(_Brotli())
        else:
            decoders.append(_Restarting(lambda: zstandard.ZstdDecompressor().decompressobj()))
    for event in events:
        data = encoder.step(event)
        for d in decoders:
            data = d.feed(data)
        assert data == event
    tail = encoder.end()
    for d in decoders:
        tail = d.feed(tail)
    assert tail == b""


class _Restarting:
    """A zlib/zstd decompressobj that starts over at each new member/frame."""

    def __init__(self, make) -> None:
        self.make, self.d = make, make()

    def feed(self, data: bytes) -> bytes:
        out = self.d.decompress(data)
        while self.d.eof and self.d.unused_data:
            rest, self.d = self.d.unused_data, self.make()
            out += self.d.decompress(rest)
        if self.d.eof:
            self.d = self.make()
        return out


class _Brotli:
    def __init__(self) -> None:
        self.d = brotli.Decompressor()

    def feed(self, data: bytes) -> bytes:
        return self.d.process(data) if data else b""


def test_encoding_auto_and_defaults(emu):
    anthropic_stream(claude(emu, "encoding=auto"))
    assert dict(last(emu)["response_headers"])["content-encoding"] == "gzip"  # first of httpx's offer
    with Emulator(defaults={"encoding": "br", "model_suffix": "-x"}) as own:
        msg = claude(own).messages.create(model=CLAUDE, max_tokens=64, messages=HI)
        ex = own.exchanges()[-1]
        assert dict(ex["response_headers"])["content-encoding"] == "br" and msg.model == CLAUDE + "-x"
        claude(own, "encoding=identity").messages.create(model=CLAUDE, max_tokens=64, messages=HI)
        assert "content-encoding" not in dict(own.exchanges()[-1]["response_headers"])


def test_chunk_1_still_parses(emu):
    _, text, raw_args = anthropic_stream(claude(emu, "chunk=1; encoding=gzip; tools=2"), tools=A_TOOLS)
    exp = last(emu)["expected"]
    assert raw_args == [c["arguments"] for c in exp["tool_calls"]] and text == exp["text"]
    _, text, _ = openai_stream(gpt(emu, "chunk=1"))
    assert text == last(emu)["expected"]["text"]


@pytest.mark.parametrize("control", ["", "encoding=gzip", "encoding=br,gzip", "chunk=7", "lie_encoding=gzip"])
def test_logged_bytes_are_the_wire_bytes(emu, control):
    """The body as sent, and as the client decodes it (`response_body_decoded_b64`)."""
    for stream in (False, True):
        body = {"model": GPT, "messages": HI, "stream": stream}
        with httpx.Client() as client, client.stream("POST", emu.http_url + "/v1/chat/completions", json=body,
                                                     headers={"x-emulator": control}) as resp:  # fmt: skip
            raw = b"".join(resp.iter_raw())
        ex = last(emu)
        assert raw == base64.b64decode(ex["response_body_b64"]) and ex["complete"]
        assert ex["stream"] is stream
        wire = resp.headers.get("content-encoding")
        if control == "lie_encoding=gzip":
            assert wire == "gzip" and not raw.startswith(b"\x1f\x8b")
            wire = None
        decoded = base64.b64decode(ex["response_body_decoded_b64"])
        assert decoded == decode(raw, wire) and (b"data: [DONE]" in decoded) is stream


@pytest.mark.parametrize("stream", [False, True])
def test_truncate(emu, stream):
    body = {"model": CLAUDE, "max_tokens": 64, "messages": HI, "stream": stream}
    with pytest.raises(httpx.RemoteProtocolError), httpx.Client() as client, client.stream(
        "POST", emu.http_url + "/v1/messages", json=body, headers={"x-emulator": "truncate=150"}
    ) as resp:  # fmt: skip
        resp.read()
    ex = last(emu)
    assert ex["complete"] is False and len(base64.b64decode(ex["response_body_b64"])) == 150
    with pytest.raises((anthropic.APIConnectionError, httpx.HTTPError)):
        if stream:
            anthropic_stream(claude(emu, "truncate=300"))
        else:
            claude(emu, "truncate=50").messages.create(model=CLAUDE, max_tokens=64, messages=HI)


def test_delay_paces_events(emu):
    body = {"model": CLAUDE, "max_tokens": 64, "messages": HI, "stream": True}
    began = time.monotonic()
    with httpx.Client() as client, client.stream("POST", emu.http_url + "/v1/messages", json=body,
                                                 headers={"x-emulator": "delay_ms=40"}) as resp:  # fmt: skip
        parts = resp.iter_raw()
        next(parts)
        first = time.monotonic() - began
        for _ in parts:
            pass
        total = time.monotonic() - began
    # lower bounds only (a loaded machine only makes them larger): the events come 40 ms apart, and
    # the first is not held back with the rest (most of the waiting comes after it)
    assert total > 0.04 * 8 and total - first > 0.04 * 7


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "exc", "etype"), [
    (429, anthropic.RateLimitError, "rate_limit_error"), (529, anthropic.OverloadedError, "overloaded_error"),
    (400, anthropic.BadRequestError, "invalid_request_error"), (500, anthropic.InternalServerError, "api_error"),
])  # fmt: skip
def test_anthropic_error_status(emu, status, exc, etype):
    with pytest.raises(exc) as info:
        claude(emu, f"scenario=error; status={status}").messages.create(
            model=CLAUDE, max_tokens=64, messages=HI
        )
    ex = last(emu)
    assert info.value.status_code == ex["status"] == status
    assert info.value.body["error"]["type"] == etype == ex["expected"]["error_type"]
    assert info.value.body["request_id"].startswith("req_011C")
    assert info.value.body["request_id"] == info.value.response.headers["request-id"]
    assert ex["expected"]["input_tokens"] is None and ex["expected"]["usage_raw"] is None


@pytest.mark.parametrize(("status", "exc"), [
    (429, openai.RateLimitError), (400, openai.BadRequestError), (500, openai.InternalServerError),
])  # fmt: skip
def test_openai_error_status(emu, status, exc):
    with pytest.raises(exc) as info:
        gpt(emu, f"scenario=error; status={status}").chat.completions.create(
            model=GPT, messages=HI, stream=True
        )
    ex = last(emu)
    assert info.value.status_code == status and info.value.type == ex["expected"]["error_type"]
    assert base64.b64decode(ex["response_body_b64"]).startswith(b'{\n  "error": {')


@pytest.mark.parametrize("tools", [False, True])
def test_midstream_error(emu, tools):
    kw = {"tools": A_TOOLS} if tools else {}
    text = ""
    client = claude(emu, "scenario=midstream_error")
    with pytest.raises(anthropic.APIStatusError) as info, client.messages.stream(
        model=CLAUDE, max_tokens=64, messages=HI, **kw
    ) as stream:  # fmt: skip
        for event in stream:
            text += event.text if event.type == "text" else ""
    ex = last(emu)
    assert info.value.body["error"]["type"] == ex["expected"]["error_type"] == "overloaded_error"
    assert text == ex["expected"]["text"] and ex["complete"] is False and ex["status"] == 200
    body = base64.b64decode(ex["response_body_b64"])
    assert b"event: error" in body and b"message_stop" not in body

    kw = {"tools": O_TOOLS} if tools else {}
    with pytest.raises(openai.APIError):
        openai_stream(gpt(emu, "scenario=midstream_error"), **kw)
    ex = last(emu)
    assert ex["expected"]["error_type"] == "server_error" and ex["complete"] is False
    assert b"[DONE]" not in base64.b64decode(ex["response_body_b64"])


@pytest.mark.parametrize("kind", ["bad_json", "garbage", "bad_sse"])
def test_malformed_streams(emu, kind):
    for url in ("/v1/messages", "/v1/chat/completions"):
        body = {"model": CLAUDE, "max_tokens": 64, "messages": HI, "stream": True}
        resp = httpx.post(
            emu.http_url + url, json=body, headers={"x-emulator": f"scenario=malformed; kind={kind}"}
        )
        ex = last(emu)
        assert resp.status_code == 200 and ex["expected"]["malformed"] == kind
        assert resp.content == base64.b64decode(ex["response_body_b64"])
        tail = b"message_stop" if url == "/v1/messages" else b"data: [DONE]"
        assert tail in resp.content[-60:]  # valid events follow the broken one


def test_bad_controls_answer_an_error(emu):
    resp = httpx.post(emu.http_url + "/v1/messages", json={"model": CLAUDE, "messages": HI},
                      headers={"x-emulator": "encoding=lzma"})  # fmt: skip
    assert resp.status_code == 400 and resp.json()["error"]["type"] == "emulator_error"
    assert httpx.get(emu.http_url + "/v1/nothing").status_code == 404


# -- transport: HTTPS, upstream proxy, requests, admin, CLI -------------------------------------


def test_https_with_the_emulator_ca(emu):
    http = httpx.Client(verify=trusting(emu))
    msg = claude(emu, base=emu.https_url, http_client=http).messages.create(
        model=CLAUDE, max_tokens=64, messages=HI
    )
    ex = last(emu)
    assert msg.content[0].text == ex["expected"]["text"] and ex["scheme"] == "https"
    _, text, _ = openai_stream(
        gpt(emu, "encoding=zstd", base=emu.https_url, http_client=httpx.Client(verify=trusting(emu)))
    )
    assert text == last(emu)["expected"]["text"]
    with pytest.raises(httpx.ConnectError):
        httpx.get(emu.https_url + "/_emulator/health")  # not trusted by default


def test_upstream_proxy_connect_and_absolute_form(emu):
    with httpx.Client(proxy=emu.proxy_url, verify=trusting(emu)) as http:
        _, text, _ = anthropic_stream(
            claude(emu, "encoding=gzip", base="https://api.anthropic.com", http_client=http)
        )
        ex = last(emu)
        assert (ex["scheme"], ex["host"], ex["path"]) == ("https", "api.anthropic.com", "/v1/messages")
        assert text == ex["expected"]["text"]
        resp = gpt(emu, base="http://api.openai.com", http_client=http).chat.completions.create(
            model=GPT, messages=HI
        )
        ex = last(emu)
        assert (ex["scheme"], ex["host"], ex["path"]) == ("http", "api.openai.com", "/v1/chat/completions")
        assert resp.choices[0].message.content == ex["expected"]["text"]
    # the leaf presented inside the tunnel is for the CONNECT/SNI host
    with socket.create_connection(("127.0.0.1", int(emu.proxy_url.rsplit(":", 1)[1]))) as raw:
        raw.sendall(b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n")
        assert raw.recv(1024).startswith(b"HTTP/1.1 200 Connection established\r\n\r\n")
        with trusting(emu).wrap_socket(raw, server_hostname="api.openai.com") as tls:
            assert ("DNS", "api.openai.com") in tls.getpeercert()["subjectAltName"]


def test_request_bodies_chunked_and_compressed(emu):
    payload = json.dumps({"model": GPT, "messages": HI}).encode()
    resp = httpx.post(emu.http_url + "/v1/chat/completions", content=iter([payload[:10], payload[10:]]))
    assert resp.status_code == 200 and json.loads(last(emu)["request_body"]) == json.loads(payload)
    packers = {"gzip": gzip.compress, "br": brotli.compress, "deflate": zlib.compress,
               "zstd": zstandard.ZstdCompressor().compress}  # fmt: skip
    for name, pack in packers.items():
        packed = pack(payload)
        resp = httpx.post(
            emu.http_url + "/v1/chat/completions", content=packed, headers={"content-encoding": name}
        )
        assert resp.status_code == 200, name
        assert last(emu)["request_body"] == payload.decode()


def test_keep_alive_and_expect_continue(emu):
    body = json.dumps({"model": GPT, "messages": HI}).encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))  # fmt: skip
    with socket.create_connection(("127.0.0.1", int(emu.http_url.rsplit(":", 1)[1])), timeout=5) as sock:
        reader = sock.makefile("rb")
        for _ in range(2):  # two requests on one connection
            sock.sendall(request)
            assert reader.readline() == b"HTTP/1.1 100 Continue\r\n" and reader.readline() == b"\r\n"
            sock.sendall(body)
            assert reader.readline() == b"HTTP/1.1 200 OK\r\n"
            head = {}
            while (line := reader.readline()) != b"\r\n":
                name, _, value = line.decode().partition(":")
                head[name.lower()] = value.strip()
            assert json.loads(reader.read(int(head["content-length"])))["object"] == "chat.completion"
    assert [e["host"] for e in emu.exchanges()] == ["x", "x"]


def test_models_count_tokens_and_admin(emu):
    models = claude(emu).models.list()
    assert models.data[0].id.startswith("claude-") and models.data[0].type == "model"
    assert gpt(emu).models.list().data[0].id.startswith("gpt-")
    count = claude(emu).messages.count_tokens(model=CLAUDE, messages=HI)
    msg = claude(emu).messages.create(model=CLAUDE, max_tokens=64, messages=HI)
    assert count.input_tokens == msg.usage.input_tokens
    with httpx.Client(base_url=emu.http_url) as admin:
        assert admin.get("/_emulator/health").json() == {"ok": True}
        logged = admin.get("/_emulator/exchanges").json()
        assert [e["path"] for e in logged][-2:] == ["/v1/messages/count_tokens", "/v1/messages"]
        assert admin.delete("/_emulator/exchanges").status_code == 200
    assert emu.exchanges() == []


def test_cli_runs_and_stops_on_sigterm(tmp_path):
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen([sys.executable, "-m", "capsem.emulator", "--ready-file", str(ready)], cwd=ROOT,
                            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    try:
        line = json.loads(proc.stdout.readline())
        assert json.loads(ready.read_text()) == line and Path(line["ca_path"]).is_file()
        assert httpx.get(line["http_url"] + "/_emulator/health").json() == {"ok": True}
        resp = httpx.get(
            line["https_url"] + "/_emulator/health", verify=ssl.create_default_context(cafile=line["ca_path"])
        )
        assert resp.status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
