"""Which API-key variables a replayed agent gets placeholders for: those its recorded calls used."""

from __future__ import annotations

import json

from assembler.replay.recording import _keys


def headers(*names: str) -> str:
    return json.dumps(dict.fromkeys(names, "hash:0123456789ab"))


def test_keys_follow_where_the_recorded_calls_carried_them():
    assert _keys("api.anthropic.com", headers("x-api-key", "anthropic-version"), "") == {"ANTHROPIC_API_KEY"}
    assert _keys("api.anthropic.com", headers("authorization"), "") == set()  # Claude Code with OAuth
    assert _keys("api.openai.com", headers("authorization"), "") == {"OPENAI_API_KEY"}
    assert _keys("generativelanguage.googleapis.com", headers("x-goog-api-key"), "") == {"GEMINI_API_KEY"}
    assert _keys("generativelanguage.googleapis.com", headers(), "alt=sse&key=hash:ab") == {"GEMINI_API_KEY"}
    assert _keys("localhost", None, None) == set()
