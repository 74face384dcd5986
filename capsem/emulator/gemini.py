"""Gemini `:generateContent` / `:streamGenerateContent` (plus Vertex and Code Assist paths).

Non-streamed bodies are pretty-printed camelCase JSON. Streams are SSE events ending in
`\\r\\n\\r\\n` with `alt=sse`, otherwise one JSON array written element by element
(`[{...}` then `\\n,\\r\\n{...}` ... `\\n]`). Every chunk is a whole GenerateContentResponse with
`usageMetadata` as a running total; function calls come whole with a `thoughtSignature`.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from capsem.emulator import asks
from capsem.emulator.reply import Reply, Request, base_expected, json_reply
from capsem.emulator.script import fragments, ident, plan, rng_for, seed_of

_STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
           503: "UNAVAILABLE"}  # fmt: skip


def _parts(content: Any) -> list[dict]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p for p in parts or [] if isinstance(p, dict)]


# Long: one answer (error, body or stream) in wire order, drawn from one seeded random generator;
# split, the order of the draws (and so every byte sent for a request) would be spread over functions.
def handle(request: Request) -> Reply:
    body, req, controls = request.body, request.json, request.controls
    code_assist = "v1internal" in request.path
    inner = req.get("request") if code_assist and isinstance(req.get("request"), dict) else req
    model = (request.match.groupdict().get("model") if request.match else None) or req.get("model")
    stream = "streamGenerateContent" in request.path
    sse_mode = "alt=sse" in request.query
    contents = inner.get("contents") if isinstance(inner.get("contents"), list) else []
    declared = [(d.get("name"), d.get("parameters") or d.get("parametersJsonSchema"))
                for t in inner.get("tools") or [] if isinstance(t, dict)
                for d in t.get("functionDeclarations") or [] if isinstance(d, dict)]  # fmt: skip
    body = seed_of(body, controls, [model, contents, [d[0] for d in declared]])
    rng = rng_for(body)
    exp = base_expected("gemini", model, stream)
    wrap = (lambda r: {"response": r, "traceId": ident(rng, "", 16, "0123456789abcdef")}) if code_assist else (
        lambda r: r)  # fmt: skip
    if controls.get("scenario") == "error":
        status = int(controls.get("status", "429"))
        exp["error_type"] = _STATUS.get(status, "INTERNAL")
        err = {
            "error": {"code": status, "message": f"emulated {exp['error_type']}", "status": exp["error_type"]}
        }
        return json_reply(status, [err] if stream and not sse_mode else err, pretty=True, expected=exp)
    last = _parts(contents[-1]) if contents else []
    results = [json.dumps(p["functionResponse"].get("response")) for p in last
               if isinstance(p.get("functionResponse"), dict)]  # fmt: skip
    prompt = json.dumps([inner.get("systemInstruction"), contents, inner.get("tools")], ensure_ascii=False)
    p = plan(body=body, controls=controls, declared=declared, has_results=bool(results), result_texts=results,
             prompt_chars=len(prompt), call_prefix="", call_len=8, ask=asks.gemini(inner))  # fmt: skip
    with_ids = controls.get("gemini_ids", "1") == "1"
    thoughts = len(p.thinking) // 4 if p.thinking else 0
    candidates_total = p.output_tokens
    prompt_tokens = p.input_tokens + p.cache_read
    response_id = ident(rng, "", 22)
    response_model = (model or "gemini") + controls.get("model_suffix", "")
    calls = []
    for t in p.tools:
        call = {"name": t.name, "args": json.loads(t.arguments)}
        if with_ids:
            call["id"] = t.call_id.lower()
        calls.append(call)
    final_usage = {"promptTokenCount": prompt_tokens, "candidatesTokenCount": candidates_total,
                   "totalTokenCount": prompt_tokens + candidates_total + thoughts,
                   "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt_tokens}]}  # fmt: skip
    if p.cache_read:
        final_usage["cachedContentTokenCount"] = p.cache_read
    if thoughts:
        final_usage["thoughtsTokenCount"] = thoughts
    exp.update(
        response_model=response_model, message_id=response_id, text=p.text, thinking=p.thinking, stop_reason="STOP",
        usage_raw=final_usage, input_tokens=prompt_tokens, output_tokens=candidates_total + thoughts,
        cache_read=p.cache_read or None, reasoning=thoughts or None,
        tool_calls=[{"index": i, "call_id": c.get("id") or f"gemini_{c['name']}_{i}", "name": c["name"],
                     "arguments": json.dumps(c["args"], ensure_ascii=False, separators=(",", ":"))}
                    for i, c in enumerate(calls)],
    )  # fmt: skip

    def response(parts: list[dict], usage: dict, finish: bool) -> dict:
        cand: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish:
            cand["finishReason"] = "STOP"
        return wrap({"candidates": [cand], "usageMetadata": usage, "modelVersion": response_model,
                     "responseId": response_id})  # fmt: skip

    parts: list[dict] = []
    if p.thinking:
        parts.append({"text": p.thinking, "thought": True})
    if p.text:
        parts.append({"text": p.text})
    signature = base64.b64encode(rng.randbytes(48)).decode()
    parts += [{"functionCall": c, "thoughtSignature": signature} for c in calls]
    if not stream:
        return json_reply(200, response(parts, final_usage, True), pretty=True, expected=exp)

    # streamed: thinking first, then the text in pieces, then the calls and the finish
    chunks: list[list[dict]] = []
    if p.thinking:
        chunks.append([{"text": p.thinking, "thought": True}])
    chunks += [[{"text": piece}] for piece in _pieces(rng, p.text)]
    chunks.append(parts[len(parts) - len(calls) :] if calls else [])
    midstream = controls.get("scenario") == "midstream_error"
    objs = []
    sent_text = ""
    for n, chunk_parts in enumerate(chunks):
        last = n == len(chunks) - 1
        if midstream and n == len(chunks) // 2:
            objs.append(
                {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
            )
            exp.update(text=sent_text, error_type="UNAVAILABLE", stop_reason=None, tool_calls=[])
            break
        sent_text += "".join(c.get("text", "") for c in chunk_parts if not c.get("thought"))
        so_far = dict(final_usage, candidatesTokenCount=max(1, candidates_total * (n + 1) // len(chunks)))
        objs.append(response(chunk_parts, final_usage if last else so_far, last))
    if sse_mode:
        events = [b"data: " + json.dumps(o, ensure_ascii=False).encode() + b"\r\n\r\n" for o in objs]
        ctype = "text/event-stream"
    else:
        texts = [json.dumps(o, ensure_ascii=False, indent=2).encode() for o in objs]
        events = [(b"[" if i == 0 else b"\n,\r\n") + t for i, t in enumerate(texts)] + [b"\n]"]
        ctype = "application/json; charset=UTF-8"
    return Reply(200, [("content-type", ctype)], None, events, exp, complete=not midstream)


def _pieces(rng, text: str) -> list[str]:
    if not text:
        return []
    frags = fragments(rng, text, min_len=6, max_len=20)
    return frags
