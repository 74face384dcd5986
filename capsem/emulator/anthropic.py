"""Anthropic Messages (`POST /v1/messages`) as the real API sends it.

Streams: `event:` lines equal to the JSON `type`, trailing-space padding on JSON objects,
`ping` after the first content block start, `message_start` usage with a placeholder
`output_tokens`, cumulative `message_delta` usage that repeats input and cache fields.
"""

from __future__ import annotations

import json
import time
from typing import Any

from capsem.emulator import asks
from capsem.emulator.reply import Reply, Request, base_expected, json_reply, sse
from capsem.emulator.script import fragments, ident, plan, rng_for, seed_of

_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
           404: "not_found_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}  # fmt: skip
REDACTED = "[redacted thinking]"


def _trailing_results(messages: list[Any]) -> list[str]:
    last = max(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
        default=-1,
    )
    out = []
    for m in messages[last + 1 :]:
        if isinstance(m, dict) and isinstance(m.get("content"), list):
            for b in m["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    c = b.get("content")
                    out.append(c if isinstance(c, str) else json.dumps(c))
    return out


def error_body(status: int, request_id: str) -> tuple[dict, str]:
    etype = _ERRORS.get(status, "api_error")
    message = "Overloaded" if status == 529 else f"emulated {etype}"
    return {"type": "error", "error": {"type": etype, "message": message},
            "request_id": request_id}, etype  # fmt: skip


def _prompt_chars(req: dict[str, Any]) -> int:
    messages = req.get("messages") if isinstance(req.get("messages"), list) else []
    return len(json.dumps([req.get("system"), messages, req.get("tools")], ensure_ascii=False))


def count_tokens(req: dict[str, Any]) -> int:
    """`/v1/messages/count_tokens`: the same (uncached) input count a Messages call would report."""
    return max(1, _prompt_chars(req) // 4)


def _error(status: int, request_id: str, headers: list[tuple[str, str]], exp: dict[str, Any]) -> Reply:
    """scenario=error: the API's error body, with its retry and rate-limit headers."""
    obj, etype = error_body(status, request_id)
    exp["error_type"] = etype
    extra = [("retry-after", "1"), ("x-should-retry", "false")] if status in (429, 529) else []
    if status == 429:
        reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))
        extra += [("anthropic-ratelimit-requests-limit", "50"), ("anthropic-ratelimit-requests-remaining", "0"),
                  ("anthropic-ratelimit-requests-reset", reset)]  # fmt: skip
    return json_reply(status, obj, headers=headers + extra, expected=exp)


def handle(request: Request) -> Reply:
    body, req, controls = request.body, request.json, request.controls
    model = req.get("model")
    messages = req.get("messages") if isinstance(req.get("messages"), list) else []
    tools = [(t.get("name"), t.get("input_schema")) for t in req.get("tools") or [] if isinstance(t, dict)]
    body = seed_of(body, controls, [model, messages, [t[0] for t in tools]])
    rng = rng_for(body)
    stream = req.get("stream") is True
    exp = base_expected("anthropic", model, stream)
    request_id = ident(rng, "req_011C", 20)
    headers = [("request-id", request_id), ("anthropic-organization-id", "org-emulator")]
    if controls.get("scenario", "auto") == "error":
        return _error(int(controls.get("status", "429")), request_id, headers, exp)
    results = _trailing_results(messages)
    p = plan(body=body, controls=controls, declared=tools, has_results=bool(results), result_texts=results,
             prompt_chars=_prompt_chars(req), call_prefix="toolu_01", call_len=22, ask=asks.anthropic(req))  # fmt: skip
    msg_id = ident(rng, "msg_01", 22)
    response_model = (model or "claude") + controls.get("model_suffix", "")
    stop = "tool_use" if p.tools else "end_turn"
    cw5 = p.cache_write - p.cache_write_1h
    usage = {"input_tokens": p.input_tokens, "cache_creation_input_tokens": p.cache_write,
             "cache_read_input_tokens": p.cache_read,
             "cache_creation": {"ephemeral_5m_input_tokens": cw5, "ephemeral_1h_input_tokens": p.cache_write_1h},
             "output_tokens": p.output_tokens, "service_tier": "standard"}  # fmt: skip
    thinking = "\n".join(([REDACTED] if p.redacted_thinking else []) + ([p.thinking] if p.thinking else []))
    exp.update(
        response_model=response_model, message_id=msg_id, text=p.text, thinking=thinking, stop_reason=stop,
        input_tokens=p.input_tokens + p.cache_read + p.cache_write, output_tokens=p.output_tokens,
        cache_read=p.cache_read or None, cache_write=p.cache_write or None, cache_write_1h=p.cache_write_1h or None,
        tool_calls=[{"index": i, "call_id": t.call_id, "name": t.name,
                     "arguments": json.dumps(json.loads(t.arguments), ensure_ascii=False, separators=(",", ":"))
                     if not stream else t.arguments} for i, t in enumerate(p.tools)],
    )  # fmt: skip
    content: list[dict[str, Any]] = []
    if p.redacted_thinking:
        content.append({"type": "redacted_thinking", "data": "EmwKAhgBEgy" + ident(rng, "", 40)})
    if p.thinking:
        content.append(
            {"type": "thinking", "thinking": p.thinking, "signature": "EqQBCkYI" + ident(rng, "", 40)}
        )
    if p.text:
        content.append({"type": "text", "text": p.text})
    for t in p.tools:
        content.append(
            {"type": "tool_use", "id": t.call_id, "name": t.name, "input": json.loads(t.arguments)}
        )
    if not stream:
        exp["usage_raw"] = usage
        obj = {"model": response_model, "id": msg_id, "type": "message", "role": "assistant", "content": content,
               "stop_reason": stop, "stop_sequence": None, "usage": usage}  # fmt: skip
        return json_reply(200, obj, headers=headers, expected=exp)
    return _stream(rng, p, content, msg_id, response_model, usage, stop, headers, exp, controls)


# Long: one stream's events in wire order, drawn from one seeded random generator; split, the order
# of the draws (and so every byte the emulator sends for a request) would be spread over functions.
def _stream(rng, p, content, msg_id, model, usage, stop, headers, exp, controls) -> Reply:
    start_usage = {**usage, "output_tokens": rng.randint(1, 5)}
    events = [sse("message_start", {"type": "message_start", "message": {
        "model": model, "id": msg_id, "type": "message", "role": "assistant", "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": start_usage}}, pad=_pad(rng))]  # fmt: skip
    blocks: list[tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]] = []  # (block, start, deltas)
    for block in content:
        kind = block["type"]
        pieces: list[dict[str, Any]] = []
        if kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            pieces = [
                {"type": "thinking_delta", "thinking": f}
                for f in fragments(rng, block["thinking"], max_len=12)
            ]
            pieces.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            start = {"type": "text", "text": ""}
            pieces = [{"type": "text_delta", "text": f} for f in fragments(rng, block["text"], max_len=8)]
        elif kind == "tool_use":
            start = {**block, "input": {}}
            args = next(t.arguments for t in p.tools if t.call_id == block["id"])
            pieces = [{"type": "input_json_delta", "partial_json": ""}]
            pieces += [{"type": "input_json_delta", "partial_json": f} for f in fragments(rng, args)]
        else:  # redacted_thinking arrives whole in content_block_start
            start = block
        blocks.append((block, start, pieces))
    # midstream_error: cut in the middle of the text block (or the first block that has deltas)
    cut: tuple[int, int] | None = None
    if controls.get("scenario") == "midstream_error":
        candidates = [i for i, b in enumerate(blocks) if b[0]["type"] == "text"] or [
            i for i, b in enumerate(blocks) if b[2]
        ]
        if candidates:
            cut = (candidates[0], len(blocks[candidates[0]][2]) // 2)
    sent_text, sent_thinking = "", [REDACTED] if p.redacted_thinking else []
    calls: list[dict[str, Any]] = []  # what the client has seen of each tool call
    for index, (block, start, pieces) in enumerate(blocks):
        events.append(sse("content_block_start", {"type": "content_block_start", "index": index,
                                                  "content_block": start}, pad=_pad(rng)))  # fmt: skip
        if index == 0:
            events.append(b'event: ping\ndata: {"type": "ping"}\n\n')
        thought = ""
        if block["type"] == "tool_use":
            calls.append(
                {"index": len(calls), "call_id": block["id"], "name": block["name"], "arguments": ""}
            )
        for n, delta in enumerate(pieces):
            if cut == (index, n):
                error = {"details": None, "type": "overloaded_error", "message": "Overloaded"}
                events.append(sse("error", {"type": "error", "error": error}, pad=_pad(rng)))
                thinking = "\n".join(sent_thinking + ([thought] if thought else []))
                exp.update(text=sent_text, thinking=thinking, error_type="overloaded_error", stop_reason=None,
                           tool_calls=calls, output_tokens=None, usage_raw=None)  # fmt: skip
                reply = Reply(200, _sse_headers(headers), None, events, exp, complete=False)
                return with_malformed(reply, controls)
            sent_text += delta.get("text", "")
            thought += delta.get("thinking", "")
            if calls and block["type"] == "tool_use":
                calls[-1]["arguments"] += delta["partial_json"]
            events.append(sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta},
                              pad=_pad(rng)))  # fmt: skip
        if block["type"] == "thinking":
            sent_thinking.append(thought)
        events.append(
            sse("content_block_stop", {"type": "content_block_stop", "index": index}, pad=_pad(rng))
        )
    delta_usage = {k: usage[k] for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
                                         "output_tokens")}  # fmt: skip
    events.append(sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                        "usage": delta_usage}, pad=_pad(rng)))  # fmt: skip
    events.append(sse("message_stop", {"type": "message_stop"}, pad=_pad(rng)))
    exp["usage_raw"] = {**start_usage, **delta_usage}
    return with_malformed(Reply(200, _sse_headers(headers), None, events, exp), controls)


def _pad(rng) -> str:
    """Anthropic pads each streamed JSON object with a varying run of spaces before its last `}`."""
    return " " * rng.randint(2, 16)


def _sse_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache"), *headers]


_JUNK = {
    "anthropic": {
        "bad_json": b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {\n\n',
        "garbage": b"\xff\xfe\x00\x9c garbage \x00\x01\n\n",
        "bad_sse": b'event: ping\ndata: {"type": "ping"\r}\n\n',  # a lone CR cuts the data line
    },
    "openai": {
        "bad_json": b'data: {"id":"chatcmpl-","object":"chat.completion.chunk","choices":[{"index":0,"delta":{\n\n',
        "garbage": b"\xff\xfe\x00\x9c garbage \x00\x01\n\n",
        "bad_sse": b'data: {"choices": [], "usage": null\r}\n\n',  # a lone CR cuts the data line
    },
}


def with_malformed(reply: Reply, controls: dict[str, str], flavour: str = "anthropic") -> Reply:
    """scenario=malformed: insert one broken event after the first two valid ones (content unchanged).

    kind=bad_json (an event whose data is cut-off JSON), garbage (random bytes), bad_sse (a lone
    CR breaks the framing inside a data line).
    """
    if controls.get("scenario") != "malformed" or not reply.events:
        return reply
    kind = controls.get("kind", "bad_json")
    junk = _JUNK[flavour].get(kind)
    if junk is None:
        raise ValueError(f"unknown malformed kind {kind!r}; use bad_json, garbage or bad_sse")
    reply.events.insert(2, junk)
    reply.expected["malformed"] = kind
    return reply
