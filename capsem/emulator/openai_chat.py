"""OpenAI Chat Completions (`POST /v1/chat/completions`) as the real API sends it.

Non-streamed bodies are pretty-printed; streams are `data:` lines only, end with
`data: [DONE]`, carry `obfuscation`, and send a usage chunk (`choices: []`) only when the
request asked for `stream_options.include_usage`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from capsem.emulator.anthropic import with_malformed
from capsem.emulator.reply import Reply, Request, base_expected, json_reply, sse
from capsem.emulator.script import fragments, ident, plan, rng_for

_ERRORS = {400: ("invalid_request_error", "context_length_exceeded"), 401: ("invalid_request_error", "invalid_api_key"),
           429: ("requests", "rate_limit_exceeded"), 500: ("server_error", None)}  # fmt: skip


def _trailing_results(messages: list[Any]) -> list[str]:
    last = max(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
        default=-1,
    )
    return [m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
            for m in messages[last + 1 :] if isinstance(m, dict) and m.get("role") == "tool"]  # fmt: skip


def handle(request: Request) -> Reply:
    body, req, controls = request.body, request.json, request.controls
    rng = rng_for(body)
    model = req.get("model")
    stream = req.get("stream") is True
    exp = base_expected("openai_chat", model, stream)
    headers = [("x-request-id", ident(rng, "req_", 32, "0123456789abcdef")), ("openai-processing-ms", "42"),
               ("openai-version", "2020-10-01")]  # fmt: skip
    if controls.get("scenario") == "error":
        status = int(controls.get("status", "429"))
        etype, code = _ERRORS.get(status, ("server_error", None))
        exp["error_type"] = etype
        obj = {"error": {"message": f"emulated {etype}", "type": etype, "param": None, "code": code}}
        return json_reply(status, obj, pretty=True, headers=headers, expected=exp)
    messages = req.get("messages") if isinstance(req.get("messages"), list) else []
    tools = [(t["function"].get("name"), t["function"].get("parameters")) for t in req.get("tools") or []
             if isinstance(t, dict) and isinstance(t.get("function"), dict)]  # fmt: skip
    results = _trailing_results(messages)
    prompt = json.dumps([messages, req.get("tools")], ensure_ascii=False)
    p = plan(body=body, controls=controls, declared=tools, has_results=bool(results), result_texts=results,
             prompt_chars=len(prompt), call_prefix="call_", call_len=24)  # fmt: skip
    cid = ident(rng, "chatcmpl-", 29)
    response_model = (model or "gpt") + controls.get("model_suffix", "")
    finish = "tool_calls" if p.tools else "stop"
    prompt_tokens = p.input_tokens + p.cache_read
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": p.output_tokens,
             "total_tokens": prompt_tokens + p.output_tokens,
             "prompt_tokens_details": {"cached_tokens": p.cache_read, "audio_tokens": 0},
             "completion_tokens_details": {"reasoning_tokens": p.reasoning, "audio_tokens": 0,
                                           "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}  # fmt: skip
    if request.host == "openrouter.ai":  # OpenRouter reports its own cost in usage
        usage["cost"] = round((prompt_tokens * 2 + p.output_tokens * 8) / 1e6, 8)
    exp.update(response_model=response_model, message_id=cid, text=p.text, stop_reason=finish,
               tool_calls=[{"index": i, "call_id": t.call_id, "name": t.name, "arguments": t.arguments}
                           for i, t in enumerate(p.tools)])  # fmt: skip
    include_usage = bool((req.get("stream_options") or {}).get("include_usage")) if stream else True
    if include_usage:
        exp.update(usage_raw=usage, input_tokens=prompt_tokens, output_tokens=p.output_tokens,
                   cache_read=p.cache_read or None, reasoning=p.reasoning or None)  # fmt: skip
    created = int(time.time())
    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": p.text or None}
        if p.tools:
            message["tool_calls"] = [{"id": t.call_id, "type": "function",
                                      "function": {"name": t.name, "arguments": t.arguments}} for t in p.tools]  # fmt: skip
        message.update(refusal=None, annotations=[])
        obj = {"id": cid, "object": "chat.completion", "created": created, "model": response_model,
               "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
               "usage": usage, "service_tier": "default", "system_fingerprint": "fp_b3f1157249"}  # fmt: skip
        return json_reply(200, obj, pretty=True, headers=headers, expected=exp)

    def chunk(delta: dict[str, Any] | None, finish_reason: str | None = None, choices: bool = True) -> bytes:
        obj: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created,
                               "model": response_model, "service_tier": "default",
                               "system_fingerprint": "fp_b3f1157249"}  # fmt: skip
        obj["choices"] = (
            [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
            if choices
            else []
        )
        if include_usage:
            obj["usage"] = None
        obj["obfuscation"] = ident(rng, "", rng.randint(2, 12))
        return sse(None, obj)

    events = []
    first: dict[str, Any] = {"role": "assistant", "content": "" if p.text else None, "refusal": None}
    midstream = controls.get("scenario") == "midstream_error"
    sent = ""
    pieces = fragments(rng, p.text, max_len=8) if p.text else []
    events.append(chunk(first))
    for n, piece in enumerate(pieces):
        if midstream and n == len(pieces) // 2:
            events.append(sse(None, {"error": {"message": "The server had an error while processing your request. "
                                               "Sorry about that!", "type": "server_error"}}))  # fmt: skip
            exp.update(text=sent, error_type="server_error", stop_reason=None, tool_calls=[], usage_raw=None,
                       input_tokens=None, output_tokens=None, cache_read=None, reasoning=None)  # fmt: skip
            return Reply(200, _headers(headers), None, events, exp, complete=False)
        sent += piece
        events.append(chunk({"content": piece}))
    for i, t in enumerate(p.tools):
        args = fragments(rng, t.arguments)
        events.append(chunk({"tool_calls": [{"index": i, "id": t.call_id, "type": "function",
                                             "function": {"name": t.name, "arguments": ""}}]}))  # fmt: skip
        for a in args:
            events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": a}}]}))
    events.append(chunk({}, finish))
    if include_usage:
        usage_chunk = json.loads(chunk(None, choices=False).decode()[6:])
        usage_chunk["usage"] = usage
        events.append(sse(None, usage_chunk))
    events.append(b"data: [DONE]\n\n")
    return with_malformed(Reply(200, _headers(headers), None, events, exp), controls)


def _headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [("content-type", "text/event-stream; charset=utf-8"), *headers]
