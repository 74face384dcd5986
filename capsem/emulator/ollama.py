"""Ollama native `/api/chat` and `/api/generate`: NDJSON streams (the default) and JSON bodies."""

from __future__ import annotations

import json
import time
from typing import Any

from capsem.emulator.reply import Reply, Request, base_expected, json_reply
from capsem.emulator.script import fragments, plan, rng_for


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def handle(request: Request) -> Reply:
    body, req, controls = request.body, request.json, request.controls
    chat = request.path.endswith("/api/chat")
    stream = req.get("stream") is not False
    model = req.get("model")
    rng = rng_for(body)
    exp = base_expected("ollama", model, stream)
    if controls.get("scenario") == "error":
        exp["error_type"] = "error"
        return json_reply(
            int(controls.get("status", "404")), {"error": f"model '{model}' not found"}, expected=exp
        )
    messages = [m for m in req.get("messages") or [] if isinstance(m, dict)]
    declared = [(t["function"].get("name"), t["function"].get("parameters")) for t in req.get("tools") or []
                if isinstance(t, dict) and isinstance(t.get("function"), dict)]  # fmt: skip
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    results = [str(m.get("content")) for m in messages[last + 1 :] if m.get("role") == "tool"]
    prompt = json.dumps([messages, req.get("prompt"), req.get("tools")], ensure_ascii=False)
    p = plan(body=body, controls=controls, declared=declared if chat else [], has_results=bool(results),
             result_texts=results, prompt_chars=len(prompt), call_prefix="", call_len=0)  # fmt: skip
    calls = [{"function": {"name": t.name, "arguments": json.loads(t.arguments)}} for t in p.tools]
    created = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    final = {"model": model, "created_at": created, "done": True, "done_reason": "stop", "total_duration": 1234567,
             "load_duration": 1000, "prompt_eval_count": p.input_tokens, "prompt_eval_duration": 2000,
             "eval_count": p.output_tokens, "eval_duration": 3000}  # fmt: skip
    exp.update(
        response_model=model, text=p.text, thinking=p.thinking, stop_reason="stop", input_tokens=p.input_tokens,
        output_tokens=p.output_tokens, usage_raw={k: v for k, v in final.items() if k.endswith(("_count", "_duration"))},
        tool_calls=[{"index": i, "call_id": f"ollama_{c['function']['name']}_{i}", "name": c["function"]["name"],
                     "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False, separators=(",", ":"))}
                    for i, c in enumerate(calls)],
    )  # fmt: skip

    def piece(text: str = "", thinking: str = "", tool_calls: list | None = None) -> dict[str, Any]:
        if chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thinking:
                message["thinking"] = thinking
            if tool_calls:
                message["tool_calls"] = tool_calls
            return {"model": model, "created_at": created, "message": message, "done": False}
        out = {"model": model, "created_at": created, "response": text, "done": False}
        if thinking:
            out["thinking"] = thinking
        return out

    if not stream:
        whole = {**piece(p.text, p.thinking, calls), **final}
        return json_reply(200, whole, expected=exp)
    lines = [_line(piece(thinking=p.thinking))] if p.thinking else []
    lines += [_line(piece(text=t)) for t in fragments(rng, p.text, max_len=10)]
    if calls:
        lines.append(_line(piece(tool_calls=calls)))
    lines.append(_line({**piece(), **final}))
    return Reply(200, [("content-type", "application/x-ndjson")], None, lines, exp)
