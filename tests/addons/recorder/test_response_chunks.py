"""`response_chunks`: where each chunk of a streamed answer ends in the stored (decoded) body and
when it came, for `capsem replay --speed`."""

from __future__ import annotations

import json
import zlib

from addons.messages import Route
from tests.recording import RecorderHarness, ended, head, response

EVENTS = [
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","model":"claude-x","usage":'
    b'{"input_tokens":3,"output_tokens":0}}}\n\n',
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text",'
    b'"text":""}}\n\n',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
    b'"text":"hi"}}\n\n',
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":'
    b'{"output_tokens":1}}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n',
]
ROUTE = Route("anthropic", "anthropic")


def test_a_gzipped_stream_keeps_decoded_ends_and_times(tmp_path):
    h = RecorderHarness(tmp_path)
    request = head("s1", started=1000.0)
    gz = zlib.compressobj(wbits=31)
    wire = [gz.compress(e) + gz.flush(zlib.Z_SYNC_FLUSH) for e in EVENTS]
    wire[-1] += gz.flush()
    h.open(request, response(200, "text/event-stream", headers=[("content-encoding", "gzip")]), ROUTE, "sse")
    for n, data in enumerate(wire):
        h.chunk("s1", 1000.0 + 0.25 * (n + 1), data)
    h.close(ended(request, resp=response(200, "text/event-stream", headers=[("content-encoding", "gzip")]),
                  request_body=b'{"model":"claude-x","stream":true,"messages":[]}', route=ROUTE, streamed=True,
                  at=1001.5))  # fmt: skip
    (row,) = h.rows("SELECT model_call_id, chunks FROM response_chunks")
    (call,) = h.rows("SELECT id FROM model_calls")
    assert row["model_call_id"] == call["id"]
    ends = [0, *(len(b"".join(EVENTS[: n + 1])) for n in range(len(EVENTS)))]
    assert json.loads(row["chunks"]) == [[ends[n + 1], 250 * (n + 1)] for n in range(len(EVENTS))]
    h.shutdown()


def test_a_whole_body_has_no_chunks(tmp_path):
    h = RecorderHarness(tmp_path)
    request = head("w1", started=1000.0)
    answer = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": [],
                         "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}).encode()  # fmt: skip
    h.close(ended(request, resp=response(), body=answer, request_body=b'{"model":"claude-x","messages":[]}',
                  route=ROUTE))  # fmt: skip
    assert h.rows("SELECT id FROM model_calls") and not h.rows("SELECT * FROM response_chunks")
    h.shutdown()
