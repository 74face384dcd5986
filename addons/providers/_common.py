"""Helpers shared by the provider parsers: tolerant JSON, content text, errors, numbers.

Everything here is pure and never raises on bad input: a body that is not JSON gives `None`,
a field of the wrong type is treated as absent. Provider-specific meaning (usage, blocks,
stream events) stays in the provider modules.

JSON is read by msgspec (several times faster than `json`, which matters once per streamed
event); the few documents msgspec refuses but `json` accepts (NaN, lone surrogates, numbers
beyond a float) are read by `json`, so both accept exactly the same inputs.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from addons.providers.events import PARSE_ERROR, Done, Error, LlmEvent, Meta
from addons.records import RequestInfo

__all__ = [
    "arguments_text",
    "as_int",
    "as_str",
    "body_object",
    "body_snippet",
    "content_text",
    "dumps_compact",
    "error_fields",
    "last_assistant",
    "load_json",
    "load_json_object",
    "model_from_text",
    "request_object",
]

_MODEL_RE = re.compile(r'"model"\s*:\s*"((?:[^"\\]|\\.)*)"')
_TEXT_TYPES = ("text", "input_text", "output_text")  # tuples: values may be unhashable
_SNIPPET_CHARS = 200


_decode = msgspec.json.Decoder().decode
decode_json = _decode
"""msgspec's JSON decoder: the parsers' hot loops call it first and `load_json` only when it raises
(one Python call less per event)."""


def load_json(data: bytes | str) -> Any | None:
    """Parse JSON text, or return None when it is not valid JSON (or not UTF-8)."""
    try:
        return _decode(data)
    except Exception:  # msgspec refuses a few documents json reads: let json decide
        try:
            return json.loads(data)
        except (ValueError, TypeError, RecursionError):
            return None


def load_json_object(data: bytes | str) -> dict[str, Any] | None:
    """Parse JSON text that must be an object; None for anything else."""
    obj = load_json(data)
    return obj if isinstance(obj, dict) else None


def dumps_compact(obj: Any) -> str:
    """Compact JSON with non-ASCII kept as is (how tool inputs are re-serialized)."""
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return ""


def arguments_text(value: Any) -> str:
    """Tool arguments as JSON text: a string as sent, None as "", anything else compact JSON."""
    if isinstance(value, str):
        return value
    return "" if value is None else dumps_compact(value)


def model_from_text(text: str) -> str | None:
    """The first `"model": "..."` value in (possibly truncated or invalid) JSON text."""
    match = _MODEL_RE.search(text)
    if match is None:
        return None
    raw = match.group(1)
    value = load_json(f'"{raw}"')
    return value if isinstance(value, str) and value else (raw or None)


def request_object(body: bytes) -> tuple[dict[str, Any] | None, RequestInfo]:
    """Parse a request body as a JSON object.

    Returns:
        The object (None when unusable) and a `RequestInfo` with `error` set and the model
        recovered by regex when the body is not a JSON object.
    """
    info = RequestInfo()
    if not body or not body.strip():
        info.error = "empty request body"
        return None, info
    obj = load_json(body)
    if isinstance(obj, dict):
        return obj, info
    if obj is None:
        try:
            body.decode("utf-8")
            info.error = "request body is not valid JSON"
        except UnicodeDecodeError:
            info.error = "request body is not valid UTF-8"
    else:
        info.error = f"request body is a JSON {type(obj).__name__}, not an object"
    info.model = model_from_text(body.decode("utf-8", "replace"))
    return None, info


def last_assistant(messages: list[Any]) -> int:
    """Index of the last assistant message (-1 when none): the results after it are the new ones."""
    return max(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
        default=-1,
    )


_DIGITS_RE = re.compile(r"-?[0-9]+")


def as_int(value: Any) -> int | None:
    """An integer count from an int, an integral float or a string of ASCII digits; None otherwise
    (`"²"` and `"--5"` are no counts: `str.isdigit` says yes to the one, `int` refuses both)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _DIGITS_RE.fullmatch(text := value.strip()):
        return int(text)
    return None


def as_str(value: Any) -> str | None:
    """A non-empty string, or None."""
    return value if isinstance(value, str) and value else None


def _placeholder(block: Any) -> str:
    if isinstance(block, dict):
        kind = block.get("type")
        if kind == "tool_reference":
            return f"[tool_reference: {block.get('tool_name') or block.get('name') or ''}]"
        if isinstance(kind, str) and kind:
            return f"[{kind}]"
    return "[content]"


def content_text(content: Any, *, sep: str = "\n", placeholders: bool = True) -> str:
    """Text of a message/tool-result `content`: a string, or a list of content blocks.

    Text blocks (`text`, `input_text`, `output_text`, plain strings) are joined with `sep`.
    When there is no text block at all and `placeholders` is set, each other block becomes a
    placeholder such as ``[image]`` or ``[document]`` (joined with newlines). `None` gives "".
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return dumps_compact(content)
    texts: list[str] = []
    others: list[Any] = []
    for block in content:
        if isinstance(block, str):
            texts.append(block)
        elif (
            isinstance(block, dict)
            and isinstance(block.get("text"), str)
            and (block.get("type") in _TEXT_TYPES or "type" not in block)
        ):
            texts.append(block["text"])
        else:
            others.append(block)
    if texts:
        return sep.join(texts)
    if placeholders and others:
        return "\n".join(_placeholder(b) for b in others)
    return ""


def error_fields(obj: Any) -> tuple[str | None, str | None] | None:
    """(type, message) of an error body or error event, or None when `obj` is not an error.

    Understands `{"error": {"type"|"code"|"status", "message"}}` (Anthropic, OpenAI, vLLM,
    OpenRouter, Gemini), `{"error": "message"}` (Ollama) and vLLM's old top-level
    `{"object": "error", "type", "message"}`.
    """
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if not err and obj.get("object") == "error":
        err = obj
    if not err:
        return None
    if isinstance(err, str):
        return None, err
    if not isinstance(err, dict):
        return None, dumps_compact(err)
    kind: str | None = None
    for key in ("type", "code", "status"):
        value = err.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and value != "":
            kind = str(value)
            break
    message = err.get("message")
    return kind, message if isinstance(message, str) else None


def body_snippet(body: bytes) -> str:
    """A short one-line excerpt of a body that could not be parsed (for error messages)."""
    text = " ".join(body.decode("utf-8", "replace").split())
    return text if len(text) <= _SNIPPET_CHARS else text[: _SNIPPET_CHARS - 1] + "…"


def body_object(
    body: bytes, status: int, *, listing: str | None = None
) -> tuple[dict[str, Any] | None, list[LlmEvent]]:
    """A whole non-streamed body: the JSON object to read, or the events of an error body.

    Args:
        listing: the field a success body must hold as a list (`content`, `choices`...).

    Returns:
        For a success body the provider module should read: the object and its `Meta` (top-level
        `id` and `model`). Else None and the events: an error body (status >= 400 or a top-level
        `error`) gives its `Error` and `Done` (a complete answer); a body that is not a JSON
        object, or lacks its `listing`, gives a parse error (and, for status >= 400, an `Error`
        with an excerpt).
    """
    obj = load_json_object(body)
    if obj is None:
        if status < 400:
            return None, [PARSE_ERROR]
        snippet = body_snippet(body)
        return None, [PARSE_ERROR, Error(None, f"HTTP {status}: {snippet}" if snippet else f"HTTP {status}")]
    fields = error_fields(obj)
    if fields is None and status < 400:
        if listing is not None and not isinstance(obj.get(listing), list):
            return None, [PARSE_ERROR]
        return obj, [Meta(as_str(obj.get("id")), as_str(obj.get("model")))]
    kind, message = fields if fields is not None else (None, None)
    if message is None:
        detail = obj.get("message") or obj.get("detail")
        message = detail if isinstance(detail, str) else f"HTTP {status}: {body_snippet(body)}"
    return None, [Error(kind, message), Done()]
