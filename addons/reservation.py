"""The most a model call can use, in tokens, read from its request before it goes upstream (pure).

A budget reserves each call's most expensive outcome before letting it through
(`addons/budgets.py`); `bound()` gives the tokens, the price table the dollars
(`pricing/worst.py`). The bound, per call:

- input: at most the length of the request body in bytes (decoded, as JSON), plus
  `TOOL_PROMPT_TOKENS` when it declares tools. Every tokenizer the providers use (byte-level BPE,
  SentencePiece with byte fallback) makes each token of at least one byte of text, and the body
  holds every text of the prompt (JSON escapes only add bytes) and the structure the providers'
  per-message framing tokens stand for; the allowance covers the tool-use system prompt a provider
  adds (Anthropic: 245 to ~1,000 tokens). Bytes, not a tokenizer's count: an exact bound, and a
  length costs nothing on mitmproxy's event loop, where a tokenizer would take milliseconds per
  large prompt (the slack is about 4x for English text, less for code and other scripts).
  A request that brings in content its body does not hold (`referenced` says what: a previous
  response, a stored file or an image by URL, a server-side tool such as web search) is bounded by
  the model's context window instead.
- output: the request's own limit (Anthropic `max_tokens`, OpenAI Chat `max_completion_tokens`
  or `max_tokens` times `n`, Responses `max_output_tokens`, Gemini
  `generationConfig.maxOutputTokens` plus an explicit `thinkingBudget`, times `candidateCount`,
  Ollama `options.num_predict`), or None when it sets none (the budget then reserves
  `reserve_output_tokens`, by default the model's context window).

msgspec decodes only these fields (the rest is skipped at C speed, as `model_of` does).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from addons.budgets import Worst
from capsem.settings import Budget

TOOL_PROMPT_TOKENS = 2048
"""Input tokens allowed beyond the body when a request declares tools: the tool-use system prompt
a provider adds (Anthropic: 346 tokens for custom tools, up to ~1,000 with its bash, text editor
and computer tools)."""


@dataclass(frozen=True, slots=True)
class Bound:
    """The tokens a call can use at most, as its request says."""

    model: str | None
    input_tokens: int
    """Upper bound on the input tokens from the body (see `referenced`)."""
    output_tokens: int | None
    """The output limit the request sets (times its number of choices), None: none."""
    output_field: str | None = None
    """Which field set it (for the refusal's message)."""
    referenced: str | None = None
    """What the request brings in that its body does not hold; the input is then bounded by the
    model's context window."""


class _Tool(msgspec.Struct):
    type: str | None = None


class _Anthropic(msgspec.Struct):
    model: str | None = None
    max_tokens: int | None = None
    tools: list[_Tool] | None = None
    mcp_servers: list[Any] | None = None


class _Chat(msgspec.Struct):
    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = None
    tools: list[_Tool] | None = None
    web_search_options: Any = None


class _Responses(msgspec.Struct):
    model: str | None = None
    max_output_tokens: int | None = None
    previous_response_id: str | None = None
    conversation: Any = None
    prompt: Any = None
    tools: list[_Tool] | None = None


class _WsCreate(_Responses):
    response: _Responses | None = None


class _Thinking(msgspec.Struct):
    thinkingBudget: int | None = None
    thinking_budget: int | None = None


class _GenerationConfig(msgspec.Struct):
    maxOutputTokens: int | None = None
    max_output_tokens: int | None = None
    candidateCount: int | None = None
    candidate_count: int | None = None
    thinkingConfig: _Thinking | None = None
    thinking_config: _Thinking | None = None


class _GeminiRequest(msgspec.Struct):
    generationConfig: _GenerationConfig | None = None
    generation_config: _GenerationConfig | None = None
    cachedContent: str | None = None
    cached_content: str | None = None
    tools: list[dict[str, Any]] | None = None


class _Gemini(_GeminiRequest):
    model: str | None = None
    request: _GeminiRequest | None = None
    """Code Assist (`/v1internal:generateContent`) wraps the request."""


class _OllamaOptions(msgspec.Struct):
    num_predict: int | None = None


class _Ollama(msgspec.Struct):
    model: str | None = None
    options: _OllamaOptions | None = None
    tools: list[Any] | None = None


_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    "anthropic": msgspec.json.Decoder(_Anthropic),
    "openai_chat": msgspec.json.Decoder(_Chat),
    "openai_responses": msgspec.json.Decoder(_Responses),
    "gemini": msgspec.json.Decoder(_Gemini),
    "ollama": msgspec.json.Decoder(_Ollama),
}
_WS = msgspec.json.Decoder(_WsCreate)

_CLIENT_TOOLS = ("function", "custom", "local_shell", "shell", "apply_patch", "computer", "bash_", "text_editor_",
                 "memory_")  # fmt: skip
"""Tool types the client runs (their results come back in a later request's body); any other typed
tool runs at the provider (web search, code execution, file search, MCP connectors) and brings in
input the request does not hold."""
_FILE_KEYS = (b'"file_id"', b'"fileUri"', b'"file_uri"', b'"file_url"')
_URL_VALUE = re.compile(rb'\s*:\s*"https?:')


def _limit(*values: int | None) -> int | None:
    given = [v for v in values if v is not None and v >= 0]
    return max(given) if given else None


def _server_tool(tools: list[_Tool] | None) -> str | None:
    for tool in tools or ():
        if tool.type and not tool.type.startswith(_CLIENT_TOOLS):
            return f"the server-side tool {tool.type}"
    return None


def _nested_reference(body: bytes) -> str | None:
    """A stored file or a URL the body points at (byte searches: JSON text escapes its quotes, so
    a prompt that mentions these keys does not match)."""
    for key in _FILE_KEYS:
        if key in body:
            return "a stored file"
    at = body.find(b'url"')
    while at != -1:
        if _URL_VALUE.match(body, at + 4):
            return "content by URL"
        at = body.find(b'url"', at + 4)
    return None


def _anthropic(r: _Anthropic) -> tuple[str | None, int | None, str, str | None]:
    referenced = "an MCP server" if r.mcp_servers else _server_tool(r.tools)
    return r.model, _limit(r.max_tokens), "max_tokens", referenced


def _chat(r: _Chat) -> tuple[str | None, int | None, str, str | None]:
    limit = _limit(r.max_tokens, r.max_completion_tokens)
    if limit is not None and r.n is not None and r.n > 1:
        limit *= r.n
    field = "max_completion_tokens" if r.max_completion_tokens is not None else "max_tokens"
    referenced = "web search" if r.web_search_options is not None else _server_tool(r.tools)
    return r.model, limit, field, referenced


def _responses(r: _Responses) -> tuple[str | None, int | None, str, str | None]:
    referenced = (
        "a previous response" if r.previous_response_id
        else "a stored conversation" if r.conversation is not None
        else "a stored prompt" if isinstance(r.prompt, dict)
        else _server_tool(r.tools)
    )  # fmt: skip
    return r.model, _limit(r.max_output_tokens), "max_output_tokens", referenced


def _gemini(r: _Gemini) -> tuple[str | None, int | None, str, str | None]:
    inner: _GeminiRequest = r.request or r
    config = inner.generationConfig or inner.generation_config or _GenerationConfig()
    limit = _limit(config.maxOutputTokens, config.max_output_tokens)
    thinking = config.thinkingConfig or config.thinking_config
    budget = _limit(thinking.thinkingBudget, thinking.thinking_budget) if thinking else None
    if limit is not None and budget:  # documented apart from maxOutputTokens: both, to be safe
        limit += budget
    count = config.candidateCount or config.candidate_count
    if limit is not None and count is not None and count > 1:
        limit *= count
    referenced = "cached content" if inner.cachedContent or inner.cached_content else None
    for tool in inner.tools or ():
        if referenced is None and any(
            k not in ("functionDeclarations", "function_declarations") for k in tool
        ):
            referenced = f"the server-side tool {next(iter(tool))}"
    return r.model, limit, "generationConfig.maxOutputTokens", referenced


def _ollama(r: _Ollama) -> tuple[str | None, int | None, str, str | None]:
    predict = r.options.num_predict if r.options else None
    return r.model, predict if predict is not None and predict > 0 else None, "options.num_predict", None


_READERS = {"anthropic": _anthropic, "openai_chat": _chat, "openai_responses": _responses, "gemini": _gemini,
            "ollama": _ollama}  # fmt: skip


def bound(protocol: str, body: bytes | None, *, size: int | None = None) -> Bound:
    """The tokens a request of `protocol` can use at most. `body`: its decoded body; None when it
    streams upstream unread (`size`: its length from the headers, None if unknown or encoded)."""
    if body is None:
        return Bound(
            None, size or 0, None, referenced=None if size else "a body that streams upstream unread"
        )
    decoder = _DECODERS.get(protocol)
    try:
        request = decoder.decode(body) if decoder is not None else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        request = None
    if request is None:
        return Bound(None, len(body), None)
    model, output, field, referenced = _READERS[protocol](request)
    tools = TOOL_PROMPT_TOKENS if getattr(request, "tools", None) or b'"functionDeclarations"' in body else 0
    return Bound(model, len(body) + tools, output, field, referenced or _nested_reference(body))


def ws_bound(content: bytes) -> Bound:
    """The tokens a `response.create` on a WebSocket can use at most (a Responses request, its
    fields at top level or under `response`)."""
    try:
        message = _WS.decode(content)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return Bound(None, len(content), None)
    model, output, field, referenced = _responses(message.response or message)
    model = model or message.model
    tools = TOOL_PROMPT_TOKENS if (message.response or message).tools else 0
    return Bound(model, len(content) + tools, output, field, referenced or _nested_reference(content))


OUTPUT_CEILING = 131_072
"""Output tokens reserved for a call that sets no output limit, when the budget sets no
`reserve_output_tokens`, at most (fewer when the model's context window is smaller): above the
largest output limit the providers document today (128,000: gpt-5, Claude's 128k-output beta;
Gemini 2.5: 65,536)."""
UNKNOWN_CONTEXT = 2_000_000
"""The input bound of a call that brings in content by reference when the price table gives no
context window for its model: the largest context window in the table (Gemini, Grok)."""


def worst_tokens(b: Bound, context_window: int | None, reserve_output: int | None) -> tuple[int, int, str]:
    """(input tokens, output tokens, where the output bound comes from) to reserve for a call:
    `context_window` from the price table, `reserve_output` the budgets' `reserve_output_tokens`."""
    input_tokens = max(b.input_tokens, context_window or UNKNOWN_CONTEXT) if b.referenced else b.input_tokens
    if b.output_tokens is not None:
        return input_tokens, b.output_tokens, f"its {b.output_field}"
    if reserve_output is not None:
        return input_tokens, reserve_output, "reserve_output_tokens, as it sets no output limit"
    output = min(context_window or OUTPUT_CEILING, OUTPUT_CEILING)
    return input_tokens, output, "the model's output ceiling, as it sets no output limit"


def worst_of(matched: Iterable[Budget], tokens: Bound, model: str | None, rates: Any,
             price: Callable[[Any, int, int], float]) -> Worst:  # fmt: skip
    """The reservation of a call the `matched` budgets check: its tokens (`tokens`, the largest
    `reserve_output_tokens` among them), priced by `price(rates, input, output)` (`pricing/worst.py`);
    `rates` None: its model has no price."""
    window = rates.context_window if rates is not None else None
    choices = {b.reserve_output_tokens for b in matched}
    inputs, outputs, why = max((worst_tokens(tokens, window, r) for r in choices), key=lambda t: t[1])
    usd = price(rates, inputs, outputs) if rates is not None else None
    return Worst(usd, model, inputs, outputs, why, tokens.referenced)
