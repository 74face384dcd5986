"""Anthropic models on Amazon Bedrock: `POST /model/<modelId>/invoke` (JSON) and
`/model/<modelId>/invoke-with-response-stream` (binary `application/vnd.amazon.eventstream`).

The Anthropic handler builds the answer (the model comes from the URL, `stream` from the
path); streamed events are re-wrapped as Bedrock sends them: one `chunk` frame per event,
payload `{"bytes": base64(event JSON), "p": <random-length padding>}`, real CRC32s, no pings,
`amazon-bedrock-invocationMetrics` added to `message_stop`. A mid-stream error becomes an
exception frame; HTTP errors are Bedrock's `{"message": ...}` with `x-amzn-ErrorType`.
"""

from __future__ import annotations

import base64
import json
import string
from dataclasses import replace
from typing import Any
from urllib.parse import unquote

from capsem.emulator import anthropic
from capsem.emulator.eventstream import encode_frame
from capsem.emulator.reply import Reply, Request, base_expected, json_reply
from capsem.emulator.script import rng_for

_ERRORS = {400: "ValidationException", 403: "AccessDeniedException", 404: "ResourceNotFoundException",
           429: "ThrottlingException", 500: "InternalServerException", 503: "ServiceUnavailableException"}  # fmt: skip
_PAD = string.ascii_letters + string.digits


def _model_id(request: Request) -> str:
    match = request.match
    return unquote(match.group("model")) if match is not None else "anthropic.claude"


def response_model(model_id: str) -> str:
    """The model name Bedrock puts in the message: `us.anthropic.claude-x-v1:0` -> `claude-x`."""
    name = model_id.rsplit("/", 1)[-1].split("anthropic.", 1)[-1]
    head, _, version = name.rpartition("-v")
    return head if head and version[:1].isdigit() else name


def handle(request: Request) -> Reply:
    model_id = _model_id(request)
    stream = request.path.rstrip("/").endswith("-with-response-stream")
    req = {**request.json, "model": response_model(model_id), "stream": stream}
    controls = request.controls
    if controls.get("scenario") == "error":
        status = int(controls.get("status", "429"))
        etype = _ERRORS.get(status, "InternalServerException")
        exp = base_expected("anthropic", model_id, stream)  # the error type is only in a header
        kind = f"{etype}:http://internal.amazon.com/coral/com.amazon.bedrock/"
        return json_reply(
            status, {"message": f"emulated {etype}"}, expected=exp, headers=[("x-amzn-errortype", kind)]
        )
    reply = anthropic.handle(replace(request, json=req))
    reply.expected["model"] = model_id
    reply.headers = [("x-amzn-requestid", _request_id(request.body))]
    if not stream or reply.events is None:
        reply.headers.insert(0, ("content-type", "application/json"))
        return reply
    rng = rng_for(request.body + b"bedrock")
    frames: list[bytes] = []
    for raw in reply.events:
        name, data = _sse(raw)
        if name == "ping":
            continue
        obj = _loads(data)
        if name == "error" and isinstance(obj, dict):
            message = (obj.get("error") or {}).get("message") or "error"
            frames.append(encode_frame({":message-type": "exception", ":exception-type": "modelStreamErrorException",
                                        ":content-type": "application/json"},
                                       json.dumps({"message": message}).encode()))  # fmt: skip
            reply.expected["error_type"] = "modelStreamErrorException"
            continue
        if not isinstance(obj, dict):  # a malformed event (scenario=malformed): a frame with a broken CRC
            frame = bytearray(_chunk(data.encode(), rng))
            frame[-1] ^= 0xFF
            frames.append(bytes(frame))
            continue
        if obj.get("type") == "message_stop":
            usage = reply.expected.get("usage_raw") or {}
            obj["amazon-bedrock-invocationMetrics"] = {
                "inputTokenCount": usage.get("input_tokens", 0),
                "outputTokenCount": usage.get("output_tokens", 0),
                "invocationLatency": rng.randint(300, 3000),
                "firstByteLatency": rng.randint(100, 300),
            }
        frames.append(_chunk(json.dumps(obj, separators=(",", ":")).encode(), rng))
    reply.events = frames
    reply.headers = [("content-type", "application/vnd.amazon.eventstream"),
                     ("x-amzn-bedrock-content-type", "application/json"), *reply.headers]  # fmt: skip
    return reply


def _chunk(event: bytes, rng) -> bytes:
    pad = "".join(rng.choice(_PAD) for _ in range(rng.randint(1, 40)))
    payload = json.dumps({"bytes": base64.b64encode(event).decode(), "p": pad}).encode()
    return encode_frame({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
                        payload)  # fmt: skip


def _sse(raw: bytes) -> tuple[str | None, str]:
    name, data = None, []
    for line in raw.decode("utf-8", "replace").split("\n"):
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    return name, "\n".join(data)


def _loads(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _request_id(body: bytes) -> str:
    rng = rng_for(body + b"rid")
    return "-".join("".join(rng.choice("0123456789abcdef") for _ in range(n)) for n in (8, 4, 4, 4, 12))


def handle_vertex(request: Request) -> Reply:
    """Anthropic on Vertex AI (`.../publishers/anthropic/models/<model>:rawPredict|streamRawPredict`):
    the model is in the URL, `stream` stays in the body, the wire format is first-party Anthropic."""
    match = request.match
    model = unquote(match.group("model")) if match is not None else "claude"
    return anthropic.handle(replace(request, json={**request.json, "model": model}))
