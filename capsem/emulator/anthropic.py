"""Anthropic Messages (`POST /v1/messages`) as the real API sends it.

Streams: `event:` lines equal to the JSON `type`, trailing-space padding on JSON objects,
`ping` after the first content block start, `message_start` usage with a placeholder
`output_tokens`, cumulative `message_delta` usage that repeats input and cache fields.
"""

from __future__ import annotations

import json
from typing import Any

from capsem.emulator.reply import Reply, Request, base_expected, json_reply, sse
from capsem.emulator.script import fragments, ident, plan, rng_for

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


def error_body(status: int, rng) -> tuple[dict, str]:
    etype = _ERRORS.get(status, "api_error")
    message = "Overloaded" if status == 529 else f"emulated {etype}"
    return {"type": "error", "error": {"type": etype, "message": message},
            "request_id": ident(rng, "req_011C", 20)}, etype  # fmt: skip


def handle(request: Request) -> Reply:
    body, req, controls = request.body, request.json, request.controls
    rng = rng_for(body)
    model = req.get("model")
    stream = req.get("stream") is True
    exp = base_expected("anthropic", model, stream)
    headers = [("request-id", ident(rng, "req_011C", 20)), ("anthropic-organization-id", "org-emulator")]
    scenario = controls.get("scenario", "auto")
    if scenario == "error":
        status = int(controls.get("status", "429"))
        obj, etype = error_body(status, rng)
        exp["error_type"] = etype
        extra = [("retry-after", "1"), ("x-should-retry", "false")] if status in (429, 529) else []
        return json_reply(status, obj, headers=headers + extra, expected=exp)
    messages = req.get("messages") if isinstance(req.get("messages"), list) else []
    tools = [(t.get("name"), t.get("input_schema")) for t in req.get("tools") or [] if isinstance(t, dict)]
    results = _trailing_results(messages)
    prompt = json.dumps([req.get("system"), messages, req.get("tools")], ensure_ascii=False)
    p = plan(body=body, controls=controls, declared=tools, has_results=bool(results), result_texts=results,
             prompt_chars=len(prompt), call_prefix="toolu_01", call_len=22)  # fmt: skip
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


def _stream(rng, p, content, msg_id, model, usage, stop, headers, exp, controls) -> Reply:
    start_usage = {**usage, "output_tokens": rng.randint(1, 5)}
    pad = " " * rng.randint(2, 10)
    events = [sse("message_start", {"type": "message_start", "message": {
        "model": model, "id": msg_id, "type": "message", "role": "assistant", "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": start_usage}}, pad=pad)]  # fmt: skip
    midstream = controls.get("scenario") == "midstream_error"
    complete = True
    sent_text = ""
    for index, block in enumerate(content):
        kind = block["type"]
        if kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
        elif kind == "text":
            start = {"type": "text", "text": ""}
        elif kind == "tool_use":
            start = {**block, "input": {}}
        else:
            start = block
        events.append(sse("content_block_start", {"type": "content_block_start", "index": index,
                                                  "content_block": start}, pad=pad))  # fmt: skip
        if index == 0:
            events.append(b'event: ping\ndata: {"type": "ping"}\n\n')
        pieces: list[dict[str, Any]] = []
        if kind == "thinking":
            pieces = [
                {"type": "thinking_delta", "thinking": f}
                for f in fragments(rng, block["thinking"], max_len=12)
            ]
            pieces.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            pieces = [{"type": "text_delta", "text": f} for f in fragments(rng, block["text"], max_len=8)]
        elif kind == "tool_use":
            args = next(t.arguments for t in p.tools if t.call_id == block["id"])
            pieces = [{"type": "input_json_delta", "partial_json": ""}]
            pieces += [{"type": "input_json_delta", "partial_json": f} for f in fragments(rng, args)]
        for n, delta in enumerate(pieces):
            if midstream and kind == "text" and n == len(pieces) // 2:
                events.append(sse("error", {"type": "error", "error": {"details": None, "type": "overloaded_error",
                                                                       "message": "Overloaded"}}, pad=pad))  # fmt: skip
                exp.update(text=sent_text, error_type="overloaded_error", stop_reason=None, tool_calls=[],
                           output_tokens=None, usage_raw=None)  # fmt: skip
                return with_malformed(
                    Reply(200, _sse_headers(headers), None, events, exp, complete=False), controls
                )
            if kind == "text":
                sent_text += delta["text"]
            events.append(sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta},
                              pad=pad))  # fmt: skip
        events.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}, pad=pad))
    delta_usage = {k: usage[k] for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
                                         "output_tokens")}  # fmt: skip
    events.append(sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                        "usage": delta_usage}, pad=pad))  # fmt: skip
    events.append(sse("message_stop", {"type": "message_stop"}, pad=pad))
    exp["usage_raw"] = {**start_usage, **delta_usage}
    return with_malformed(Reply(200, _sse_headers(headers), None, events, exp, complete=complete), controls)


def _sse_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache"), *headers]


def with_malformed(reply: Reply, controls: dict[str, str]) -> Reply:
    """scenario=malformed: insert broken events between valid ones (valid content unchanged)."""
    if controls.get("scenario") != "malformed" or not reply.events:
        return reply
    kind = controls.get("kind", "bad_json")
    junk = {
        "bad_json": b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {\n\n',
        "garbage": b"\xff\xfe\x00\x9c garbage \x00\x01\n\n",
        "bad_sse": b'event: ping\ndata: {"type": "ping"\r}\n\n',  # a lone CR cuts the data line
    }[kind]
    reply.events.insert(2, junk)
    return reply
