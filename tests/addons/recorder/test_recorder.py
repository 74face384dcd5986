"""The recorder without mitmproxy: messages in, rows out (what the recorder process does)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from addons.messages import Route
from tests.recording import RecorderHarness, ended, head, response

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures"


def test_server_side_tools_are_not_left_pending(tmp_path):
    rec = RecorderHarness(tmp_path)
    now = time.time()
    body = json.dumps({"model": "claude-sonnet-4-5", "stream": True,
                       "messages": [{"role": "user", "content": "search"}]}).encode()  # fmt: skip
    req = head("f1", started=now)
    resp = response(200, "text/event-stream", started=now)
    route = Route("anthropic", "anthropic")
    wire = (FIXTURES / "anthropic" / "stream_web_search.sse").read_bytes()
    rec.open(req, resp, route, "sse")
    for i in range(0, len(wire), 100):
        rec.chunk("f1", now + 0.1, wire[i : i + 100])
    rec.close(ended(req, resp=resp, request_body=body, at=now + 0.5, route=route, streamed=True,
                    response_size=len(wire)))  # fmt: skip
    calls = rec.rows("SELECT call_id, tool_name, origin FROM tool_calls")
    assert [c["origin"] for c in calls if c["call_id"].startswith("srvtoolu_")] == ["server"]
    assert not rec.recorder.traces._pending  # the trace is closed: no result will ever come back for it
    (call,) = rec.rows("SELECT ttft_ms, complete, stream FROM model_calls")
    assert call == {"ttft_ms": 100, "complete": 1, "stream": 1}
    rec.shutdown()


def test_chunks_held_to_the_end_of_their_batch_give_what_chunk_by_chunk_gives(tmp_path):
    """After a stream's content started, its chunks wait for the end of their batch and are read
    together (`feed_held`): the rows are those of reading every chunk as it comes, first content
    time included."""
    wire = (FIXTURES / "anthropic" / "stream_thinking_tools.sse").read_bytes()
    pieces = [wire[i : i + 37] for i in range(0, len(wire), 37)]
    written = []
    now = time.time()
    for batch in (1, 7, len(pieces)):  # a batch per chunk (nothing held), seven chunks, the whole body
        rec = RecorderHarness(tmp_path / str(batch))
        req = head("s1", started=now)
        rec.open(req, response(200, "text/event-stream", started=now), Route("anthropic", "anthropic"), "sse")
        for n, piece in enumerate(pieces):
            rec.chunk("s1", now + n / 1000, piece)
            if (n + 1) % batch == 0:
                rec.recorder.feed_held()
        rec.close(ended(req, resp=response(200, "text/event-stream", started=now), at=now + 1, streamed=True,
                        response_size=len(wire), route=Route("anthropic", "anthropic")))  # fmt: skip
        (call,) = rec.rows("SELECT * FROM model_calls")
        tools = rec.rows("SELECT tool_name, arguments FROM tool_calls ORDER BY id")
        rec.shutdown()
        written.append(
            ({k: v for k, v in call.items() if k not in ("id", "event_id", "trace_id", "turn_id")}, tools)
        )
    assert call["ttft_ms"] is not None and tools and call["complete"] == 1
    assert written[0] == written[1] == written[2]
