"""A text the recorder cuts short (an answer past `content_max_bytes`, a tool result's or a system
prompt's preview, a tool call's arguments, an MCP preview) is scrubbed before the cut: a secret
across the cut is redacted whole, none of it kept."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from addons.body import cap_text
from addons.messages import Route
from addons.recorder.build import KEPT_PREVIEW_BYTES
from capsem.redact import Scrubber
from capsem.settings import defaults
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
