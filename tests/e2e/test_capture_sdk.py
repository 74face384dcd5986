"""End to end: real SDK clients → real mitmdump with capsem → the provider emulator.

mitmdump runs in upstream mode towards the emulator, so clients use the real base URLs
(api.anthropic.com, api.openai.com) and the addon sees the real hosts. Every assertion
compares a session.db column with what the emulator logged that it sent. The upstream-mode tests
share one mitmdump (tests/shared_proxy.py), each reading its own scenario's rows.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import ssl

import anthropic
import httpx
import openai
import pytest

from tests.conftest import only_session, rows
from tests.shared_proxy import SharedProxy, assert_clean_log

ANTHROPIC_KEY = "sk-ant-api03-e2eSECRETanthropicKEY0000000000"
OPENAI_KEY = "sk-proj-e2eSECRETopenaiKEY00000000000000"
TOOLS_A = [
    {"name": "read_file", "description": "Read a file",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "search", "description": "Search",
     "input_schema": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                      "required": ["query", "limit"]}},
]  # fmt: skip
TOOLS_O = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
            "parameters": t["input_schema"]}} for t in TOOLS_A]  # fmt: skip


def http_client(proxy) -> httpx.Client:
    return httpx.Client(proxy=proxy.url, verify=ssl.create_default_context(cafile=proxy.ca_cert), timeout=30)


def claude(proxy, control: str = "") -> anthropic.Anthropic:
    headers = {"x-emulator": control} if control else {}
    return anthropic.Anthropic(api_key=ANTHROPIC_KEY, http_client=http_client(proxy), max_retries=0,
                               default_headers=headers)  # fmt: skip


def gpt(proxy, control: str = "") -> openai.OpenAI:
    headers = {"x-emulator": control} if control else {}
    return openai.OpenAI(
        api_key=OPENAI_KEY, http_client=http_client(proxy), max_retries=0, default_headers=headers
    )


def finish(proxy, capsem_home):
    """Stop mitmdump (the session ends and is rolled up) and return the session.db path."""
    assert proxy.stop() == 0, proxy.log()[-3000:]
    assert_clean_log(proxy.log())
    return only_session(capsem_home)


def model_exchanges(emu) -> list[dict]:
    """The emulator's exchanges that were model calls (they carry an `expected` record)."""
    return [e for e in emu.exchanges() if e["expected"].get("protocol")]


def by_marker(db, emu, markers: list[str], net_ids: list[int] | None = None) -> list[tuple[dict, dict, dict]]:
    """`(net_events row, model_calls row, emulator exchange)` of each request of one proxy run (or of
    the flows `net_ids` of a shared one, `emu` then a `tests.shared_proxy.Scenario`), found by the
    marker its body carries (so flows that end out of order still pair up)."""
    nets = {row["id"]: row for row in rows(db, "SELECT * FROM net_events")}
    calls = rows(db, "SELECT * FROM model_calls")
    exchanges = (
        model_exchanges(emu)
        if net_ids is None
        else [e for e in emu.exchanges if e["expected"].get("protocol")]
    )
    if net_ids is not None:
        nets = {i: row for i, row in nets.items() if i in net_ids}
        calls = [c for c in calls if c["net_event_id"] in nets]
    assert len(nets) == len(calls) == len(exchanges) == len(markers)
    out = []
    for marker in markers:
        (ex,) = [e for e in exchanges if marker.encode() in base64.b64decode(e["request_body_decoded_b64"])]
        # the marker in the request's preview, or (a body longer than the preview) the answer's id
        (call,) = [c for c in calls if marker in (nets[c["net_event_id"]]["request_body_preview"] or "")] or [
            c for c in calls if c["message_id"] == ex["expected"].get("message_id")]  # fmt: skip
        out.append((nets[call["net_event_id"]], call, ex))
    return out


def assert_call_matches(call: dict, ex: dict) -> None:
    """Every model_calls column that the emulator's log determines."""
    exp = ex["expected"]
    assert call["model"] == exp["model"]
    assert call["response_model"] == exp["response_model"]
    assert call["message_id"] == exp["message_id"]
    assert (call["text_content"] or "") == exp["text"]
    assert (call["thinking_content"] or "") == exp["thinking"]
    assert call["stop_reason"] == exp["stop_reason"]
    assert call["status_code"] == ex["status"]
    assert call["stream"] == int(ex["stream"])
    assert call["input_tokens"] == exp["input_tokens"]
    details = json.loads(call["usage_details"])
    if exp["output_tokens"] is None:
        assert "output_tokens" in details.get("estimated", [])
        assert call["output_tokens"] > 0
    else:
        assert call["output_tokens"] == exp["output_tokens"]
        assert details["raw"] == exp["usage_raw"]
        assert "estimated" not in details
    for key in ("cache_read", "cache_write", "cache_write_1h", "reasoning"):
        if exp.get(key):
            assert details[key] == exp[key], key
    assert call["request_bytes"] == len(ex["request_body"].encode()) or ex["request_headers"].get(
        "content-encoding"
    )
    assert call["duration_ms"] >= 0 and call["ttft_ms"] is not None and call["ttft_ms"] <= call["duration_ms"]
    assert call["complete"] == int(ex["complete"])


def assert_tool_calls(db, call_id: int, ex: dict) -> None:
    got = rows(db, "SELECT call_index, call_id, tool_name, arguments, complete FROM tool_calls "
                   "WHERE model_call_id = ? ORDER BY call_index", (call_id,))  # fmt: skip
    want = [{"call_index": t["index"], "call_id": t["call_id"], "tool_name": t["name"], "arguments": t["arguments"],
             "complete": 1} for t in ex["expected"]["tool_calls"]]  # fmt: skip
    assert got == want


@pytest.fixture(scope="module")
def shared(emulator, tmp_path_factory) -> SharedProxy:
    """The upstream-mode tests' traffic through one mitmdump, then stopped (the session rolled up)."""
    shared = SharedProxy(emulator, tmp_path_factory.mktemp("capture-sdk"))
    try:
        shared.run("anthropic loop", anthropic_loop_traffic)
        for stream in (False, True):
            shared.run(f"openai loop {stream}", lambda p, s=stream: openai_loop_traffic(p, s))
        shared.run("estimated", estimated_traffic)
        for api in ("anthropic", "openai"):
            shared.run(f"encodings {api}", lambda p, a=api: encodings_traffic(p, a))
        shared.run("compressed", compressed_traffic)
    finally:
        shared.stop()
    return shared


def anthropic_loop_traffic(proxy) -> list:
    """Two turns, the second carrying a result and an error for the first's two tool uses; the uses."""
    client = claude(proxy, "tools=2; cache_read=1200; cache_write=300; cache_write_1h=100")
    messages = [{"role": "user", "content": "Read the README and search for ünïcode 🎉"}]
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=1024, system="Be terse.", tools=TOOLS_A,
                                messages=messages) as stream:  # fmt: skip
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use"
    uses = [b for b in first.content if b.type == "tool_use"]
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": uses[0].id, "content": "# README\nhello"},
            {"type": "tool_result", "tool_use_id": uses[1].id, "is_error": True,
             "content": [{"type": "text", "text": "search backend down"}]}]},
    ]  # fmt: skip
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=1024, system="Be terse.", tools=TOOLS_A,
                                messages=messages) as stream:  # fmt: skip
        second = stream.get_final_message()
    assert second.stop_reason == "end_turn"
    return uses


def test_anthropic_streamed_tool_loop(shared):
    db, s, exchanges = shared.exchanges("anthropic loop")
    uses = s.result
    calls = shared.model_calls(s)
    assert len(calls) == 2 == len(exchanges)
    for call, ex in zip(calls, exchanges, strict=True):
        assert (
            call["provider"] == "anthropic"
            and call["protocol"] == "anthropic"
            and call["host"] == "api.anthropic.com"
        )
        assert call["system_prompt_preview"] == "Be terse."
        assert call["tools_count"] == 2
        assert_call_matches(call, ex)
        assert_tool_calls(db, call["id"], ex)
    assert [c["messages_count"] for c in calls] == [1, 3]
    assert calls[0]["trace_id"] == calls[1]["trace_id"]
    assert calls[0]["estimated_cost_usd"] > 0 and calls[0]["price_source"].startswith(
        "config/genai-prices.json (genai-prices data of 2026-08-21"
    )
    ids = ",".join(str(c["id"]) for c in calls)
    responses = rows(db, "SELECT model_call_id, call_id, content_preview, is_error, tool_name, trace_id "
                         f"FROM tool_responses WHERE model_call_id IN ({ids}) ORDER BY id")  # fmt: skip
    assert responses == [
        {"model_call_id": calls[1]["id"], "call_id": uses[0].id, "content_preview": "# README\nhello", "is_error": 0,
         "tool_name": uses[0].name, "trace_id": calls[0]["trace_id"]},
        {"model_call_id": calls[1]["id"], "call_id": uses[1].id, "content_preview": "search backend down",
         "is_error": 1, "tool_name": uses[1].name, "trace_id": calls[0]["trace_id"]},
    ]  # fmt: skip

    net = rows(db, f"SELECT * FROM net_events WHERE path = '/v1/messages' AND id IN ({s.ids()}) ORDER BY id")
    assert len(net) == 2
    for n, ex in zip(net, exchanges, strict=True):
        assert (n["domain"], n["port"], n["method"], n["decision"], n["conn_type"]) == (
            "api.anthropic.com",
            443,
            "POST",
            "allowed",
            "https",
        )
        assert n["status_code"] == 200 and n["streamed"] == 1
        assert n["bytes_received"] == len(__import__("base64").b64decode(ex["response_body_b64"]))
        headers = json.loads(n["request_headers"])
        assert headers["x-api-key"].startswith("hash:") and headers["content-type"] == "application/json"
        assert n["pid"] is not None and n["process_name"]

    # the session's rollup (every scenario of the shared session): its tokens and tool calls
    main = sqlite3.connect(shared.home / "main.db")
    status, total_in, total_tools = main.execute(
        "SELECT status, total_input_tokens, total_tool_calls FROM sessions"
    ).fetchone()
    every_call = rows(db, "SELECT input_tokens FROM model_calls")
    asked = sum(
        len(e["expected"]["tool_calls"]) for x in shared.scenarios.values() for e in x.model_exchanges
    )
    assert len(every_call) == sum(len(x.model_exchanges) for x in shared.scenarios.values())
    assert status == "stopped" and total_in == sum(c["input_tokens"] for c in every_call)
    assert total_tools == asked and asked > 2


def openai_loop_traffic(proxy, stream: bool) -> list[dict]:
    """A tool call and the turn carrying its results; the tool calls as the client sent them back."""
    client = gpt(proxy, "tools=2; cache_read=64; reasoning=32")
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Find the file"}]

    def ask():
        if not stream:
            resp = client.chat.completions.create(model="gpt-4.1", messages=messages, tools=TOOLS_O)
            return resp.choices[0].message
        chunks = list(
            client.chat.completions.create(
                model="gpt-4.1",
                messages=messages,
                tools=TOOLS_O,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        calls: dict[int, dict] = {}
        for ch in chunks:
            for choice in ch.choices:
                for tc in choice.delta.tool_calls or []:
                    entry = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
                    entry["name"] += tc.function.name or ""
                    entry["arguments"] += tc.function.arguments or ""
        return calls

    first = ask()
    if stream:
        tool_calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                      for _, c in sorted(first.items())]  # fmt: skip
    else:
        tool_calls = [tc.model_dump() for tc in first.tool_calls]
    messages.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
    messages += [
        {"role": "tool", "tool_call_id": tc["id"], "content": f"result {i}"}
        for i, tc in enumerate(tool_calls)
    ]
    ask()
    return tool_calls


@pytest.mark.parametrize("stream", [False, True])
def test_openai_tool_loop(shared, stream):
    db, s, exchanges = shared.exchanges(f"openai loop {stream}")
    tool_calls = s.result
    calls = shared.model_calls(s)
    assert len(calls) == 2
    for call, ex in zip(calls, exchanges, strict=True):
        assert (call["provider"], call["protocol"], call["host"]) == (
            "openai",
            "openai_chat",
            "api.openai.com",
        )
        assert call["system_prompt_preview"] == "Be terse."
        assert_call_matches(call, ex)
        assert_tool_calls(db, call["id"], ex)
    assert calls[0]["trace_id"] == calls[1]["trace_id"]
    ids = ",".join(str(c["id"]) for c in calls)
    responses = rows(db, "SELECT model_call_id, call_id, content_preview FROM tool_responses "
                         f"WHERE model_call_id IN ({ids}) ORDER BY id")  # fmt: skip
    assert responses == [{"model_call_id": calls[1]["id"], "call_id": tc["id"], "content_preview": f"result {i}"}
                         for i, tc in enumerate(tool_calls)]  # fmt: skip


def estimated_traffic(proxy) -> str:
    """A stream without `include_usage`; the text the client got."""
    client = gpt(proxy, "scenario=text")
    return "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="gpt-4.1", messages=[{"role": "user", "content": "hi"}], stream=True) if c.choices)  # fmt: skip


def test_openai_stream_without_include_usage_is_estimated(shared):
    s = shared.scenario("estimated")
    (call,) = shared.model_calls(s)
    assert call["text_content"] == s.result
    details = json.loads(call["usage_details"])
    assert details["estimated"] == ["input_tokens", "output_tokens"]
    assert details["estimator"] == "tiktoken:cl100k_base"
    assert call["input_tokens"] > 0 and call["output_tokens"] > 0 and call["estimated_cost_usd"] > 0


# the rarer wire forms; identity, gzip, deflate, br and zstd run for every API in test_api_matrix
ENCODINGS = ["gzip-multi", "deflate-raw", "zstd-frames", "gzip,br"]


def encodings_traffic(proxy, api: str) -> list[bytes]:
    """A streamed call of `api` in each of ENCODINGS; the raw bytes the client received of each."""
    received = []
    for encoding in ENCODINGS:
        message = [{"role": "user", "content": f"go {encoding}"}]
        if api == "anthropic":
            url, body = "https://api.anthropic.com/v1/messages", {
                "model": "claude-haiku-4-5", "max_tokens": 100, "stream": True, "tools": TOOLS_A,
                "messages": message}  # fmt: skip
        else:
            url, body = "https://api.openai.com/v1/chat/completions", {
                "model": "gpt-4.1", "stream": True, "stream_options": {"include_usage": True}, "tools": TOOLS_O,
                "messages": message}  # fmt: skip
        with (
            http_client(proxy) as client,
            client.stream(
                "POST", url, json=body, headers={"x-emulator": f"encoding={encoding}; chunk=7; tools=2"}
            ) as resp,
        ):
            received.append(b"".join(resp.iter_raw()))
    return received


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_every_encoding_streamed_bytes_unchanged(shared, api):
    """The client receives exactly the wire bytes the emulator sent; capture decodes its copy (every
    encoding in turn through one proxy run)."""
    s = shared.scenario(f"encodings {api}")
    cases = by_marker(shared.db, s, [f"go {encoding}" for encoding in ENCODINGS], s.net_ids)
    for encoding, got, (net, call, ex) in zip(ENCODINGS, s.result, cases, strict=True):
        assert got == base64.b64decode(ex["response_body_b64"]), encoding
        assert_call_matches(call, ex)
        assert_tool_calls(shared.db, call["id"], ex)
        assert net["decode_error"] is None, encoding


COMPRESSED = ["gzip", "br", "zstd"]


def compressed_traffic(proxy) -> list[str]:
    """A thinking answer as JSON in each of COMPRESSED; the message ids the client got."""
    ids = []
    for encoding in COMPRESSED:
        msg = claude(proxy, f"encoding={encoding}; scenario=thinking").messages.create(
            model="claude-opus-4-1", max_tokens=2000, messages=[{"role": "user", "content": f"think {encoding}"}],
            thinking={"type": "enabled", "budget_tokens": 1024})  # fmt: skip
        ids.append(msg.id)
    return ids


def test_non_streamed_compressed(shared):
    """A thinking answer as JSON in each content encoding, one after another through one proxy run."""
    s = shared.scenario("compressed")
    cases = by_marker(shared.db, s, [f"think {encoding}" for encoding in COMPRESSED], s.net_ids)
    for encoding, message_id, (_net, call, ex) in zip(COMPRESSED, s.result, cases, strict=True):
        assert_call_matches(call, ex)
        assert call["message_id"] == message_id and call["thinking_content"], encoding


def test_plain_http_and_direct_base_url(mitmdump, emu, capsem_home):
    """No upstream mode: the SDK targets the emulator directly over plain HTTP (an unknown host)."""
    proxy = mitmdump()
    client = anthropic.Anthropic(api_key=ANTHROPIC_KEY, base_url=emu.http_url, http_client=http_client(proxy),
                                 max_retries=0)  # fmt: skip
    client.messages.create(
        model="claude-haiku-4-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    db = finish(proxy, capsem_home)
    (call,) = rows(db, "SELECT * FROM model_calls")
    (ex,) = model_exchanges(emu)
    assert call["host"] == "127.0.0.1" and call["provider"] == "anthropic"
    assert_call_matches(call, ex)
    (net,) = rows(db, "SELECT conn_type FROM net_events")
    assert net["conn_type"] == "http"
