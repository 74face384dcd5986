"""Recorder without mitmproxy: a FlowData in, rows out (the recorder thread's logic)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from addons.flowdata import FlowData
from addons.providers import Route
from addons.recorder import CaptureSettings, Recorder
from addons.store import SessionStore
from capsem.redact import Scrubber
from tests.conftest import rows

FIXTURES = Path(__file__).parent / "fixtures"


def flow(body: dict, *, status: int = 200, content_type: str = "text/event-stream") -> FlowData:
    now = time.time()
    return FlowData(
        key="f1", started=now, scheme="https", host="api.anthropic.com", port=443, method="POST",
        path="/v1/messages", query="", http_version="HTTP/1.1",
        request_headers=[("content-type", "application/json")], route=Route("anthropic", "anthropic"),
        request_body=json.dumps(body).encode(), request_size=len(json.dumps(body)), status=status,
        response_headers=[("content-type", content_type)], response_started=now, response_ended=now + 0.5,
        streamed=content_type == "text/event-stream",
    )  # fmt: skip


def test_server_side_tools_are_not_left_pending(tmp_path):
    store = SessionStore(tmp_path / "session.db", Scrubber())
    recorder = Recorder(store, CaptureSettings(), Scrubber())
    fd = flow(
        {"model": "claude-sonnet-4-5", "stream": True, "messages": [{"role": "user", "content": "search"}]}
    )
    wire = (FIXTURES / "anthropic" / "stream_web_search.sse").read_bytes()
    recorder.open(fd)
    for i in range(0, len(wire), 100):
        recorder.chunk("f1", fd.started + 0.1, wire[i : i + 100])
    fd.response_size = len(wire)
    recorder.close(fd)
    store.close()
    calls = rows(tmp_path / "session.db", "SELECT call_id, tool_name, origin FROM tool_calls")
    assert [c["origin"] for c in calls if c["call_id"].startswith("srvtoolu_")] == ["server"]
    assert not recorder.traces._pending  # the trace is closed: no result will ever come back for it
    (call,) = rows(tmp_path / "session.db", "SELECT ttft_ms, complete, stream FROM model_calls")
    assert call == {"ttft_ms": 100, "complete": 1, "stream": 1}
