"""OpenAI-compatible providers through real mitmdump with the real openai SDK: provider, model,
tokens and cost per host (NULL when genai-prices does not know the model), OpenRouter's own cost.

All tests share one mitmdump (tests/shared_proxy.py): the module's fixture sends each test's
traffic through it in turn; each test reads its own scenario's rows."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import anthropic
import openai
import pytest

from tests.conftest import rows
from tests.e2e.test_capture_sdk import assert_tool_calls, by_marker, http_client
from tests.shared_proxy import SharedProxy

KEY = "sk-compat-e2eSECRET000000000000000000"
HOSTS = [
    ("https://openrouter.ai/api/v1", "openrouter", "anthropic/claude-sonnet-4.5", True),
    ("https://api.deepseek.com/v1", "deepseek", "deepseek-chat", True),
    ("https://api.groq.com/openai/v1", "groq", "llama-3.3-70b-versatile", True),
    ("https://api.mistral.ai/v1", "mistral", "mistral-large-latest", True),
    ("https://api.x.ai/v1", "xai", "grok-4", True),
    ("https://res.openai.azure.com/openai/v1", "azure", "gpt-4o", True),
    ("https://api.x.ai/v1", "xai", "grok-private-fork-9", False),
]


@pytest.fixture(scope="module")
def shared(emulator, tmp_path_factory) -> SharedProxy:
    """Every test's traffic through one mitmdump, then stopped: `shared.scenarios[name]`."""
    shared = SharedProxy(emulator, tmp_path_factory.mktemp("compat"))
    try:
        for base_url, _provider, model, _priced in HOSTS:
            shared.run(
                f"hosts {base_url} {model}", lambda p, b=base_url, m=model: compatible_host_traffic(p, b, m)
            )
        shared.run("azure deployment", azure_deployment_traffic)
        for stream in (False, True):
            shared.run(f"bedrock invoke {stream}",
                       lambda p, s=stream: bedrock_post(p, s, "tools=1; cache_read=40; chunk=7"))  # fmt: skip
        shared.run("bedrock url model", lambda p: bedrock_post(p, True))
        shared.run("bedrock exception frame", lambda p: bedrock_post(p, True, "scenario=midstream_error"))
        shared.run("bedrock errors", bedrock_errors_traffic)
        shared.run("vertex", vertex_traffic)
        shared.run("mantle", mantle_traffic)
        shared.run("ollama", ollama_traffic)
        for server in ("vllm", "llamacpp"):
            for stream in (False, True):
                shared.run(f"self-hosted {server} {stream}",
                           lambda p, sv=server, st=stream: self_hosted_traffic(p, sv, st))  # fmt: skip
    finally:
        shared.stop()
    return shared


def compatible_host_traffic(proxy, base_url: str, model: str) -> None:
    client = openai.OpenAI(api_key=KEY, base_url=base_url, http_client=http_client(proxy), max_retries=0)
    for stream in (False, True):
        kwargs = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
        result = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], **kwargs
        )
        if stream:
            list(result)


@pytest.mark.parametrize(("base_url", "provider", "model", "priced"), HOSTS)
def test_compatible_hosts(shared, base_url, provider, model, priced):
    """Each host answers once as JSON and once streamed, through the proxy."""
    s = shared.scenario(f"hosts {base_url} {model}")
    calls = shared.model_calls(s)
    exchanges = s.model_exchanges
    assert [c["stream"] for c in calls] == [0, 1] and len(exchanges) == 2
    for call, ex in zip(calls, exchanges, strict=True):
        assert (call["provider"], call["protocol"], call["model"]) == (provider, "openai_chat", model)
        assert (
            call["input_tokens"] == ex["expected"]["input_tokens"]
            and call["text_content"] == ex["expected"]["text"]
        )
        assert (call["estimated_cost_usd"] is not None) == priced
        details = json.loads(call["usage_details"])
        if provider == "openrouter":
            assert details["provider_cost"] == ex["expected"]["usage_raw"]["cost"] > 0


def azure_deployment_traffic(proxy) -> None:
    client = openai.AzureOpenAI(api_key=KEY, azure_endpoint="https://res.openai.azure.com", api_version="2024-10-21",
                                azure_deployment="prod-gpt4o", http_client=http_client(proxy), max_retries=0)  # fmt: skip
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def test_azure_deployment_path(shared):
    s = shared.scenario("azure deployment")
    (call,) = shared.model_calls(s)
    assert (call["provider"], call["model"], call["path"]) == (
        "azure",
        "gpt-4o",
        "/openai/deployments/prod-gpt4o/chat/completions",
    )
    assert call["estimated_cost_usd"] > 0
    (net,) = rows(shared.db, f"SELECT query, request_headers FROM net_events WHERE id IN ({s.ids()})")
    assert "api-version=2024-10-21" in net["query"] and KEY not in net["request_headers"]


# -- Anthropic on Bedrock and Vertex; Ollama's OpenAI-compatible endpoint ------------------------------

BEDROCK = "https://bedrock-runtime.us-east-1.amazonaws.com"
BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
SIGNATURE = "f00dfeedSECRETsig0123456789abcdef0123456789abcdef0123456789abcd"
TOOLS_A = [{"name": "ls", "description": "list files", "input_schema": {
    "type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]}}]  # fmt: skip


def bedrock_post(
    proxy, stream: bool, control: str = "", model: str = BEDROCK_MODEL, body: dict | None = None
):
    """A hand-signed-looking InvokeModel request (the SDK's Bedrock client needs botocore)."""
    body = body or {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 256, "system": "Be terse.", "tools": TOOLS_A,
            "messages": [{"role": "user", "content": "list src"}]}  # fmt: skip
    action = "invoke-with-response-stream" if stream else "invoke"
    headers = {
        "authorization": f"AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE/20260101/us-east-1/bedrock/aws4_request, "
        f"SignedHeaders=host;x-amz-date, Signature={SIGNATURE}",
        "x-amz-date": "20260101T000000Z",
        "accept": "application/vnd.amazon.eventstream" if stream else "application/json",
        "x-emulator": control,
    }
    url = f"{BEDROCK}/model/{quote(model, safe=':')}/{action}"
    with http_client(proxy) as client, client.stream("POST", url, json=body, headers=headers) as resp:
        return resp.status_code, b"".join(resp.iter_raw())


@pytest.mark.parametrize("stream", [False, True])
def test_bedrock_invoke(shared, stream):
    s = shared.scenario(f"bedrock invoke {stream}")
    status, raw = s.result
    assert status == 200
    db = shared.db
    (call,) = shared.model_calls(s)
    (ex,) = s.model_exchanges
    exp = ex["expected"]
    assert raw == base64.b64decode(ex["response_body_b64"])  # the client got the provider's bytes
    assert (call["provider"], call["protocol"], call["stream"], call["complete"]) == (
        "bedrock", "anthropic", int(stream), 1)  # fmt: skip
    assert call["model"] == BEDROCK_MODEL  # the URL names the model; the body has none
    assert call["path"] == f"/model/{BEDROCK_MODEL}/{'invoke-with-response-stream' if stream else 'invoke'}"
    assert (call["input_tokens"], call["output_tokens"]) == (exp["input_tokens"], exp["output_tokens"])
    assert (call["text_content"] or "") == exp["text"] and call["stop_reason"] == exp["stop_reason"]
    assert json.loads(call["usage_details"])["cache_read"] == 40
    assert_tool_calls(db, call["id"], ex)
    assert call["estimated_cost_usd"] > 0  # genai-prices knows Claude on Bedrock ("aws")
    (net,) = rows(db, f"SELECT request_headers FROM net_events WHERE id IN ({s.ids()})")
    assert SIGNATURE not in net["request_headers"]


def test_bedrock_model_is_the_url_model(shared):
    (call,) = shared.model_calls(shared.scenario("bedrock url model"), "model, response_model")
    assert call == {"model": BEDROCK_MODEL, "response_model": "claude-sonnet-4-5-20250929"}


def test_bedrock_stream_exception_frame(shared):
    s = shared.scenario("bedrock exception frame")
    (call,) = shared.model_calls(s)
    (ex,) = s.model_exchanges
    assert (call["error_type"], call["complete"]) == ("modelStreamErrorException", 0)
    assert (call["text_content"] or "") == ex["expected"]["text"]


def bedrock_errors_traffic(proxy) -> int:
    status, _ = bedrock_post(proxy, False, "scenario=error; status=429")
    nova = {"messages": [{"role": "user", "content": [{"text": "hi"}]}], "inferenceConfig": {"maxTokens": 50}}
    bedrock_post(proxy, False, model="amazon.nova-pro-v1:0", body=nova)  # another API: not read as Anthropic
    return status


def test_bedrock_http_error_and_non_anthropic_models(shared):
    s = shared.scenario("bedrock errors")
    assert s.result == 429
    (call,) = shared.model_calls(s)
    assert (call["status_code"], call["provider"], call["error_message"]) == (
        429, "bedrock", "emulated ThrottlingException")  # fmt: skip
    assert len(s.net_ids) == 2


def vertex_traffic(proxy) -> None:
    client = anthropic.AnthropicVertex(region="us-east5", project_id="proj-1", access_token="ya29.SECRETtoken",
                                       http_client=http_client(proxy), max_retries=0)  # fmt: skip
    for stream in (False, True):
        kwargs = {
            "model": "claude-sonnet-4-5@20250929",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": f"hi stream={stream}"}],
        }
        if stream:
            with client.messages.stream(**kwargs) as s:
                s.get_final_message()
        else:
            client.messages.create(**kwargs)


def test_anthropic_vertex_sdk(shared):
    """Claude on Vertex, as JSON (rawPredict) and streamed (streamRawPredict), through the proxy."""
    s = shared.scenario("vertex")
    for stream, (_net, call, ex) in zip((False, True), by_marker(shared.db, s, ["stream=False", "stream=True"], s.net_ids),
                                        strict=True):  # fmt: skip
        assert (call["provider"], call["protocol"], call["model"], call["stream"]) == (
            "vertex", "anthropic", "claude-sonnet-4-5@20250929", int(stream))  # fmt: skip
        assert call["path"].endswith(
            "/publishers/anthropic/models/claude-sonnet-4-5@20250929:"
            + ("streamRawPredict" if stream else "rawPredict")
        )
        assert (call["text_content"], call["input_tokens"]) == (
            ex["expected"]["text"],
            ex["expected"]["input_tokens"],
        )
        assert call["estimated_cost_usd"] is not None  # genai-prices' google table has Claude on Vertex


def mantle_traffic(proxy) -> None:
    client = anthropic.AnthropicBedrockMantle(api_key="bedrock-api-key-SECRET", aws_region="us-east-1",
                                              http_client=http_client(proxy), max_retries=0)  # fmt: skip
    client.messages.create(model="anthropic.claude-haiku-4-5-20251001-v1:0", max_tokens=50,
                           messages=[{"role": "user", "content": "hi"}])  # fmt: skip


def test_bedrock_mantle_sdk(shared):
    s = shared.scenario("mantle")
    (call,) = shared.model_calls(s)
    (ex,) = s.model_exchanges
    assert (call["provider"], call["protocol"], call["model"], call["path"]) == (
        "bedrock", "anthropic", "anthropic.claude-haiku-4-5-20251001-v1:0", "/anthropic/v1/messages")  # fmt: skip
    assert call["text_content"] == ex["expected"]["text"] and call["estimated_cost_usd"] > 0


def ollama_traffic(proxy) -> None:
    client = openai.OpenAI(api_key="ollama", base_url="http://localhost:11434/v1", http_client=http_client(proxy),
                           max_retries=0)  # fmt: skip
    for stream in (False, True):
        result = client.chat.completions.create(
            model="qwen3:8b", messages=[{"role": "user", "content": f"hi stream={stream}"}], stream=stream
        )
        if stream:
            list(result)


def test_ollama_openai_compatible(shared):
    s = shared.scenario("ollama")
    for _net, call, ex in by_marker(shared.db, s, ["stream=False", "stream=True"], s.net_ids):
        assert (call["provider"], call["protocol"], call["model"]) == ("ollama", "openai_chat", "qwen3:8b")
        assert call["text_content"] == ex["expected"]["text"] and call["estimated_cost_usd"] is None


FN_TOOLS = [{"type": "function", "function": {"name": "grep", "description": "search", "parameters": {
    "type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]}}}]  # fmt: skip


def self_hosted_traffic(proxy, server: str, stream: bool) -> list:
    """Two turns of a tool loop; the tool calls of the first."""
    client = openai.OpenAI(api_key="local", base_url="http://gpu-box.lan:8000/v1", http_client=http_client(proxy),
                           max_retries=0, default_headers={"x-emulator": f"server={server}; scenario=thinking"})  # fmt: skip
    messages: list = [{"role": "user", "content": "find TODOs"}]
    kwargs = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}

    def turn() -> tuple[str, list]:
        result = client.chat.completions.create(
            model="Qwen/Qwen3-8B", messages=messages, tools=FN_TOOLS, **kwargs
        )
        if not stream:
            msg = result.choices[0].message
            return msg.content or "", [
                (c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or []
            ]
        calls: dict[int, list[str]] = {}
        text = ""
        for chunk in result:
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for tc in choice.delta.tool_calls or []:
                    call = calls.setdefault(tc.index, ["", "", ""])
                    call[0] = tc.id or call[0]
                    call[1] = (tc.function.name or call[1]) if tc.function else call[1]
                    call[2] += (tc.function.arguments or "") if tc.function else ""
        return text, [tuple(c) for _, c in sorted(calls.items())]

    _, calls = turn()
    asked = [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
        for cid, name, args in calls
    ]
    messages.append({"role": "assistant", "content": None, "tool_calls": asked})
    messages += [{"role": "tool", "tool_call_id": cid, "content": "src/a.py:3: TODO"} for cid, _, _ in calls]
    turn()
    return calls


@pytest.mark.parametrize("server", ["vllm", "llamacpp"])
@pytest.mark.parametrize("stream", [False, True])
def test_self_hosted_servers_tool_loop_with_reasoning(shared, server, stream):
    """vLLM (`reasoning`, chatcmpl-tool ids) and llama.cpp (`reasoning_content`, usage + timings on the
    finish chunk) on a LAN host: thinking, tokens and the tool loop captured, unpriced (no API price)."""
    s = shared.scenario(f"self-hosted {server} {stream}")
    calls = s.result
    assert calls and all(
        cid.startswith("chatcmpl-tool-" if server == "vllm" else "call_") for cid, _, _ in calls
    )
    db = shared.db
    got = shared.model_calls(s)
    exchanges = s.model_exchanges
    assert len(got) == len(exchanges) == 2
    for call, ex in zip(got, exchanges, strict=True):
        want = ex["expected"]
        assert (call["provider"], call["protocol"], call["model"]) == (
            "openai",
            "openai_chat",
            "Qwen/Qwen3-8B",
        )
        assert (call["input_tokens"], call["output_tokens"]) == (want["input_tokens"], want["output_tokens"])
        assert call["thinking_content"] == want["thinking"] and want["thinking"]
        assert (call["text_content"] or "") == want["text"] and call["stop_reason"] == want["stop_reason"]
        assert call["estimated_cost_usd"] is None and call["complete"] == 1
        assert json.loads(call["usage_details"])["raw"] == want["usage_raw"]
        assert_tool_calls(db, call["id"], ex)
    responses = rows(db, "SELECT call_id, model_call_id, content_preview FROM tool_responses "
                         f"WHERE model_call_id IN ({got[0]['id']}, {got[1]['id']}) ORDER BY id")  # fmt: skip
    assert responses == [{"call_id": cid, "model_call_id": got[1]["id"], "content_preview": "src/a.py:3: TODO"}
                         for cid, _, _ in calls]  # fmt: skip
    assert got[0]["trace_id"] == got[1]["trace_id"] is not None
