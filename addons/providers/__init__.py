"""Which flows are model calls, who serves them, and which parser reads them.

`detect()` looks at host and path only (cheap, on the event loop): a known provider host
gives the provider; the path gives the protocol. A model-call path on an unknown host (a
company gateway, a local server) is attributed to the protocol's own vendor, so a relay of
the real API is still priced and an unknown model simply stays unpriced. Non-model
endpoints (`/v1/models`, `count_tokens`, batches...) are not model calls: they only get a
`net_events` row.

The proxy side decides a flow's route and framing with this module alone, so it imports no
parser: `parser_for` loads a protocol's module the first time the recorder asks for it.

Each protocol module holds only wire knowledge: it parses requests, and turns a response
(stream events or a whole body) into the neutral events of `events.py`; `collect.py` builds
every `ResponseSummary` from them, and `base.GuardedParser` keeps every entry point from raising.
"""

from __future__ import annotations

import importlib
import re
from functools import cache, lru_cache
from typing import TYPE_CHECKING
from urllib.parse import unquote

from addons.messages import Route

if TYPE_CHECKING:  # the parsers load only when `parser_for` asks (never in mitmdump's process)
    from addons.providers.base import ProtocolParser

__all__ = [
    "Route", "detect", "is_event_stream", "media_type", "parser_for", "provider_for_host", "stream_framing",
    "websocket_route",
]  # fmt: skip

# host (exact, or a suffix after a dot) -> provider. One line per known host.
_KNOWN_HOSTS: dict[str, str] = {
    "api.anthropic.com": "anthropic",
    "api.openai.com": "openai",
    "openrouter.ai": "openrouter",
    "api.deepseek.com": "deepseek",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral",
    "api.x.ai": "xai",
    "openai.azure.com": "azure",
    "generativelanguage.googleapis.com": "google",
    "cloudcode-pa.googleapis.com": "google",
    "daily-cloudcode-pa.googleapis.com": "google",
    "aiplatform.googleapis.com": "vertex",
}
# hosts with a variable part (regions): (pattern, provider), and local servers by port
_HOST_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"bedrock-(?:runtime|mantle)(?:-fips)?\.[a-z0-9-]+\.(?:amazonaws\.com|api\.aws)"), "bedrock"),
]
_LOCAL_PORTS: dict[int, str] = {11434: "ollama"}
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0"})

# (protocol, provider when the host is unknown, path pattern). First match wins, so put
# specific patterns before general ones. A named group `model` takes the model from the URL.
_ROUTES: list[tuple[str, str, re.Pattern[str]]] = [
    ("anthropic", "anthropic", re.compile(r"(?:^|/)v1/messages/?$")),
    # Anthropic models on Bedrock (InvokeModel; eventstream when streamed) and on Vertex AI
    (
        "anthropic",
        "bedrock",
        re.compile(r"/model/(?P<model>[^/]*(?:anthropic|claude)[^/]*)/invoke(?:-with-response-stream)?/?$"),
    ),
    (
        "anthropic",
        "vertex",
        re.compile(
            r"/publishers/anthropic/models/(?!count-tokens:)(?P<model>[^/:]+):(?:streamR|r)awPredict$"
        ),
    ),
    ("openai_chat", "azure", re.compile(r"/openai/deployments/(?P<model>[^/]+)/chat/completions/?$")),
    ("openai_chat", "openai", re.compile(r"(?:^|/)(?:v1/)?chat/completions/?$")),
    ("openai_responses", "openai", re.compile(r"(?:^|/)(?:v1/)?responses/?$")),
    ("gemini", "google", re.compile(r"/models/(?P<model>[^/:]+):(?:stream)?[gG]enerateContent$")),
    ("gemini", "google", re.compile(r"/v1internal:(?:stream)?[gG]enerateContent$")),
    ("ollama", "ollama", re.compile(r"(?:^|/)api/(?:chat|generate)/?$")),
]

# Parsers by protocol name: module path and class name. One line per protocol.
_PARSERS: dict[str, tuple[str, str]] = {
    "anthropic": ("addons.providers.anthropic", "AnthropicMessages"),
    "openai_chat": ("addons.providers.openai_chat", "OpenAIChat"),
    "openai_responses": ("addons.providers.openai_responses", "OpenAIResponses"),
    "gemini": ("addons.providers.gemini", "Gemini"),
    "ollama": ("addons.providers.ollama", "Ollama"),
}


@lru_cache(maxsize=1024)  # an agent talks to a few hosts: each is matched once, not per request
def provider_for_host(host: str, port: int | None = None) -> str | None:
    host = host.lower().rstrip(".")
    if port in _LOCAL_PORTS and host in _LOCAL_HOSTS:
        return _LOCAL_PORTS[port]
    for pattern, provider in _HOST_PATTERNS:
        if pattern.fullmatch(host):
            return provider
    if host in _KNOWN_HOSTS:
        return _KNOWN_HOSTS[host]
    for known, provider in _KNOWN_HOSTS.items():
        if host.endswith("." + known):
            return provider
    if host.endswith("-aiplatform.googleapis.com"):  # regional Vertex AI: us-central1-aiplatform...
        return "vertex"
    return None


@lru_cache(maxsize=1024)  # (a `Route` is immutable: shared by the requests of one shape)
def detect(host: str, path: str, method: str, port: int | None = None) -> Route | None:
    """The route of a model call, or None when the flow is not a model call."""
    if method.upper() != "POST":
        return None
    path = path.split("?", 1)[0]
    for protocol, vendor, pattern in _ROUTES:
        match = pattern.search(path)
        if match:
            model = match.groupdict().get("model")
            return Route(provider_for_host(host, port) or vendor, protocol, unquote(model) if model else None)
    return None


@cache
def parser_for(protocol: str) -> ProtocolParser:
    """The (stateless, shared) parser of a protocol."""
    module, name = _PARSERS[protocol]
    return getattr(importlib.import_module(module), name)()


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_event_stream(content_type: str | None) -> bool:
    return media_type(content_type) == "text/event-stream"


_FRAMING_BY_TYPE = {
    "text/event-stream": "sse",
    "application/x-ndjson": "ndjson",
    "application/jsonl": "ndjson",
    "application/vnd.amazon.eventstream": "eventstream",
}


def stream_framing(protocol: str, content_type: str | None, path: str) -> str | None:
    """How a response of this protocol is framed when streamed, or None for a whole body.

    The content type decides, except for Gemini: without `alt=sse`, `:streamGenerateContent`
    streams a JSON array as plain `application/json`.
    """
    if (
        protocol == "gemini"
        and "streamGenerateContent" in path
        and "event-stream" not in (content_type or "")
    ):
        return "json-array"
    return _FRAMING_BY_TYPE.get(media_type(content_type))


WEBSOCKET_PROTOCOL = "openai_responses"
"""The only model API spoken over a WebSocket (Responses: Codex CLI)."""


def websocket_route(host: str) -> Route:
    """The route of the model calls (turns) on a WebSocket to `host`."""
    return Route(provider_for_host(host) or "openai", WEBSOCKET_PROTOCOL)
