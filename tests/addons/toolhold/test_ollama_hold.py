"""Ollama's native `/api/chat` answers (NDJSON lines, or one JSON object) held for the tool rules:
at every cut, an allowed call reaches the agent byte-identical; a denied one is taken out of
`tool_calls` and named in `content`; the call ids are the recorder's."""

from __future__ import annotations

import json

from addons.providers import parser_for
from addons.toolhold import HeldCall, calls_in, machine_for, rewrite_json
from addons.toolhold.lines import LineHold
from tests.addons.toolhold.test_hold import allow, deny, through_a_failing_decision

MODEL = "qwen3:8b"
CALLS = [
    {"function": {"name": "read", "arguments": {"path": "notes.txt"}}},
    {"function": {"name": "bash", "arguments": {"command": "rm -rf capsem-doomed.txt"}}},
]


def _line(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _piece(**message) -> dict:
    return {"model": MODEL, "created_at": "2026-11-29T12:00:00Z",
            "message": {"role": "assistant", "content": "", **message}, "done": False}  # fmt: skip


FINAL = {"model": MODEL, "created_at": "2026-11-29T12:00:01Z", "message": {"role": "assistant", "content": ""},
         "done": True, "done_reason": "stop", "prompt_eval_count": 12, "eval_count": 30}  # fmt: skip
STREAM = b"".join(
    [_line(_piece(thinking="I will look first")), _line(_piece(content="Let me chec")),
     _line(_piece(content="k. ✓")), _line(_piece(tool_calls=CALLS)), _line(FINAL)]
)  # fmt: skip


def run(pieces: list[bytes], decide) -> bytes:
    machine = machine_for("ollama", decide)
    assert machine is not None
    hold = LineHold(machine)
    sent = [c for p in pieces if p for c in hold(p)] + hold(b"")
    assert all(sent) and hold.failure is None, "an empty chunk would end an HTTP/1.1 chunked body"
    return b"".join(sent)


def recorded_ids(body: bytes) -> list[str]:
    """The call ids the recorder gives the calls of `body` (`tool_calls.call_id`)."""
    parser = parser_for("ollama")
    return [c.call_id for c in parser.parse_response(body, 200).tool_calls]


def test_allowed_calls_pass_byte_identical_at_every_cut():
    for point in range(1, len(STREAM)):
        calls: list[HeldCall] = []
        assert run([STREAM[:point], STREAM[point:]], allow(calls)) == STREAM
        assert [(c.name, c.arguments) for c in calls] == [
            (c["function"]["name"], c["function"]["arguments"]) for c in CALLS
        ]
        assert [c.call_id for c in calls] == recorded_ids(STREAM) == ["ollama_read_0", "ollama_bash_1"]
    assert run([bytes([b]) for b in STREAM], allow([])) == STREAM  # a byte at a time


def test_a_denied_call_is_named_in_content_at_every_cut():
    denied = run([STREAM], deny({"bash"}))
    for point in range(1, len(STREAM)):
        assert run([STREAM[:point], STREAM[point:]], deny({"bash"})) == denied
    lines = [json.loads(line) for line in denied.splitlines()]
    assert (
        len(lines) == 5
        and lines[-1] == FINAL
        and lines[:3] == [json.loads(x) for x in STREAM.splitlines()[:3]]
    )
    message = lines[3]["message"]
    assert message["tool_calls"] == CALLS[:1]  # the allowed call, unchanged
    assert "bash tool call was denied by policy rule 'no-rm'" in message["content"]
    every = run([STREAM], deny())
    assert "tool_calls" not in json.loads(every.splitlines()[3])["message"]
    assert [c.name for c in parser_for("ollama").parse_response(every, 200).tool_calls] == []


def test_whole_answers_one_object_or_ndjson_lines():
    whole = json.dumps(
        {**FINAL, "message": {"role": "assistant", "content": "ok", "tool_calls": CALLS}}
    ).encode()
    assert [c.call_id for c in calls_in("ollama", whole)] == ["ollama_read_0", "ollama_bash_1"]
    rewritten = json.loads(rewrite_json("ollama", whole, deny({"bash"})))
    assert rewritten["message"]["tool_calls"] == CALLS[:1] and rewritten["message"]["content"].startswith(
        "ok\n\n"
    )
    assert rewrite_json("ollama", whole, allow([])) is None  # nothing denied: the bytes go as they came
    assert [c.name for c in calls_in("ollama", STREAM)] == ["read", "bash"]  # a stream read whole
    assert rewrite_json("ollama", STREAM, deny({"bash"})) == run([STREAM], deny({"bash"}))


def test_a_line_without_a_call_goes_out_as_soon_as_it_is_whole():
    machine = machine_for("ollama", deny())
    hold = LineHold(machine)
    first, second = STREAM.splitlines(keepends=True)[1:3]
    assert hold(first[:10]) == [] and hold(first[10:] + second[:5]) == [first]
    assert hold(second[5:]) == [second]


def test_a_failing_decision_lets_the_lines_through_unchanged():
    assert through_a_failing_decision(LineHold, "ollama", STREAM, size=50) == STREAM
