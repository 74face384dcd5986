"""The hand-over between the hooks and the recorder: messages survive the wire exactly, the outbox
never blocks, and an overflow drops whole tails of streamed bodies, counted and reported."""

from __future__ import annotations

import time

from addons.messages import (
    Barrier,
    Chunk,
    FlowEnded,
    Message,
    ResponseHead,
    Route,
    Stop,
    StreamOpened,
    WsMessage,
    WsOpened,
    decode,
    encode,
)
from addons.proxy.outbox import Outbox
from tests.recording import RecorderHarness, ended, head, response


def test_every_message_survives_the_wire():
    req = head("f1", started=1.5, headers=[("x-a", "1"), ("x-a", "2")])
    resp = ResponseHead(200, (("content-type", "text/event-stream"),), 1.6)
    batch: list[Message] = [
        StreamOpened(req, resp, Route("anthropic", "anthropic", None), "sse"),
        Chunk("f1", 1.7, b"\x00\xffdata: x\n\n"),
        WsOpened(req, resp, ("python", 4242)),
        WsMessage("f1", True, b"{}", True, 1.8),
        FlowEnded(
            request=req, ended=2.0, route=Route("openai", "openai_chat"), request_body=b"{}", dropped_chunks=3
        ),
        Barrier(7),
        Stop("stopped", 1, 2),
    ]
    assert decode(encode(batch)) == batch


def test_the_outbox_drops_the_tail_of_a_stream_past_its_budget_and_says_so():
    outbox = Outbox(budget=10_000)
    req = head("f1", started=time.time())
    for _ in range(5):
        outbox.put(Chunk("f1", 1.0, b"x" * 4000))  # the third one goes over the budget
    outbox.put(Chunk("f2", 1.0, b"y" * 10))  # another flow, still over: dropped too
    taken = outbox.take()
    assert [len(m.data) for m in taken] == [4000, 4000, 4000]
    outbox.put(Chunk("f1", 1.0, b"z"))  # room again, but f1 already lost a chunk: its tail stays dropped
    outbox.put(ended(req))
    (end,) = outbox.take()
    assert isinstance(end, FlowEnded) and end.dropped_chunks == 3
    assert outbox.stats.dropped_chunks == 4 and outbox.stop_message("stopped").dropped_chunks == 4


def test_a_flow_with_dropped_chunks_is_recorded_as_incomplete_with_the_reason(tmp_path):
    rec = RecorderHarness(tmp_path)
    now = time.time()
    req = head("f1", started=now)
    resp = response(200, "text/event-stream", started=now)
    route = Route("anthropic", "anthropic")
    wire = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
        b'"model":"claude-sonnet-4-5","usage":{"input_tokens":5,"output_tokens":1}}}\n\n'
    )
    rec.open(req, resp, route, "sse")
    rec.chunk("f1", now + 0.1, wire)
    rec.close(ended(req, resp=resp, request_body=b'{"model": "claude-sonnet-4-5"}', route=route, streamed=True,
                    response_size=len(wire) * 10, dropped_chunks=9))  # fmt: skip
    (call,) = rec.rows("SELECT complete, error_message FROM model_calls")
    (net,) = rec.rows("SELECT decision, error FROM net_events")
    assert call["complete"] == 0
    assert net["decision"] == "error" and "9 body chunks not recorded" in net["error"]
    rec.shutdown()


def test_the_recorders_health_reports_are_kept_in_memory_and_each_new_loss_is_logged(caplog):
    """A full disk: the counts live in mitmdump (and its log) even when nothing could be written."""
    from addons.proxy.handover import RecorderProcess

    recorder = RecorderProcess(Outbox(), b"{}")
    lost = '{"capture_commit_failures":"6","capture_rows_lost":"%d","capture_last_error":"database or disk is full"}'
    with caplog.at_level("WARNING", logger="addons.proxy.handover"):
        recorder._health(lost % 0)
        recorder._health(lost % 525)
        recorder._health(lost % 525)
    assert recorder.health["capture_rows_lost"] == "525"
    assert [r.getMessage() for r in caplog.records] == [
        "capsem: 525 rows could not be written to session.db (database or disk is full); the record is incomplete"
    ]
