"""OpenAI-compatible providers through real mitmdump with the real openai SDK: provider, model,
tokens and cost per host (NULL when genai-prices does not know the model), OpenRouter's own cost."""

from __future__ import annotations

import json

import openai
import pytest

from tests.conftest import rows
from tests.e2e.test_capture_sdk import finish, http_client, model_exchanges

KEY = "sk-compat-e2eSECRET000000000000000000"


@pytest.fixture
def proxy(mitmdump, emu):
    return mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)


@pytest.mark.parametrize(
    ("base_url", "provider", "model", "priced"),
    [
        ("https://openrouter.ai/api/v1", "openrouter", "anthropic/claude-sonnet-4.5", True),
        ("https://api.deepseek.com/v1", "deepseek", "deepseek-chat", True),
        ("https://api.groq.com/openai/v1", "groq", "llama-3.3-70b-versatile", True),
        ("https://api.mistral.ai/v1", "mistral", "mistral-large-latest", True),
        ("https://api.x.ai/v1", "xai", "grok-4", True),
        ("https://res.openai.azure.com/openai/v1", "azure", "gpt-4o", True),
        ("https://api.x.ai/v1", "xai", "grok-private-fork-9", False),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_compatible_hosts(proxy, emu, capsem_home, base_url, provider, model, priced, stream):
    client = openai.OpenAI(api_key=KEY, base_url=base_url, http_client=http_client(proxy), max_retries=0)
    kwargs = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    result = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], **kwargs
    )
    if stream:
        list(result)
    db = finish(proxy, capsem_home)
    (call,) = rows(db, "SELECT * FROM model_calls")
    (ex,) = model_exchanges(emu)
    assert (call["provider"], call["protocol"], call["model"]) == (provider, "openai_chat", model)
    assert (
        call["input_tokens"] == ex["expected"]["input_tokens"]
        and call["text_content"] == ex["expected"]["text"]
    )
    assert (call["estimated_cost_usd"] is not None) == priced
    details = json.loads(call["usage_details"])
    if provider == "openrouter":
        assert details["provider_cost"] == ex["expected"]["usage_raw"]["cost"] > 0


def test_azure_deployment_path(proxy, emu, capsem_home):
    client = openai.AzureOpenAI(api_key=KEY, azure_endpoint="https://res.openai.azure.com", api_version="2024-10-21",
                                azure_deployment="prod-gpt4o", http_client=http_client(proxy), max_retries=0)  # fmt: skip
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    db = finish(proxy, capsem_home)
    (call,) = rows(db, "SELECT * FROM model_calls")
    assert (call["provider"], call["model"], call["path"]) == (
        "azure",
        "gpt-4o",
        "/openai/deployments/prod-gpt4o/chat/completions",
    )
    assert call["estimated_cost_usd"] > 0
    (net,) = rows(db, "SELECT query, request_headers FROM net_events")
    assert "api-version=2024-10-21" in net["query"] and KEY not in net["request_headers"]
