"""OpenAI Chat Completions (`POST /v1/chat/completions`) as the real API sends it.

Non-streamed bodies are pretty-printed; streams are `data:` lines only, end with
`data: [DONE]`, carry `obfuscation`, and send a usage chunk (`choices: []`) only when the
request asked for `stream_options.include_usage`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from capsem.emulator import asks
from capsem.emulator.anthropic import with_malformed
from capsem.emulator.reply import Reply, Request, base_expected, json_reply, sse
from capsem.emulator.script import fragments, ident, plan, rng_for, seed_of

_ERRORS = {400: ("invalid_request_error", "context_length_exceeded"), 401: ("invalid_request_error", "invalid_api_key"),
           429: ("requests", "rate_limit_exceeded"), 500: ("server_error", None)}  # fmt: skip


def _trailing_results(messages: list[Any]) -> list[str]:
    last = max(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
        default=-1,
    )
    return [m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
            for m in messages[last + 1 :] if isinstance(m, dict) and m.get("role") == "tool"]  # fmt: skip


# Long: one answer (error, body or stream) in wire order, drawn from one seeded random generator;
# split, the order of the draws (and so every byte sent for a request) would be spread over functions.
def handle(request: Request) -> Reply:
    body, req, controls = request.body, request.json, request.controls
    model = req.get("model")
    messages = req.get("messages") if isinstance(req.get("messages"), list) else []
    tools = [(t["function"].get("name"), t["function"].get("parameters")) for t in req.get("tools") or []
             if isinstance(t, dict) and isinstance(t.get("function"), dict)]  # fmt: skip
    body = seed_of(body, controls, [model, messages, [t[0] for t in tools]])
    rng = rng_for(body)
    stream = req.get("stream") is True
    exp = base_expected("openai_chat", model, stream)
    headers = [("x-request-id", ident(rng, "req_", 32, "0123456789abcdef")), ("openai-processing-ms", "42"),
               ("openai-version", "2020-10-01")]  # fmt: skip
    if controls.get("scenario") == "error":
        status = int(controls.get("status", "429"))
        etype, code = _ERRORS.get(status, ("server_error", None))
        exp["error_type"] = etype
        obj = {"error": {"message": f"emulated {etype}", "type": etype, "param": None, "code": code}}
        if status == 429:
            headers += [("x-ratelimit-limit-requests", "500"), ("x-ratelimit-remaining-requests", "0"),
                        ("x-ratelimit-reset-requests", "1s"), ("retry-after", "1")]  # fmt: skip
        return json_reply(status, obj, pretty=True, headers=headers, expected=exp)
    results = _trailing_results(messages)
    # self-hosted servers: vLLM streams thinking as `reasoning`, llama.cpp as `reasoning_content` and puts
    # usage (plus `timings`) on the finish chunk itself
    server = controls.get("server", "")
    reasoning_key = {"vllm": "reasoning", "llamacpp": "reasoning_content"}.get(server)
    prompt = json.dumps([messages, req.get("tools")], ensure_ascii=False)
    p = plan(body=body, controls=controls, declared=tools, has_results=bool(results), result_texts=results,
             prompt_chars=len(prompt), call_prefix="chatcmpl-tool-" if server == "vllm" else "call_",
             call_len=32 if server == "vllm" else 24, ask=asks.openai_chat(req))  # fmt: skip
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
    if reasoning_key:
        exp["thinking"] = p.thinking
    exp.update(response_model=response_model, message_id=cid, text=p.text, stop_reason=finish,
               tool_calls=[{"index": i, "call_id": t.call_id, "name": t.name, "arguments": t.arguments}
                           for i, t in enumerate(p.tools)])  # fmt: skip
    include_usage = bool((req.get("stream_options") or {}).get("include_usage")) if stream else True
    include_usage = include_usage or server == "llamacpp"
    timings = {"prompt_n": prompt_tokens, "prompt_ms": 12.5, "prompt_per_token_ms": 0.1, "prompt_per_second": 1e4,
               "predicted_n": p.output_tokens, "predicted_ms": 80.2, "predicted_per_token_ms": 8.0,
               "predicted_per_second": 125.0}  # fmt: skip
    if include_usage:
        exp.update(usage_raw=usage, input_tokens=prompt_tokens, output_tokens=p.output_tokens,
                   cache_read=p.cache_read or None, reasoning=p.reasoning or None)  # fmt: skip
    created = int(time.time())
    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": p.text or None}
        if reasoning_key and p.thinking:
            message[reasoning_key] = p.thinking
        if p.tools:
            message["tool_calls"] = [{"id": t.call_id, "type": "function",
                                      "function": {"name": t.name, "arguments": t.arguments}} for t in p.tools]  # fmt: skip
        message.update(refusal=None, annotations=[])
        obj = {"id": cid, "object": "chat.completion", "created": created, "model": response_model,
               "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
               "usage": usage, "service_tier": "default", "system_fingerprint": "fp_b3f1157249"}  # fmt: skip
        if server == "llamacpp":
            obj["timings"] = timings
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

    # the deltas after the first chunk, in order: text pieces, then each call's fragments
    deltas: list[dict[str, Any]] = []
    if reasoning_key:
        deltas += [{reasoning_key: piece} for piece in fragments(rng, p.thinking, max_len=8)]
    deltas += [{"content": piece} for piece in fragments(rng, p.text, max_len=8)]
    for i, t in enumerate(p.tools):
        deltas.append({"tool_calls": [{"index": i, "id": t.call_id, "type": "function",
                                       "function": {"name": t.name, "arguments": ""}}]})  # fmt: skip
        deltas += [
            {"tool_calls": [{"index": i, "function": {"arguments": a}}]} for a in fragments(rng, t.arguments)
        ]
    first: dict[str, Any] = {"role": "assistant", "content": "" if p.text else None, "refusal": None}
    if not p.text and deltas:  # a tool-call stream starts with content null plus the first call fragment
        first = {"role": "assistant", "content": None, **deltas.pop(0), "refusal": None}
    cut = len(deltas) // 2 if controls.get("scenario") == "midstream_error" else None
    events = [chunk(first)]
    sent_text, calls = "", {}
    for n, delta in enumerate([first, *deltas]):
        if n and n - 1 == cut:
            events.append(sse(None, {"error": {"message": "The server had an error while processing your request. "
                                               "Sorry about that!", "type": "server_error"}}))  # fmt: skip
            exp.update(text=sent_text, error_type="server_error", stop_reason=None, usage_raw=None,
                       tool_calls=[{"index": i, "call_id": c[0], "name": c[1], "arguments": c[2]}
                                   for i, c in sorted(calls.items())],
                       input_tokens=None, output_tokens=None, cache_read=None, reasoning=None)  # fmt: skip
            return with_malformed(
                Reply(200, _headers(headers), None, events, exp, complete=False), controls, "openai"
            )
        if n:
            events.append(chunk(delta))
        sent_text += delta.get("content") or ""
        for tc in delta.get("tool_calls", []):
            call = calls.setdefault(tc["index"], ["", "", ""])
            call[0] = tc.get("id", call[0])
            call[1] = tc.get("function", {}).get("name", call[1])
            call[2] += tc["function"]["arguments"]
    if server == "llamacpp":  # usage and timings ride on the finish chunk, no usage-only chunk
        finish_chunk = json.loads(chunk({}, finish).decode()[6:])
        finish_chunk.update(usage=usage, timings=timings)
        events.append(sse(None, finish_chunk))
    else:
        events.append(chunk({}, finish))
    if include_usage and server != "llamacpp":
        usage_chunk = json.loads(chunk(None, choices=False).decode()[6:])
        usage_chunk["usage"] = usage
        events.append(sse(None, usage_chunk))
    events.append(b"data: [DONE]\n\n")
    return with_malformed(Reply(200, _headers(headers), None, events, exp), controls, "openai")


def _headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [("content-type", "text/event-stream; charset=utf-8"), *headers]
