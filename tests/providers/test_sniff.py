"""Detection: host and path routes (compatible hosts, Azure, Ollama, Bedrock, Vertex), and
body-shape sniffing for unknown paths; non-model endpoints stay net_events-only."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from addons.providers import Route, detect, provider_for_host
from addons.providers.sniff import MAX_SNIFF_BYTES, sniff_route

JSON = "application/json"


@pytest.mark.parametrize(
    ("host", "port", "path", "want"),
    [
        ("openrouter.ai", 443, "/api/v1/chat/completions", Route("openrouter", "openai_chat")),
        ("api.deepseek.com", 443, "/chat/completions", Route("deepseek", "openai_chat")),
        ("api.groq.com", 443, "/openai/v1/chat/completions", Route("groq", "openai_chat")),
        ("api.mistral.ai", 443, "/v1/chat/completions", Route("mistral", "openai_chat")),
        ("api.x.ai", 443, "/v1/chat/completions", Route("xai", "openai_chat")),
        ("res.openai.azure.com", 443, "/openai/v1/chat/completions", Route("azure", "openai_chat")),
        ("res.openai.azure.com", 443, "/openai/deployments/prod%2D4o/chat/completions",
         Route("azure", "openai_chat", "prod-4o")),
        ("localhost", 11434, "/v1/chat/completions", Route("ollama", "openai_chat")),
        ("127.0.0.1", 11434, "/api/chat", Route("ollama", "ollama")),
        ("gpu-box.lan", 11434, "/api/generate", Route("ollama", "ollama")),
        ("localhost", 8000, "/v1/chat/completions", Route("openai", "openai_chat")),  # vLLM etc.: the protocol's vendor
        ("bedrock-runtime.us-east-1.amazonaws.com", 443,
         "/model/anthropic.claude-3-5-sonnet-20241022-v2:0/invoke",
         Route("bedrock", "anthropic", "anthropic.claude-3-5-sonnet-20241022-v2:0")),
        ("bedrock-runtime.eu-west-3.amazonaws.com", 443,
         "/model/arn%3Aaws%3Abedrock%3Aeu-west-3%3A1%3Ainference-profile%2Feu.anthropic.claude-haiku-4-5-v1%3A0"
         "/invoke-with-response-stream",
         Route("bedrock", "anthropic", "arn:aws:bedrock:eu-west-3:1:inference-profile/eu.anthropic.claude-haiku-4-5-v1:0")),
        ("bedrock-runtime.us-east-1.amazonaws.com", 443, "/model/amazon.nova-pro-v1:0/invoke", None),
        ("bedrock-runtime.us-east-1.amazonaws.com", 443, "/model/anthropic.claude-x/converse", None),
        ("bedrock-mantle.us-east-1.api.aws", 443, "/anthropic/v1/messages", Route("bedrock", "anthropic")),
        ("us-east5-aiplatform.googleapis.com", 443,
         "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict",
         Route("vertex", "anthropic", "claude-sonnet-4-5@20250929")),
        ("aiplatform.googleapis.com", 443,
         "/v1/projects/p/locations/global/publishers/anthropic/models/claude-opus-4-1:rawPredict",
         Route("vertex", "anthropic", "claude-opus-4-1")),
        ("aiplatform.googleapis.com", 443,
         "/v1/projects/p/locations/global/publishers/anthropic/models/count-tokens:rawPredict", None),
    ],
)  # fmt: skip
def test_detect_routes(host, port, path, want):
    assert detect(host, path, "POST", port) == want


def test_host_patterns_are_exact():
    assert provider_for_host("bedrock-runtime-fips.us-gov-west-1.amazonaws.com") == "bedrock"
    assert provider_for_host("s3.us-east-1.amazonaws.com") is None
    assert provider_for_host("evil-bedrock-runtime.us-east-1.amazonaws.com.example") is None
    assert provider_for_host("localhost", 8080) is None and provider_for_host("example.com", 11434) is None


@pytest.mark.parametrize("path", ["/v1/models", "/v1/messages/count_tokens", "/v1/messages/batches", "/v1/embeddings",
                                  "/health", "/oauth/token", "/v1/chat/completions/abc"])  # fmt: skip
def test_non_model_endpoints_are_not_routes(path):
    assert detect("api.openai.com", path, "POST", 443) is None
    assert detect("api.openai.com", "/v1/chat/completions", "GET", 443) is None


def sniff(body, path="/custom/llm", host="llm.corp.example", ctype=JSON, enc=None, port=443):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return sniff_route(host, path, ctype, enc, raw, port=port)


MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "protocol"),
    [
        ({"model": "claude-haiku-4-5", "messages": MSG}, "anthropic"),
        ({"max_tokens": 10, "system": "s", "messages": MSG}, "anthropic"),  # Bedrock-style: no model
        ({"model": "local-llama", "messages": MSG, "stream_options": {"include_usage": True}}, "openai_chat"),
        ({"model": "gpt-4.1", "input": "hi"}, "openai_responses"),
        ({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, "gemini"),
        ({"generationConfig": {"temperature": 0}, "contents": "x"}, "gemini"),
    ],
)
def test_body_shapes(body, protocol):
    assert sniff(body) == Route("unknown", protocol)


def test_known_host_or_local_port_names_the_provider():
    assert sniff({"model": "m", "messages": MSG}, host="api.groq.com") == Route("groq", "openai_chat")
    assert sniff({"model": "m", "messages": MSG}, host="localhost", port=11434) == Route(
        "ollama", "openai_chat"
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"path": "/v1/embeddings"},
        {"path": "/v1/messages/count_tokens"},
        {"path": "/api/batch"},
        {"path": "/v1/models"},
        {"path": "/healthz"},
        {"path": "/auth/login"},
        {"ctype": "text/plain"},
        {"ctype": None},
        {"enc": "gzip"},
    ],
)
def test_not_sniffed(kwargs):
    assert sniff({"model": "claude-x", "messages": MSG}, **kwargs) is None


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[1,2]", b'"str"', {"model": "m"}, {"messages": MSG}, {"input": "x"},
     {"model": 5, "messages": MSG}, {"messages": "no list", "model": "m"}],
)  # fmt: skip
def test_other_bodies_are_not_model_calls(body):
    assert sniff(body) is None


def test_big_bodies_are_not_parsed():
    body = json.dumps({"model": "m", "messages": MSG, "pad": "x" * MAX_SNIFF_BYTES}).encode()
    assert sniff(body) is None


@given(st.binary(max_size=300), st.text(max_size=30), st.sampled_from([JSON, None, "text/html"]))
def test_never_raises(body, path, ctype):
    sniff_route("h", "/" + path, ctype, None, body, port=1)
