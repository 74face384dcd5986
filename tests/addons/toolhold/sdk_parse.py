"""What the real SDKs make of an answer: each provider's own stream parser over given bytes.

The SDK clients talk to an `httpx.MockTransport` that answers with the bytes under test, so the
parsing is the SDK's own (its SSE decoder, its stream accumulator), with no network.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx


def _transport(body: bytes, content_type: str) -> httpx.MockTransport:
    return httpx.MockTransport(
        lambda request: httpx.Response(200, headers={"content-type": content_type}, content=body)
    )


def anthropic_final(body: bytes) -> Any:
    """The `Message` the anthropic SDK's `messages.stream` accumulates from an SSE answer."""
    import anthropic

    client = anthropic.Anthropic(
        api_key="k", http_client=httpx.Client(transport=_transport(body, "text/event-stream"))
    )
    with client.messages.stream(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
    ) as stream:
        return stream.get_final_message()


def anthropic_json(body: bytes) -> Any:
    import anthropic

    client = anthropic.Anthropic(
        api_key="k", http_client=httpx.Client(transport=_transport(body, "application/json"))
    )
    return client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}])


def _openai(body: bytes, content_type: str) -> Any:
    import openai

    return openai.OpenAI(api_key="k", http_client=httpx.Client(transport=_transport(body, content_type)))


def chat_final(body: bytes) -> Any:
    """The `ChatCompletion` the openai SDK's `chat.completions.stream` accumulates."""
    with _openai(body, "text/event-stream").chat.completions.stream(
        model="m", messages=[{"role": "user", "content": "x"}]
    ) as stream:
        for _ in stream:
            pass
        return stream.get_final_completion()


def chat_json(body: bytes) -> Any:
    return _openai(body, "application/json").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}]
    )


def responses_final(body: bytes) -> Any:
    """The `Response` the openai SDK's `responses.stream` accumulates."""
    with _openai(body, "text/event-stream").responses.stream(model="m", input="x") as stream:
        for _ in stream:
            pass
        return stream.get_final_response()


def responses_json(body: bytes) -> Any:
    return _openai(body, "application/json").responses.create(model="m", input="x")


def responses_events(messages: list[bytes]) -> Any:
    """WebSocket messages (one event each) read as the SDK reads SSE events."""
    return responses_final(
        b"".join(b"event: " + json.loads(m)["type"].encode() + b"\ndata: " + m + b"\n\n" for m in messages)
    )


def gemini_chunks(body: bytes) -> list[Any]:
    """google-genai's `GenerateContentResponse` of each `alt=sse` chunk."""
    from google.genai import types

    from addons.toolhold.sse import data_of, split_events

    buffer = bytearray(body)
    out = []
    for raw in split_events(buffer, final=True):
        data = data_of(raw)
        if data:  # the fixture's thought signatures are cut short (not base64): left out
            out.append(
                types.GenerateContentResponse.model_validate_json(
                    re.sub(rb',\s*"thoughtSignature":\s*"[^"]*"', b"", data)
                )
            )
    return out
