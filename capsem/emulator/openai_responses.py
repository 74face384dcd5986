"""OpenAI Responses API (`POST /v1/responses`) as the real API sends it.

Streams are `event: <type>` + `data: <json with the same type>` pairs, every payload with an
increasing `sequence_number`, deltas with `obfuscation`, a reasoning item with
`encrypted_content`, `function_call` items with a `call_` call id distinct from their `fc_`
item id, `response.completed` carrying the whole response and its usage, and no `[DONE]`.
Non-streamed replies are the pretty-printed response object. Scenarios beyond `script.py`'s:
`error` (HTTP error body), `midstream_error` (`event: error` after some text),
`failed` (`response.failed`), `incomplete` (`response.incomplete`, max_output_tokens).

`turn()` gives the event objects of one answer; the WebSocket transport (`websocket.py`)
sends the same objects as text frames.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capsem.emulator import asks
from capsem.emulator.anthropic import with_malformed
from capsem.emulator.openai_chat import _ERRORS
from capsem.emulator.reply import Reply, Request, base_expected, json_reply, sse
from capsem.emulator.script import fragments, ident, plan, rng_for, seed_of

if TYPE_CHECKING:
    import random

    from capsem.emulator.script import Plan, ToolPlan

PART_SEP = "\n\n"
_HEX = "0123456789abcdef"


@dataclass
class Turn:
    """One answer: the event objects to stream, or an HTTP error, and the truth."""

    expected: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    response: dict[str, Any] | None = None
    """The final response object (the non-streamed body)."""
    error: tuple[int, dict[str, Any]] | None = None
    complete: bool = True


def _results(items: list[Any]) -> list[str]:
    out = []
    for item in items:
        if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            out.append(output if isinstance(output, str) else json.dumps(output, ensure_ascii=False))
    return out


def _stable(item: Any) -> Any:
    """An input item without what changes from run to run (item ids, client metadata), for seeding."""
    if not isinstance(item, dict):
        return item
    if item.get("type") == "additional_tools":
        return {"type": "additional_tools"}
    return {
        k: v
        for k, v in item.items()
        if k in ("type", "role", "content", "output", "name", "arguments", "input")
    }


def _usage(p: Plan) -> dict[str, Any]:
    """The Responses `usage` object of a plan (input tokens include the cached ones)."""
    cached = p.cache_read
    return {"input_tokens": p.input_tokens + cached,
             "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": p.cache_write},
             "output_tokens": p.output_tokens, "output_tokens_details": {"reasoning_tokens": p.reasoning},
             "total_tokens": p.input_tokens + cached + p.output_tokens}  # fmt: skip


def _response_base(req: dict[str, Any], resp_id: str, response_model: str) -> dict[str, Any]:
    """The response object as `response.created` shows it (in progress, no output yet)."""
    created = int(time.time())
    return {
        "id": resp_id, "object": "response", "created_at": created, "status": "in_progress", "background": False,
        "error": None, "incomplete_details": None, "instructions": req.get("instructions"),
        "max_output_tokens": req.get("max_output_tokens"), "max_tool_calls": None, "model": response_model,
        "output": [], "parallel_tool_calls": True, "previous_response_id": req.get("previous_response_id"),
        "prompt_cache_key": None, "reasoning": {"effort": "medium", "summary": None}, "safety_identifier": None,
        "service_tier": "auto", "store": req.get("store", True), "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"}, "tool_choice": "auto",
        "tools": req.get("tools") or [], "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled",
        "usage": None, "user": None, "metadata": {},
    }  # fmt: skip


class _Events:
    """The events of one answer as they are emitted, numbered in order, and the output items they
    complete; `rng` is the answer's seeded generator, drawn in emission order."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.events: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        self.events.append({"type": kind, "sequence_number": len(self.events), **fields})

    def obfuscation(self) -> str:
        return ident(self.rng, "", self.rng.randint(2, 15))


def _reasoning_item(st: _Events, idx: int, summaries: list[str]) -> None:
    """The reasoning item (its summary parts streamed; `encrypted_content` complete only in `output_item.done`)."""
    rng, emit = st.rng, st.emit
    rs_id = ident(rng, "rs_", 48, _HEX)
    enc = "gAAAAAB" + ident(rng, "", 64)
    emit("response.output_item.added", output_index=idx,
         item={"id": rs_id, "type": "reasoning", "encrypted_content": enc[:20], "summary": []})  # fmt: skip
    summary_parts = []
    for si, text in enumerate(summaries):
        emit("response.reasoning_summary_part.added", item_id=rs_id, output_index=idx, summary_index=si,
             part={"type": "summary_text", "text": ""})  # fmt: skip
        for piece in fragments(rng, text, max_len=10):
            emit("response.reasoning_summary_text.delta", item_id=rs_id, output_index=idx, summary_index=si,
                 delta=piece, obfuscation=st.obfuscation())  # fmt: skip
        emit(
            "response.reasoning_summary_text.done",
            item_id=rs_id,
            output_index=idx,
            summary_index=si,
            text=text,
        )
        emit("response.reasoning_summary_part.done", item_id=rs_id, output_index=idx, summary_index=si,
             part={"type": "summary_text", "text": text})  # fmt: skip
        summary_parts.append({"type": "summary_text", "text": text})
    rs_item = {"id": rs_id, "type": "reasoning", "encrypted_content": enc, "summary": summary_parts}
    emit("response.output_item.done", output_index=idx, item=rs_item)
    st.output.append(rs_item)


def _message_item(st: _Events, idx: int, text: str, midstream: bool) -> str:
    """The message item, its text streamed in pieces (cut in the middle when `midstream`); the text sent."""
    rng, emit = st.rng, st.emit
    sent_text = ""
    msg_id = ident(rng, "msg_", 48, _HEX)
    added = {"id": msg_id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"}
    emit("response.output_item.added", output_index=idx, item=added)
    emit("response.content_part.added", item_id=msg_id, output_index=idx, content_index=0,
         part={"type": "output_text", "annotations": [], "logprobs": [], "text": ""})  # fmt: skip
    pieces = fragments(rng, text, max_len=8)
    for n, piece in enumerate(pieces):
        if midstream and n == len(pieces) // 2:
            break
        emit("response.output_text.delta", item_id=msg_id, output_index=idx, content_index=0, delta=piece,
             logprobs=[], obfuscation=st.obfuscation())  # fmt: skip
        sent_text += piece
    if not midstream:
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
        emit("response.output_text.done", item_id=msg_id, output_index=idx, content_index=0, text=text,
             logprobs=[])  # fmt: skip
        emit("response.content_part.done", item_id=msg_id, output_index=idx, content_index=0, part=part)
        msg_item = {
            "id": msg_id,
            "type": "message",
            "status": "completed",
            "content": [part],
            "role": "assistant",
        }
        emit("response.output_item.done", output_index=idx, item=msg_item)
        st.output.append(msg_item)
    return sent_text


def _function_call_item(st: _Events, idx: int, t: ToolPlan) -> None:
    """A function_call item, its arguments streamed in pieces (a custom tool's `custom_tool_call`,
    its `input` text streamed)."""
    rng, emit = st.rng, st.emit
    kind, field, events = ("custom_tool_call", "input", "response.custom_tool_call_input") if t.freeform else (
        "function_call", "arguments", "response.function_call_arguments")  # fmt: skip
    fc_id = ident(rng, "ctc_" if t.freeform else "fc_", 48, _HEX)
    emit("response.output_item.added", output_index=idx,
         item={"id": fc_id, "type": kind, "status": "in_progress", field: "",
               "call_id": t.call_id, "name": t.name})  # fmt: skip
    for piece in fragments(rng, t.arguments):
        emit(f"{events}.delta", item_id=fc_id, output_index=idx, delta=piece, obfuscation=st.obfuscation())
    emit(f"{events}.done", item_id=fc_id, output_index=idx, **{field: t.arguments})
    fc_item = {"id": fc_id, "type": kind, "status": "completed", field: t.arguments,
               "call_id": t.call_id, "name": t.name}  # fmt: skip
    emit("response.output_item.done", output_index=idx, item=fc_item)
    st.output.append(fc_item)


def _midstream_end(st: _Events, base: dict[str, Any], scenario: str, exp: dict[str, Any]) -> None:
    """The end of a stream cut after some text: `response.failed` (scenario `failed`) or an `error` event."""
    if scenario == "failed":
        err = {"code": "server_error", "message": "An error occurred while processing your request."}
        final = {**base, "status": "failed", "error": err, "output": st.output}
        st.emit("response.failed", response=final)
        exp.update(stop_reason="failed", error_type="server_error")
    else:
        st.emit("error", code="server_is_overloaded", message="Our servers are currently overloaded.",
                param=None)  # fmt: skip
        exp.update(error_type="server_is_overloaded")


def _completed(
    st: _Events, base: dict[str, Any], usage: dict[str, Any], *, incomplete: bool
) -> tuple[dict[str, Any], str]:
    """The terminal event (`response.completed`, or `response.incomplete` at max_output_tokens): the final
    response object and its stop reason."""
    final = {**base, "status": "completed", "output": st.output, "usage": usage}
    kind = "response.completed"
    stop = "completed"
    if incomplete:
        final.update(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
        kind, stop = "response.incomplete", "incomplete:max_output_tokens"
    st.emit(kind, response=final)
    return final, stop


def turn(body: bytes, req: dict[str, Any], controls: dict[str, str], stream: bool) -> Turn:
    """Plan one Responses answer for a request object (HTTP body or WebSocket response.create)."""
    model = req.get("model") if isinstance(req.get("model"), str) else None
    raw_input = req.get("input")
    items = raw_input if isinstance(raw_input, list) else [{"role": "user", "content": raw_input or ""}]
    declared = asks.responses_tools(req, items)
    body = seed_of(body, controls, [model, [_stable(i) for i in items], [t.name for t in declared]])
    rng = rng_for(body)
    exp = base_expected("openai_responses", model, stream)
    scenario = controls.get("scenario", "auto")
    if scenario == "error":
        status = int(controls.get("status", "429"))
        etype, code = _ERRORS.get(status, ("server_error", None))
        exp["error_type"] = etype
        return Turn(exp, error=(status, {"error": {"message": f"emulated {etype}", "type": etype, "param": None,
                                                   "code": code}}))  # fmt: skip
    results = _results(items)
    prompt = json.dumps([req.get("instructions"), items, req.get("tools")], ensure_ascii=False)
    if req.get("generate") is False:  # a warm-up (Codex CLI's prewarm): nothing is generated
        scenario, declared, controls = "text", [], {**controls, "scenario": "text", "text": ""}
    p = plan(body=body, controls=controls, declared=declared, has_results=bool(results), result_texts=results,
             prompt_chars=len(prompt), call_prefix="call_", call_len=24, ask=asks.responses(req))  # fmt: skip
    summaries: list[str] = []
    if p.thinking:
        summaries = ["**Weighing the question**", p.thinking]
    elif isinstance(req.get("reasoning"), dict) and req["reasoning"].get("summary"):
        summaries = ["**Planning the answer**"]
    resp_id = ident(rng, "resp_", 48, _HEX)
    response_model = (model or "gpt") + controls.get("model_suffix", "")
    cached = p.cache_read
    usage = _usage(p)
    base = _response_base(req, resp_id, response_model)
    st = _Events(rng)
    events, emit = st.events, st.emit
    emit("response.created", response=dict(base))
    emit("response.in_progress", response=dict(base))
    midstream = scenario in ("midstream_error", "failed")
    idx = 0
    _reasoning_item(st, idx, summaries)
    sent_text = ""
    if p.text:
        idx += 1
        sent_text = _message_item(st, idx, p.text, midstream)
    exp.update(response_model=response_model, message_id=resp_id, thinking=PART_SEP.join(summaries))
    if midstream:
        exp.update(text=sent_text, stop_reason=None, tool_calls=[])
        _midstream_end(st, base, scenario, exp)
        return Turn(exp, events, None, complete=False)
    for t in p.tools:
        idx += 1
        _function_call_item(st, idx, t)
    final, stop = _completed(st, base, usage, incomplete=scenario == "incomplete")
    exp.update(text=p.text, stop_reason=stop, usage_raw=usage, input_tokens=usage["input_tokens"],
               output_tokens=p.output_tokens, cache_read=cached or None, cache_write=p.cache_write or None,
               reasoning=p.reasoning or None,
               tool_calls=[{"index": i, "call_id": t.call_id, "name": t.name, "arguments": t.arguments}
                           for i, t in enumerate(p.tools)])  # fmt: skip
    return Turn(exp, events, final)


def handle(request: Request) -> Reply:
    body, req, controls = request.body, request.json, request.controls
    stream = req.get("stream") is True
    rng = rng_for(body)
    headers = [("x-request-id", ident(rng, "req_", 32, _HEX)), ("openai-processing-ms", "42"),
               ("openai-version", "2020-10-01")]  # fmt: skip
    t = turn(body, req, controls, stream)
    if t.error is not None:
        return json_reply(t.error[0], t.error[1], pretty=True, headers=headers, expected=t.expected)
    if not stream:
        if t.response is None:  # a failure that the stream reports mid-way: the body says so
            last = t.events[-1]
            obj = last.get("response") or {"error": {"message": last.get("message"), "type": "server_error",
                                                     "param": None, "code": last.get("code")}}  # fmt: skip
            return json_reply(500 if "error" in obj and "id" not in obj else 200, obj, pretty=True, headers=headers,
                              expected=t.expected)  # fmt: skip
        return json_reply(200, t.response, pretty=True, headers=headers, expected=t.expected)
    events = [sse(e["type"], e) for e in t.events]
    reply = Reply(200, [("content-type", "text/event-stream; charset=utf-8"), *headers], None, events, t.expected,
                  complete=t.complete)  # fmt: skip
    return with_malformed(reply, controls)
