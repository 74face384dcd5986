"""The hand-over between the hooks and the recorder: messages survive the wire exactly, the outbox
never blocks, and an overflow drops whole tails of streamed bodies, counted and reported."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addons.memory import MMAP_THRESHOLD
from addons.messages import (
    Barrier,
    Chunk,
    Chunks,
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
from addons.proxy.outbox import BATCH_BYTES, ROUND_BYTES, Outbox, count, pack
from tests.recording import RecorderHarness, ended, head, response


def test_every_message_survives_the_wire():
    req = head("f1", started=1.5, headers=[("x-a", "1"), ("x-a", "2")])
    resp = ResponseHead(200, (("content-type", "text/event-stream"),), 1.6)
    batch: list[Message] = [
        StreamOpened(req, resp, Route("anthropic", "anthropic", None), "sse"),
        Chunk("f1", 1.7, b"\x00\xffdata: x\n\n"),
        Chunks("f1", b"data: a\n\ndata: b\n\n", [10, 10], [1.71, 1.72]),
        WsOpened(req, resp, ("python", 4242)),
        WsMessage("f1", True, b"{}", True, 1.8),
        FlowEnded(
            request=req, ended=2.0, route=Route("openai", "openai_chat"), request_body=b"{}", dropped_chunks=3
        ),
        Barrier(7),
        Stop("stopped", 1, 2),
    ]
    assert decode(encode(batch)) == batch


@pytest.mark.parametrize("packed", [False, True], ids=["Chunk", "put_chunk"])
def test_the_outbox_drops_the_tail_of_a_stream_past_its_budget_and_says_so(packed):
    outbox = Outbox(budget=10_000)
    req = head("f1", started=time.time())

    def put(key: str, data: bytes) -> None:
        outbox.put_chunk(key, 1.0, data) if packed else outbox.put(Chunk(key, 1.0, data))

    for _ in range(5):
        put("f1", b"x" * 4000)  # the third one goes over the budget
    put("f2", b"y" * 10)  # another flow, still over: dropped too
    taken = outbox.take()
    if packed:  # the kept chunks of f1, in one message
        assert [(m.key, m.sizes) for m in taken] == [("f1", [4000, 4000, 4000])]
    else:
        assert [len(m.data) for m in taken] == [4000, 4000, 4000]
    put("f1", b"z")  # room again, but f1 already lost a chunk: its tail stays dropped
    outbox.put(ended(req))
    (end,) = outbox.take()
    assert isinstance(end, FlowEnded) and end.dropped_chunks == 3
    assert outbox.stats.dropped_chunks == 4 and outbox.stop_message("stopped").dropped_chunks == 4
    outbox.closed = True  # the recorder is gone for good: a chunk is a dropped message, as any other
    put("f3", b"w")
    assert outbox.stats.dropped_messages == 1 and outbox.stats.dropped_chunks == 4


def test_take_packs_each_flows_chunks_and_keeps_every_other_message_in_place():
    a, b = head("a", started=1.0), head("b", started=1.0)
    opened = StreamOpened(b, ResponseHead(200, ()), Route("anthropic", "anthropic"), "sse")
    outbox = Outbox()
    outbox.put_chunk("a", 1.1, b"a1")
    outbox.put(opened)
    outbox.put_chunk("b", 1.2, b"b1")
    outbox.put_chunk("a", 1.3, b"a2")
    outbox.put(Chunk("m", 1.35, b"mcp"))  # an MCP stream's chunk: never packed
    outbox.put(ended(a))
    outbox.put_chunk("a", 1.4, b"a3")  # after its FlowEnded (a late chunk): a new message
    outbox.put_chunk("b", 1.5, b"b2")
    outbox.put(Barrier(1))
    outbox.put_chunk("b", 1.6, b"b3")
    batch = outbox.take()
    assert batch == [
        Chunks("a", b"a1a2", [2, 2], [1.1, 1.3]), opened, Chunks("b", b"b1b2", [2, 2], [1.2, 1.5]),
        Chunk("m", 1.35, b"mcp"), ended(a), Chunks("a", b"a3", [2], [1.4]), Barrier(1),
        Chunks("b", b"b3", [2], [1.6]),
    ]  # fmt: skip
    assert count(batch) == 10 and decode(encode(batch)) == batch


_KEYS = ("a", "b", "c")


@st.composite
def _queued(draw) -> list:
    """What the hooks could queue: chunks of three flows, their FlowEnded, other flows' messages,
    barriers, MCP chunks."""
    items: list = []
    for n in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["chunk", "chunk", "chunk", "ended", "other", "barrier", "mcp"]))
        key = draw(st.sampled_from(_KEYS))
        if kind == "chunk":
            items.append((key, float(n), b"%d," % n))
        elif kind == "ended":
            items.append(ended(head(key, started=0.0)))
        elif kind == "other":
            items.append(ended(head("x", started=float(n))))
        elif kind == "barrier":
            items.append(Barrier(n))
        else:
            items.append(Chunk(key, float(n), b"m%d" % n))
    return items


def _unpacked(batch: list) -> list:
    return [
        (m.key, at, m.data[sum(m.sizes[:i]) : sum(m.sizes[: i + 1])]) if type(m) is Chunks else m
        for m in batch
        for i, at in (enumerate(m.times) if type(m) is Chunks else [(0, None)])
    ]


def _fences(items: list, key: str) -> list:
    """For each chunk of `key`, how many of its own FlowEnded and of the barriers came before it."""
    seen, out = 0, []
    for item in items:
        if type(item) is tuple and item[0] == key:
            out.append(seen)
        elif type(item) is Barrier or (type(item) is FlowEnded and item.request.key == key):
            seen += 1
    return out


@settings(max_examples=300, deadline=None)
@given(_queued())
def test_packing_moves_no_chunk_past_its_flows_end_or_a_barrier_and_loses_nothing(items):
    batch = pack(list(items))
    flat = _unpacked(batch)
    assert count(batch) == len(items) and sorted(map(repr, flat)) == sorted(map(repr, items))
    assert [m for m in flat if type(m) is not tuple] == [m for m in items if type(m) is not tuple]
    for key in _KEYS:
        assert [m for m in flat if type(m) is tuple and m[0] == key] == [
            m for m in items if type(m) is tuple and m[0] == key
        ]  # each flow's chunks in their order
        assert _fences(flat, key) == _fences(items, key)
    assert all(m.sizes for m in batch if type(m) is Chunks)


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


def test_a_flood_goes_in_frames_below_the_mmap_threshold_in_order():
    """`take` holds about `BATCH_BYTES` (a chunk more at most): a flood's megabytes are several
    frames, each below mitmdump's fixed mmap threshold, and together they are the stream as it came."""
    outbox = Outbox()
    stream = [bytes([65 + i % 26]) * 1000 for i in range(2000)]  # 2 MB in 1,000-byte chunks
    for i, data in enumerate(stream):
        outbox.put_chunk("f1", float(i), data)
    frames = []
    while outbox.waiting:
        frames.append(outbox.take())
    assert len(frames) > 2_000_000 // BATCH_BYTES
    for batch in frames:
        (chunks,) = batch
        assert len(chunks.data) <= BATCH_BYTES and len(encode(batch)) < MMAP_THRESHOLD
    assert b"".join(b[0].data for b in frames) == b"".join(stream)
    assert [t for b in frames for t in b[0].times] == [float(i) for i in range(2000)]
    assert outbox.waiting_bytes == 0


def _pausing(outbox: Outbox) -> threading.Thread:
    """A consumer in its pause between rounds, for a minute unless something ends it."""
    thread = threading.Thread(target=outbox.pause, args=(60.0,), daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    "hurry",
    [
        lambda o: o.put(Barrier(1)),  # a flush (a tool hold, `capsem flush`, the tests)
        lambda o: o.put(Stop("stopped")),  # the end of the session
        lambda o: o.expedite(),  # a budget check waits for the cost of a call that ended
        lambda o: [o.put_chunk("f1", 0.0, b"x" * 65536) for _ in range(ROUND_BYTES // 65536 + 2)],  # a flood
    ],
    ids=["barrier", "stop", "expedite", "a round's bytes"],
)
def test_what_must_go_now_ends_the_pause_between_rounds(hurry):
    outbox = Outbox()
    outbox.put_chunk("f1", 0.0, b"first")
    pausing = _pausing(outbox)
    hurry(outbox)
    pausing.join(30)
    assert not pausing.is_alive()


def _lingering(outbox: Outbox) -> threading.Thread:
    """A consumer whose round's interval is (almost) over, lingering for a minute if it may."""
    thread = threading.Thread(target=outbox.pause, args=(0.001, 60.0), daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    "message",
    [
        lambda: ended(head("f2", started=1.0), resp=response()),  # a flow's end: rows to commit
        lambda: Chunk("mcp-1", 1.0, b"data: {}\n\n"),  # an MCP event stream's chunk: answers to match
    ],
    ids=["flow ended", "mcp chunk"],
)
def test_only_chunks_waiting_the_pause_lingers_until_a_message_comes(message):
    outbox = Outbox()
    outbox.put_chunk("f1", 0.0, b"y" * 200)
    pausing = _lingering(outbox)
    pausing.join(0.5)
    assert pausing.is_alive()  # past its interval: only a stream's chunks wait
    outbox.put_chunk("f1", 1.0, b"y" * 200)
    pausing.join(0.2)
    assert pausing.is_alive()
    outbox.put(message())
    pausing.join(30)
    assert not pausing.is_alive()


def test_a_waiting_message_ends_the_pause_after_its_interval():
    outbox = Outbox()
    outbox.put(ended(head("f1", started=1.0), resp=response()))
    outbox.put_chunk("f2", 0.0, b"y" * 200)
    pausing = _lingering(outbox)
    pausing.join(30)
    assert not pausing.is_alive()
    outbox.take()  # the message is taken: chunks alone linger again
    outbox.put_chunk("f2", 1.0, b"y" * 200)
    pausing = _lingering(outbox)
    pausing.join(0.5)
    assert pausing.is_alive()
    outbox.expedite()
    pausing.join(30)
    assert not pausing.is_alive()


def test_a_paced_streams_chunks_wait_for_the_round():
    """Chunks below a round's bytes, a flow's end, other messages: none of them ends the pause."""
    outbox = Outbox()
    pausing = _pausing(outbox)
    for i in range(100):
        outbox.put_chunk("f1", float(i), b"y" * 200)
    outbox.put(ended(head("f2", started=1.0), resp=response()))
    pausing.join(0.5)
    assert pausing.is_alive()
    outbox.expedite()  # (ends the thread)
    pausing.join(30)
    assert not pausing.is_alive()
