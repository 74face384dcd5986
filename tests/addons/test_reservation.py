"""The most a request can use (`addons/reservation.py`), per provider's request shape, and what a
budget reserves for it (`pricing/worst.py`)."""

from __future__ import annotations

import json

import pytest

from addons.budgets import Worst, decide
from addons.reservation import (
    OUTPUT_CEILING,
    TOOL_PROMPT_TOKENS,
    UNKNOWN_CONTEXT,
    bound,
    worst_tokens,
    ws_bound,
)
from capsem.settings import Budget
from pricing.worst import rates, worst_cost


def body(obj: dict) -> bytes:
    return json.dumps(obj).encode()


HI = [{"role": "user", "content": "hi ünïcode"}]


@pytest.mark.parametrize(
    ("protocol", "sent", "output", "field"),
    [
        ("anthropic", {"model": "claude-sonnet-4-5", "max_tokens": 2000, "messages": HI}, 2000, "max_tokens"),
        ("openai_chat", {"model": "gpt-4.1", "max_tokens": 300, "messages": HI}, 300, "max_tokens"),
        ("openai_chat", {"model": "o3", "max_completion_tokens": 900, "messages": HI}, 900, "max_completion_tokens"),
        ("openai_chat", {"model": "gpt-4.1", "max_tokens": 300, "n": 3, "messages": HI}, 900, "max_tokens"),
        ("openai_chat", {"model": "gpt-4.1", "messages": HI}, None, "max_tokens"),
        ("openai_responses", {"model": "gpt-5", "max_output_tokens": 700, "input": "hi"}, 700, "max_output_tokens"),
        ("gemini", {"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 512}}, 512,
         "generationConfig.maxOutputTokens"),
        ("gemini", {"contents": [], "generationConfig": {"maxOutputTokens": 512, "candidateCount": 2,
                                                         "thinkingConfig": {"thinkingBudget": 100}}}, 1224,
         "generationConfig.maxOutputTokens"),
        ("gemini", {"model": "gemini-2.5-pro", "request": {"contents": [], "generationConfig": {"maxOutputTokens": 64}}},
         64, "generationConfig.maxOutputTokens"),  # Code Assist wraps the request
        ("ollama", {"model": "llama3", "prompt": "hi", "options": {"num_predict": 128}}, 128, "options.num_predict"),
        ("ollama", {"model": "llama3", "prompt": "hi", "options": {"num_predict": -1}}, None, "options.num_predict"),
    ],
)  # fmt: skip
def test_each_providers_output_limit_and_the_body_bytes_as_the_input_bound(protocol, sent, output, field):
    raw = body(sent)
    found = bound(protocol, raw)
    assert (found.input_tokens, found.output_tokens, found.referenced) == (len(raw), output, None)
    if output is not None:
        assert found.output_field == field
    assert found.model == sent.get("model")


def test_the_input_bound_is_at_least_the_tokens_of_any_text():
    """UTF-8 bytes bound the tokens of every tokenizer (each token is at least one byte)."""
    from pricing.estimate import count_tokens

    text = "naïve café 🎉 " * 200 + "x" * 1000
    raw = body(
        {"model": "claude-sonnet-4-5", "max_tokens": 1, "messages": [{"role": "user", "content": text}]}
    )
    assert bound("anthropic", raw).input_tokens >= len(text.encode()) >= count_tokens(text)


def test_declared_tools_add_the_tool_prompts_allowance():
    tools = [{"name": "read", "input_schema": {"type": "object"}}]
    raw = body({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": HI, "tools": tools})
    assert bound("anthropic", raw).input_tokens == len(raw) + TOOL_PROMPT_TOKENS


@pytest.mark.parametrize(
    ("protocol", "sent", "what"),
    [
        ("openai_responses", {"model": "gpt-5", "previous_response_id": "resp_1", "input": "next"}, "a previous response"),
        ("openai_responses", {"model": "gpt-5", "input": "x", "tools": [{"type": "web_search"}]},
         "the server-side tool web_search"),
        ("anthropic", {"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": HI,
                       "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
         "the server-side tool web_search_20250305"),
        ("anthropic", {"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}, "content by URL"),
        ("openai_chat", {"model": "gpt-4.1", "messages": [{"role": "user", "content": [
            {"type": "file", "file": {"file_id": "file-1"}}]}]}, "a stored file"),
        ("gemini", {"contents": [], "cachedContent": "cachedContents/1"}, "cached content"),
        ("gemini", {"contents": [], "tools": [{"googleSearch": {}}]}, "the server-side tool googleSearch"),
    ],
)  # fmt: skip
def test_content_the_body_does_not_hold_is_bounded_by_the_context_window(protocol, sent, what):
    found = bound(protocol, body(sent))
    assert found.referenced == what
    assert worst_tokens(found, 200_000, None)[0] == 200_000
    assert worst_tokens(found, None, None)[0] == UNKNOWN_CONTEXT


def test_inline_images_and_quoted_keys_in_text_are_not_references():
    inline = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    said = 'the JSON was {"file_id": "f", "url": "https://x"}'
    for content in (inline, said):
        raw = body({"model": "gpt-4.1", "max_tokens": 5, "messages": [{"role": "user", "content": content}]})
        assert bound("openai_chat", raw).referenced is None


def test_a_websocket_turn_reads_its_fields_at_top_level_or_under_response():
    top = body({"type": "response.create", "model": "gpt-5", "max_output_tokens": 40, "input": "hi"})
    nested = body({"type": "response.create", "response": {"model": "gpt-5", "max_output_tokens": 40,
                                                           "previous_response_id": "resp_1"}})  # fmt: skip
    assert (ws_bound(top).model, ws_bound(top).output_tokens, ws_bound(top).referenced) == ("gpt-5", 40, None)
    assert (ws_bound(nested).model, ws_bound(nested).output_tokens) == ("gpt-5", 40)
    assert ws_bound(nested).referenced == "a previous response"


def test_a_body_that_streams_upstream_unread():
    assert bound("anthropic", None, size=5000).input_tokens == 5000
    assert bound("anthropic", None).referenced == "a body that streams upstream unread"
    assert bound("anthropic", b"not json").input_tokens == 8  # unreadable: its bytes, no output limit


def test_without_an_output_limit_the_ceiling_or_the_budgets_choice():
    found = bound("openai_chat", body({"model": "gpt-4.1", "messages": HI}))
    assert worst_tokens(found, 1_000_000, None)[1] == OUTPUT_CEILING
    assert worst_tokens(found, 8192, None)[1] == 8192  # a smaller context window bounds it
    assert worst_tokens(found, 1_000_000, 4096)[1:] == (
        4096,
        "reserve_output_tokens, as it sets no output limit",
    )


def test_the_worst_price_is_the_dearest_input_class_and_the_output_price():
    sonnet = rates("anthropic", "claude-sonnet-4-5")
    assert sonnet is not None
    # 1-hour cache writes: twice the $3 input price; output $15 / M
    assert worst_cost(sonnet, 1000, 1000) == pytest.approx(1000 * 6e-6 + 1000 * 15e-6)
    gpt = rates("openai", "gpt-4.1")
    assert gpt is not None and worst_cost(gpt, 1000, 1000) == pytest.approx(1000 * 2e-6 + 1000 * 8e-6)
    assert rates("openai", "capsem-unpriced-model") is None and rates("ollama", "llama3") is None
    assert rates("anthropic", "claude-sonnet-4-5") is sonnet  # cached


def test_spend_plus_reserved_plus_this_call_never_passes_the_limit():
    run = Budget("run", "session", 1.0, warn_at=None)
    worst = Worst(0.4, "m", 10, 10, "its max_tokens")

    def verdict(spent: float, held: float, w: Worst = worst, budget: Budget = run):
        return decide([budget], "anthropic", "m", "h", lambda b: spent, reserved_of=lambda b: held, worst=w)

    assert verdict(0.2, 0.4).decision == "allowed"  # 0.2 + 0.4 + 0.4 = 1.0: exactly at the limit
    refused = verdict(0.2, 0.5)
    assert refused.decision == "denied" and refused.rule == "budget:run"
    assert refused.message.startswith(
        "capsem budget 'run' cannot cover this call: it could cost up to $0.4000"
    )
    unpriced = verdict(0.0, 0.0, Worst(None, "llama3"))
    assert unpriced.decision == "denied" and "budgets.run.on_unpriced: allow" in unpriced.message
    allow = Budget("run", "session", 1.0, on_unpriced="allow")
    let = verdict(0.0, 0.0, Worst(None, "llama3"), allow)
    assert (let.decision, let.rule) == ("warned", "budget:run (unpriced)")
