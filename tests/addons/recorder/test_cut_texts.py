"""A text the recorder cuts short (an answer past `content_max_bytes`, a tool result's or a system
prompt's preview, a tool call's arguments, an MCP preview, a body's preview in `net_events`) is
scrubbed before the cut: a secret across the cut is redacted whole, none of it kept."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from addons.body import Preview, cap_text
from addons.messages import CUT_MARGIN, Route
from addons.proxy.tap import RequestTap, ResponseTap
from addons.recorder.previews import KEPT_PREVIEW_BYTES
from addons.records import ERROR_MESSAGE_BYTES
from capsem.redact import Scrubber
from capsem.settings import defaults
from capsem.store.bodies import read_body
from tests.recording import RecorderHarness, ended, head, response

TOKEN = "ghp_" + "k3Yq9ZpLm2Rt7Wx8Nc1Jd6Vb0Hs4Fg5Tu2Ae"
"""A GitHub token (the rule wants `ghp_` and 36 more): its first part alone matches no rule."""
PART = TOKEN[:16]


def _across(limit: int) -> str:
    """Text in which `TOKEN` starts 16 bytes before `limit` and ends past it."""
    return "x" * (limit - 16) + TOKEN + " and more after it"


def test_a_secret_across_the_cut_goes_whole():
    text = _across(100)
    assert PART in cap_text(text, 100)  # cut first, then scrubbed: the start of the token would stay
    kept = cap_text(text, 100, Scrubber().scrub)
    assert PART not in kept and "ghp_" not in kept and kept.endswith(" more bytes]")
    assert cap_text("short", 100, Scrubber().scrub) == "short"  # what fits is left to the writer


def test_only_the_text_around_the_cut_is_scrubbed_before_it():
    """The writer scrubs all that is kept: before the cut, only what a secret across it could
    span is read (a megabyte answer is not scrubbed twice)."""
    read: list[str] = []

    def scrub(text: str) -> str | None:
        read.append(text)
        return Scrubber().scrub(text)

    for text, limit in ((_across(1_000_000), 1_000_000), ("é" * 600_000 + _across(200), 1_200_200)):
        read.clear()
        kept = cap_text(text, limit, scrub)
        (part,) = read
        assert len(part) <= 2 * CUT_MARGIN and TOKEN in part  # the margin either side of the cut
        assert "ghp_" not in kept and len(kept.rsplit("\n[... ", 1)[0].encode()) <= limit


KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" * 900
"""28,800 characters of a private key's base64."""


@pytest.mark.parametrize(
    "text",
    [
        "intro " + TOKEN + " " + _across(20_000 - 7 - len(TOKEN)) + " more" * 5000,  # far before, and across
        "intro\n-----BEGIN PRIVATE KEY-----\n"
        + KEY_BODY
        + "\n-----END PRIVATE KEY-----\n",  # from far before
    ],
)
def test_a_text_cut_short_is_stored_without_a_secret_anywhere_in_it(tmp_path, text):
    """A token far before the cut (left to the writer), one across it, a private key whose body
    starts long before the cut and ends past it: none of them is stored."""
    limit = 20_000
    rec = RecorderHarness(tmp_path, dataclasses.replace(defaults().capture, content_max_bytes=limit))
    answer = {
        "id": "m1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }  # fmt: skip
    now = time.time()
    rec.close(ended(head("f1", started=now), resp=response(200, started=now), body=json.dumps(answer).encode(),
                    request_body=b'{"model": "claude-sonnet-4-5"}', route=Route("anthropic", "anthropic")))  # fmt: skip
    (call,) = rec.rows("SELECT text_content FROM model_calls")
    kept = call["text_content"]
    assert kept.endswith(" more bytes]") and "ghp_" not in kept and KEY_BODY[:64] not in kept, kept[:300]
    rec.shutdown()


def test_what_the_recorder_cuts_keeps_no_part_of_a_secret(tmp_path):
    limit = 1000
    settings = dataclasses.replace(defaults().capture, content_max_bytes=limit)
    rec = RecorderHarness(tmp_path, settings)
    request = {
        "model": "claude-sonnet-4-5",
        "system": _across(KEPT_PREVIEW_BYTES),
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "cat", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": _across(KEPT_PREVIEW_BYTES)}
                ],
            },
        ],
    }
    answer = {
        "id": "m1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": _across(limit)},
                    {"type": "tool_use", "id": "t2", "name": "write", "input": {"body": _across(limit)}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 5, "output_tokens": 1},
    }  # fmt: skip
    now = time.time()
    rec.close(ended(head("f1", started=now), resp=response(200, started=now), body=json.dumps(answer).encode(),
                    request_body=json.dumps(request).encode(), route=Route("anthropic", "anthropic")))  # fmt: skip
    (call,) = rec.rows("SELECT text_content, system_prompt_preview FROM model_calls")
    (result,) = rec.rows("SELECT content_preview FROM tool_responses")
    (tool,) = rec.rows("SELECT arguments FROM tool_calls")
    for kept in (
        call["text_content"],
        call["system_prompt_preview"],
        result["content_preview"],
        tool["arguments"],
    ):
        assert kept.endswith(" more bytes]") and "ghp_" not in kept, kept[-80:]
    rec.shutdown()


@pytest.mark.parametrize("limit", [1, 17, 4096])
def test_the_cut_stays_within_the_limit_on_a_character_boundary(limit):
    text = "é" * 3000 + TOKEN + "😀" * 2000
    kept = cap_text(text, limit, Scrubber().scrub)
    head_part = kept.rsplit("\n[... ", 1)[0]
    assert len(head_part.encode()) <= limit and head_part == head_part.encode().decode()


def test_a_preview_keeps_a_margin_and_reads_across_its_cut():
    data = _across(100).encode() + b"y" * 10_000
    preview = Preview(100)
    for i in range(0, len(data), 7):  # as chunks arrive
        preview.add(data[i : i + 7])
    assert len(preview.buf) == 100 + CUT_MARGIN and preview.total == len(data)
    assert PART in preview.text()  # without a scrubber: the first 100 bytes as they were
    kept = preview.text(Scrubber().scrub)
    assert "ghp_" not in kept and kept.endswith(f"[... {len(data) - 100} more bytes]")
    assert len(kept.rsplit("\n[... ", 1)[0].encode()) <= 100
    whole = Preview(100)
    whole.add(b"short")
    assert whole.text(Scrubber().scrub) == "short"  # what fits is left to the writer


def test_the_taps_keep_the_margin_past_their_limit():
    response_tap, request_tap = ResponseTap("k", None, 100), RequestTap(100)
    for _ in range(100):
        response_tap(b"x" * 97)
        request_tap(b"x" * 97)
    assert len(response_tap.preview) == len(request_tap.body) == 100 + CUT_MARGIN


def _net_previews(tmp_path, limit: int, **flow) -> dict:
    settings = dataclasses.replace(defaults().capture, preview_bytes=limit)
    rec = RecorderHarness(tmp_path, settings)
    now = time.time()
    request = head("f1", started=now, host="example.test", path="/upload")
    rec.close(ended(request, **flow))
    (row,) = rec.rows("SELECT request_body_preview, response_body_preview FROM net_events")
    rec.shutdown()
    return row


def test_a_body_preview_in_net_events_keeps_no_part_of_a_secret(tmp_path):
    limit = 4000
    body = _across(limit).encode() + b"z" * 20_000
    row = _net_previews(tmp_path, limit, resp=response(200, "text/plain"), body=body, request_body=body)
    for kept in row.values():
        assert kept.endswith(" more bytes]") and "ghp_" not in kept, kept[-80:]


def test_a_streamed_preview_cut_short_keeps_no_part_of_a_secret_its_deltas_spell(tmp_path):
    """A stream no parser reads (its first bytes kept by the tap): a token spelled over two
    events, the second past the cut, is found with the deltas joined."""
    limit = 2000
    events = [
        f"data: {json.dumps({'delta': piece})}\n\n".encode()
        for piece in ("x" * (limit - 80), TOKEN[:20], TOKEN[20:], "and more " * 3000)
    ]
    stream = b"".join(events)
    assert len(events[0]) + len(events[1]) < limit < len(b"".join(events[:3]))
    row = _net_previews(tmp_path, limit, resp=response(200, "text/event-stream"), body=None,
                        stream_preview=stream[: limit + CUT_MARGIN], response_size=len(stream))  # fmt: skip
    kept = row["response_body_preview"]
    assert kept.endswith(" more bytes]") and TOKEN[:20] not in kept, kept[-200:]


def test_a_kept_calls_request_preview_keeps_no_part_of_a_secret(tmp_path):
    rec = RecorderHarness(tmp_path)
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 9, "messages": [
        {"role": "user", "content": _across(KEPT_PREVIEW_BYTES - 84)}]}).encode()  # fmt: skip
    assert body.index(b"ghp_") < KEPT_PREVIEW_BYTES < body.index(b"ghp_") + len(TOKEN)
    answer = {
        "id": "m1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }  # fmt: skip
    now = time.time()
    rec.close(ended(head("f1", started=now), resp=response(200, started=now), body=json.dumps(answer).encode(),
                    request_body=body, route=Route("anthropic", "anthropic")))  # fmt: skip
    (net,) = rec.rows("SELECT request_body_preview FROM net_events")
    (call,) = rec.rows("SELECT request_body_preview FROM model_calls")
    for kept in (net["request_body_preview"], call["request_body_preview"]):
        assert kept.endswith(" more bytes]") and "ghp_" not in kept, kept
    rec.shutdown()


@pytest.mark.parametrize(
    ("route", "path", "status", "content_type", "body"),
    [
        # a proxy's plain-text error event in a stream
        (Route("anthropic", "anthropic"), "/v1/messages", 200, "text/event-stream",
         b"event: error\ndata: " + _across(ERROR_MESSAGE_BYTES).encode() + b"\n\n"),
        # an error page that is no JSON ("HTTP 502: " comes first)
        (Route("google", "gemini"), "/v1beta/models/gemini-2.5-flash:generateContent", 502, "text/html",
         _across(ERROR_MESSAGE_BYTES - len("HTTP 502: ")).encode()),
        # a provider's own JSON error, long
        (Route("openai", "openai_chat"), "/v1/chat/completions", 400, "application/json",
         json.dumps({"error": {"type": "invalid_request_error",
                               "message": _across(ERROR_MESSAGE_BYTES)}}).encode()),
    ],
)  # fmt: skip
def test_an_error_message_cut_short_keeps_no_part_of_a_secret(
    tmp_path, route, path, status, content_type, body
):
    rec = RecorderHarness(tmp_path)
    now = time.time()
    request = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    rec.close(ended(head("f1", started=now, path=path), resp=response(status, content_type, started=now),
                    body=body, request_body=request, route=route))  # fmt: skip
    (call,) = rec.rows("SELECT error_message FROM model_calls")
    kept = call["error_message"]
    assert kept.endswith(" more bytes]") and "ghp_" not in kept, kept[-80:]
    assert len(kept.rsplit("\n[... ", 1)[0].encode()) <= ERROR_MESSAGE_BYTES
    rec.shutdown()


def _stored(rec: RecorderHarness, direction: str) -> bytes:
    stored, blob = read_body(rec.writer.conn, 1, direction)
    assert blob["truncated"] == 1
    return stored


def test_a_body_cut_at_max_body_bytes_keeps_no_part_of_a_secret(tmp_path):
    limit = 5000
    rec = RecorderHarness(tmp_path, dataclasses.replace(defaults().capture, max_body_bytes=limit))
    request = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 9, "messages": [
        {"role": "user", "content": _across(limit - 87) + "y" * 9000}]}).encode()  # fmt: skip
    assert request.index(b"ghp_") < limit < request.index(b"ghp_") + len(TOKEN)
    text = _across(limit - 121) + "z" * 9000  # its place in the answer: after the JSON around it
    answer = json.dumps({
        "id": "m1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "output_tokens": 1}}).encode()  # fmt: skip
    assert answer.index(b"ghp_") < limit < answer.index(b"ghp_") + len(TOKEN)
    now = time.time()
    rec.close(ended(head("f1", started=now), resp=response(200, started=now), body=answer,
                    request_body=request, route=Route("anthropic", "anthropic")))  # fmt: skip
    rec.writer.commit()
    for direction in ("request", "response"):
        stored = _stored(rec, direction)
        assert b"ghp_" not in stored and limit - len(TOKEN) < len(stored) <= limit, stored[-60:]
    rec.shutdown()


def test_a_stream_cut_at_max_body_bytes_keeps_no_part_of_a_secret(tmp_path):
    limit = 5000
    rec = RecorderHarness(tmp_path, dataclasses.replace(defaults().capture, max_body_bytes=limit))
    start = {"type": "message_start", "message": {"id": "m1", "type": "message", "role": "assistant",
             "model": "claude-sonnet-4-5", "content": [], "usage": {"input_tokens": 5, "output_tokens": 0}}}  # fmt: skip
    events = [f"event: message_start\ndata: {json.dumps(start)}\n\n".encode()]
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x" * 100}}
    events += [f"event: content_block_delta\ndata: {json.dumps(delta)}\n\n".encode()] * 40
    stream = b"".join(events)
    stream = stream[: limit - 16] + TOKEN.encode() + stream[limit - 16 :]  # across the cut, between events
    now = time.time()
    request = head("f1", started=now)
    rec.open(request, response(200, "text/event-stream", started=now), Route("anthropic", "anthropic"), "sse")
    for i in range(0, len(stream), 997):
        rec.chunk("f1", now, stream[i : i + 997])
    rec.close(ended(request, resp=response(200, "text/event-stream", started=now), body=None, streamed=True,
                    response_size=len(stream), request_body=b'{"model": "claude-sonnet-4-5"}',
                    route=Route("anthropic", "anthropic")))  # fmt: skip
    rec.writer.commit()
    stored = _stored(rec, "response")
    assert b"ghp_" not in stored and limit - len(TOKEN) < len(stored) <= limit, stored[-60:]
    rec.shutdown()
