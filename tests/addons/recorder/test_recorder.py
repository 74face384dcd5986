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
