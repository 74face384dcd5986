"""From the hooks to the recorder: a bounded outbox that never makes a flow wait.

The hooks call `Outbox.put(message)`, which appends to a deque and returns: no lock, no I/O,
and a wake-up only when the deque was empty (or for a `Barrier` or `Stop`). A model call's
stream tap calls `put_chunk(key, at, data)` instead, which appends a plain tuple: no message
object on the event loop. The consumer thread then waits `interval` seconds (`BATCH_INTERVAL`;
less when a `Barrier` or `Stop` waits, a budget check wants a call's cost or a round's bytes
are there; up to `LINGER` when only streams' chunks wait: `pause`), so the chunks of busy
streams pile up and go on together, in batches of about `BATCH_BYTES`, in each of which `take`
packs each flow's chunks into one `Chunks` message (`pack`): the recorder then takes them in one
step, not one per chunk.
When more than `budget` bytes wait (the recorder has fallen behind), the chunks of streamed
bodies are dropped, counted, and every later chunk of the same flow too, so the recorder sees a
clean prefix of that body and the flow's row says how many chunks it lost (capture degrades;
the flow never waits). `Barriers` is what both recorders that drain an outbox share: flushing
through it and the spend reports that come back (`addons/proxy/handover.py: RecorderProcess` in
mitmdump, `addons/recorder/thread.py: RecorderThread` in tests).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from addons.messages import Barrier, Chunk, Chunks, FlowEnded, Message, Stop

logger = logging.getLogger("addons.proxy.handover")

_URGENT = (Barrier, Stop)


@dataclass
class HandoverStats:
    """What the outbox had to drop."""

    dropped_chunks: int = 0
    dropped_messages: int = 0
    """Messages other than chunks dropped (only past twice the budget, or after the recorder died)."""


BATCH_INTERVAL = 0.25
"""Seconds the consumer lets messages pile up between its rounds (`RecorderProcess._send_round`),
and after the first message when it was idle: the recorder's own commit interval. Each round costs
both processes a wake-up, frames and the recorder's per-batch steps whatever it holds: at 20 ms,
one paced stream (200 chunks a second) spent more CPU on those than on its chunks; against 100 ms,
250 ms cut one paced stream's sender thread from 5.7 to 3.3 ms and the recorder from 11.9 to
10.1 ms. Nothing waits for it: a `Barrier` or `Stop`, a budget check waiting for a call's cost
(`expedite`) and `ROUND_BYTES` waiting end the wait at once (`pause`), and the agent's bytes never
pass here."""

LINGER = 1.0
"""Seconds a round may wait in all when, after `BATCH_INTERVAL`, only model calls' chunks wait
(`pause`): they make no row before their flow ends (the recorder only reads them), so a long
stream's chunks go on in fewer, larger rounds. Each round costs the sender thread and the recorder
~0.2-0.5 ms of CPU on this 2-core VM whatever it holds (their code runs cold between two rounds):
a paced stream of 2.5 s went on in ten rounds, now in four. Any other message (a flow's end, an
MCP event, a `Barrier`) ends the wait at once, so rows are committed as soon as before."""

ROUND_BYTES = 256 * 1024
"""Bytes waiting that start a round before `BATCH_INTERVAL` has passed (a stream faster than
1 MB/s: a flood goes on in rounds of about this, so what mitmdump holds for the recorder stays
small and its heap does not grow and shrink by megabytes per round)."""

BATCH_BYTES = 64 * 1024
"""About what one frame to the recorder holds at most (`take`): a flood's batch would otherwise
be megabytes, each copy of it (the joined chunks, msgpack's buffer) above mitmdump's fixed mmap
threshold (`addons/memory.py`) and so a fresh mapping, faulted in page by page (~1,000 page
faults a 2 MiB flood on the sender thread). Frames this size come from the heap."""

ChunkItem = tuple[str, float, bytes]
"""A chunk `put_chunk` queued: (flow key, time, bytes)."""


def _size(message: Message | ChunkItem) -> int:
    kind = type(message)
    if kind is tuple:
        return len(message[2]) + 64  # type: ignore[index]
    if kind is Chunk:
        return len(message.data) + 64  # type: ignore[union-attr]
    if kind is FlowEnded:
        return len(message.request_body or b"") + len(message.response_body or b"") + 1024  # type: ignore[union-attr]
    return 512


class Outbox:
    """A bounded, drop-counting queue between the event loop (producer) and one consumer thread."""

    def __init__(self, budget: int = 256 * 1024 * 1024) -> None:
        self.budget = budget
        self.stats = HandoverStats()
        self.closed = False
        self._items: deque[Message | ChunkItem] = deque()
        self._put_bytes = 0  # written by the producer only
        self._taken_bytes = 0  # written by the consumer only
        self._dropping: dict[str, int] = {}  # flow key -> chunks dropped so far
        self.wake = threading.Event()
        """Set when the first message comes to an empty outbox (an idle consumer waits on it)."""
        self._hurry = threading.Event()
        self._hurried = False  # `_hurry` set for a full round (producer side; `take` resets it)
        self.urgent = False
        """A `Barrier` or `Stop` waits: the consumer goes on at once, without waiting for a batch."""
        self._messages_put = 0  # messages other than `put_chunk`'s (producer side)
        self._messages_taken = 0  # (consumer side)
        self._lingering = False  # the consumer waits on past `interval` for chunks only (`pause`)

    def pause(self, interval: float, linger: float = LINGER) -> None:
        """Consumer side: wait `interval` for a round to fill, or less when it must go now (a
        `Barrier` or `Stop`, `expedite`, `ROUND_BYTES` waiting); then, when only model calls'
        chunks wait, on up to `linger` in all, until anything else comes (`LINGER`)."""
        if not self.urgent and not self._hurry.wait(interval) and linger > interval:
            self._lingering = True
            if self._messages_put == self._messages_taken:  # after the flag: a message put now hurries
                self._hurry.wait(linger - interval)
            self._lingering = False
        self._hurry.clear()

    def expedite(self) -> None:
        """Let what waits go to the recorder now (a budget check waits for a call's cost)."""
        self._hurry.set()

    @property
    def waiting(self) -> bool:
        """Messages are waiting to be taken."""
        return bool(self._items)

    @property
    def waiting_bytes(self) -> int:
        return self._put_bytes - self._taken_bytes

    @property
    def taken_bytes(self) -> int:
        """Bytes taken so far (as `waiting_bytes` counts them); consumer side."""
        return self._taken_bytes

    def put(self, message: Message) -> None:
        """Queue `message` (or drop and count it); never blocks, never raises."""
        if self.closed:
            self.stats.dropped_messages += 1
            return
        kind = type(message)
        if kind is Chunk:
            key = message.key  # type: ignore[union-attr]
            if key in self._dropping or self.waiting_bytes > self.budget:
                self._dropping[key] = self._dropping.get(key, 0) + 1
                self.stats.dropped_chunks += 1
                return
        elif kind is FlowEnded:
            dropped = self._dropping.pop(message.request.key, 0)  # type: ignore[union-attr]
            if dropped:
                message = msgspec.structs.replace(message, dropped_chunks=dropped)  # type: ignore[arg-type]
        size = _size(message)
        if self.waiting_bytes > 2 * self.budget and kind not in _URGENT:
            self.stats.dropped_messages += 1
            return
        self._put_bytes += size
        items = self._items
        items.append(message)
        self._messages_put += 1
        if kind in _URGENT:
            self.urgent = True
            self._hurry.set()
            self.wake.set()
        elif len(items) == 1:  # one wake-up per batch, not per chunk
            self.wake.set()
        if self._lingering:
            self._hurry.set()

    def put_chunk(self, key: str, at: float, data: bytes) -> None:
        """Queue a chunk of a model call's streamed body, as `put(Chunk(key, at, data))` does (the
        same budget, drops and counts), without a message object: `take` packs it."""
        if self.closed:
            self.stats.dropped_messages += 1
            return
        if key in self._dropping or self._put_bytes - self._taken_bytes > self.budget:
            self._dropping[key] = self._dropping.get(key, 0) + 1
            self.stats.dropped_chunks += 1
            return
        self._put_bytes += len(data) + 64
        items = self._items
        items.append((key, at, data))
        if len(items) == 1:
            self.wake.set()
        elif self._put_bytes - self._taken_bytes > ROUND_BYTES and not self._hurried:
            self._hurried = True
            self._hurry.set()

    def put_lone_chunk(self, key: str, at: float, data: bytes) -> None:
        """A chunk of an MCP event stream: a `Chunk` of its own, never packed (its answers are
        matched across flows, in the order everything came)."""
        self.put(Chunk(key, at, data))

    def stop_message(self, status: str) -> Stop:
        """The `Stop` that ends the session, with what was dropped on the way."""
        return Stop(status, self.stats.dropped_chunks, self.stats.dropped_messages)

    def take(self, max_bytes: int = BATCH_BYTES) -> list[Message]:
        """What is waiting (up to about `max_bytes`), oldest first, chunks packed (`pack`);
        consumer side."""
        self.urgent = self._hurried = False
        out: list[Message | ChunkItem] = []
        taken = 0
        items = self._items
        messages = 0
        while items and taken < max_bytes:
            message = items.popleft()
            taken += _size(message)
            messages += type(message) is not tuple
            out.append(message)
        self._taken_bytes += taken
        self._messages_taken += messages
        return pack(out)


def pack(items: list[Message | ChunkItem]) -> list[Message]:
    """`items` with each flow's queued chunks packed into one `Chunks`, where its first chunk was.

    A model call's chunks feed only its own reader, so they may move ahead of other flows'
    messages; never past their own flow's `FlowEnded`, a `Barrier` or the `Stop`: a chunk after
    one of those starts a new `Chunks`. Every other message keeps its place."""
    out: list[Message] = []
    open_: dict[str, list] = {}
    packs: list[list] = []  # [index in out, key, parts, times]
    for item in items:
        kind = type(item)
        if kind is tuple:
            key, at, data = item  # type: ignore[misc]
            entry = open_.get(key)
            if entry is None:
                entry = open_[key] = [len(out), key, [data], [at]]
                packs.append(entry)
                out.append(None)  # type: ignore[arg-type]  # its place, filled below
            else:
                entry[2].append(data)
                entry[3].append(at)
            continue
        if kind is FlowEnded:
            open_.pop(item.request.key, None)  # type: ignore[union-attr]
        elif kind in _URGENT:
            open_.clear()
        out.append(item)  # type: ignore[arg-type]
    for index, key, parts, times in packs:
        out[index] = Chunks(
            key, parts[0] if len(parts) == 1 else b"".join(parts), list(map(len, parts)), times
        )
    return out


def count(batch: list[Message]) -> int:
    """How many messages `batch` held before `pack` (each chunk one), as the drop counts count."""
    return sum(len(m.sizes) if type(m) is Chunks else 1 for m in batch)  # type: ignore[union-attr]


class Barriers:
    """Flushing through an outbox: a `Barrier` goes in, its acknowledgement comes back."""

    outbox: Outbox
    exit_reason: str | None

    def __init__(self) -> None:
        self._acks: dict[int, threading.Event] = {}
        self._next = 0
        self.on_spend: Callable[[str], None] | None = None
        """Gets the JSON of each `spend` report (this session's spend; only with budgets)."""
        self.on_down: Callable[[], None] | None = None
        """Called (on a status thread) when the recorder dies: this session's spend is unconfirmed."""

    def _spend(self, text: str) -> None:
        if self.on_spend is not None:
            try:
                self.on_spend(text)
            except Exception as exc:  # a bad report must not stop the status reader
                logger.warning("capsem: a spend report could not be read: %r", exc)

    def ack(self, token: int) -> None:
        event = self._acks.pop(token, None)
        if event is not None:
            event.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything put so far is committed (False on a timeout or a dead recorder)."""
        self._next += 1
        done = self._acks[self._next] = threading.Event()
        self.outbox.put(Barrier(self._next))
        return done.wait(timeout) and self.exit_reason is None
