"""The recorder's main loop, and the process mitmdump starts it in (`python -m addons.recorder.main`).

`run()` is the loop both hosts share (the child process here, `RecorderThread` in tests): it
takes batches of messages, hands them to the `Recorder`, commits at least every
`commit_interval`, acknowledges barriers once everything before them is committed, and returns
at `Stop` (or when its input ends). `finish()` then writes what is still open, closes
session.db and rolls the session up into main.db with its status and capture health.

In the child, stdin carries frames of a 4-byte big-endian length and a payload: first the
JSON spec (`RecorderSpec`), then msgpack batches of messages; stdout carries `ready`, `ack <token>`,
`spend <json>` (this session's spend, when budgets are configured) and `stopped`.
Input that ends without a `Stop` means mitmdump died: everything received is written and the
session is marked `crashed`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from addons.memory import freeze_startup, keep_large_blocks
from addons.messages import Barrier, FlowEnded, Message, Stop
from addons.recorder.frames import Frames
from addons.spec import RecorderSpec, capture_settings
from capsem import __version__, health
from capsem.ids import utc_now
from capsem.log_scrub import scrub_logs
from capsem.private import CHILD_UMASK

if TYPE_CHECKING:  # imported where used: the recorder's parsers and price table (~0.2 s) load
    # while session.db opens
    from addons.recorder.inbox import Inbox
    from addons.recorder.otlp.live import LiveExport
    from addons.recorder.recorder import Recorder
    from capsem.store.writer import SessionWriter

logger = logging.getLogger("addons.recorder")


@dataclass
class Loop:
    """One recorder with its writer, as `open_recorder` makes them."""

    recorder: Recorder
    writer: SessionWriter
    spec: RecorderSpec
    price_source: str | None = None
    """The price table the warm-up loaded (written to session_meta by the loop)."""
    warming: threading.Thread | None = None
    live: LiveExport | None = None
    """OTLP export of what is committed (`export.otlp.endpoint`), on its own thread."""
    flows: int = 0
    """`FlowEnded` messages handled (mitmdump counts those a dead recorder had not committed)."""
    inbox: Inbox | None = None
    """The socket `capsem run`'s watcher and sampler send their rows to (`inbox.py`)."""

    def health(self, stop: Stop | None = None) -> dict[str, str]:
        """Every `capture_*` count of the session so far (session_meta's keys), its predecessors'
        included."""
        values = health.merged(self.writer.health.meta(), Path(self.spec.db_path).parent)
        if self.spec.restart:
            values.update(capture_recorder_restarts=str(self.spec.restart),
                          capture_missed_flows=str(self.recorder.restart_missed or self.spec.missed_flows))  # fmt: skip
        if self.recorder.failures:
            values["capture_failed_messages"] = str(self.recorder.failures)
        if stop is not None and (stop.dropped_chunks or stop.dropped_messages):
            values.update(capture_dropped_chunks=str(stop.dropped_chunks),
                          capture_dropped_messages=str(stop.dropped_messages))  # fmt: skip
        if "capture_last_error" in values:
            values["capture_last_error"] = self.writer.scrubber.scrub(values["capture_last_error"]) or ""
        return values


def open_recorder(spec: RecorderSpec) -> Loop:
    """Open session.db and the recorder (raises when the database cannot be opened)."""
    from addons.recorder.recorder import Recorder
    from addons.recorder.spend import SessionSpend
    from capsem.redact import scrubber_for
    from capsem.store.writer import SessionWriter

    settings = capture_settings(spec)
    scrubber = scrubber_for(settings)
    for secret in spec.learn:
        scrubber.learn(secret)
    writer = SessionWriter(Path(spec.db_path), scrubber)
    health.reserve(Path(spec.db_path).parent)  # now, while there is room
    if spec.restart:  # the session goes on: its start stays, its loss is counted
        writer.set_meta(capture_recorder_restarts=str(spec.restart),
                        capture_missed_flows=str(spec.missed_flows))  # fmt: skip
    else:
        writer.set_meta(session_id=spec.session_id, capsem_version=__version__, started_at=utc_now(),
                        mode=spec.mode, emulated=str(spec.emulated).lower())  # fmt: skip
    writer.commit()
    spend = None
    if spec.track_spend:
        spend = SessionSpend(spec.session_id)
        spend.load(writer.conn)
    recorder = Recorder(writer, settings, spend)
    if spec.restart:
        recorder.restart_missed = spec.missed_flows
    return Loop(recorder, writer, spec, live=live_export(spec), inbox=open_inbox(writer))


def open_inbox(writer: SessionWriter) -> Inbox | None:
    """The inbox of this session's other writers' rows; None (logged) when it cannot listen: the
    watcher and sampler then keep their rows until the session ends and write them themselves."""
    from addons.recorder.inbox import Inbox

    try:
        return Inbox.open(writer)
    except OSError as exc:
        logger.warning("capsem: the recorder cannot take rows from capsem run (%r)", exc)
        return None


def live_export(spec: RecorderSpec) -> LiveExport | None:
    """The live OTLP export of this session, started, when `export.otlp.endpoint` is set."""
    if not spec.otlp or not spec.otlp.get("endpoint"):
        return None
    from addons.recorder.otlp.live import LiveExport
    from addons.recorder.otlp.send import Target
    from addons.recorder.otlp.spans import Options

    otlp = spec.otlp
    target = Target(otlp["endpoint"], otlp.get("headers") or {},
                    Options(bool(otlp.get("content")), otlp.get("profile") or "latest"))  # fmt: skip
    return LiveExport(target, spec.session_id, Path(spec.db_path), Path(spec.main_db_path)).start()


def warm_up(loop: Loop, *, freeze: bool = False) -> threading.Thread:
    """Load prices and the tokenizer on a thread, beside the loop: the first messages are handled
    at once (a new connection's process is looked up while it is still open); a call that needs a
    price meanwhile waits for the table like any first use would. `freeze`: then leave what the
    process holds out of the garbage collector's later collections (`freeze_startup`: the recorder
    process's own; not a test's)."""

    def load() -> None:
        try:
            from pricing import current_table
            from pricing.estimate import warm

            warm()
            loop.price_source = current_table().source
        except Exception as exc:  # prices or tokenizer missing: calls are recorded unpriced
            logger.warning("capsem: warming up the recorder failed: %r", exc)
        if freeze:
            freeze_startup()

    thread = loop.warming = threading.Thread(target=load, name="capsem-warm-up", daemon=True)
    thread.start()
    return thread


def run(loop: Loop, batches: Callable[[], list[Message] | None], ack: Callable[[int], None],
        report: Callable[[str], None] | None = None) -> Stop | None:  # fmt: skip
    """Handle batches until a `Stop` (returned) or the end of input (None); `report` gets the
    status lines: `committed <flows>` (how many `FlowEnded` are committed), `health <json>` (when
    the writer's health changes) and `spend <json>` (budgets)."""
    recorder, writer, spend = loop.recorder, loop.writer, loop.recorder.spend
    interval = commit_interval(loop)
    last_commit = last_tick = time.monotonic()
    status = _Status(report, loop)
    while True:
        batch = batches()
        if batch is None:
            return None
        for message in batch:
            kind = type(message)
            if kind is Barrier:
                if writer.commit():
                    committed(loop)
                    status.committed(loop.flows)
                ack(message.token)  # type: ignore[union-attr]
            elif kind is Stop:
                return message  # type: ignore[return-value]
            else:
                if kind is FlowEnded:
                    loop.flows += 1
                recorder.handle(message)
        recorder.feed_held()
        status.health()
        if spend is not None and report is not None:
            line = spend.report()
            if line is not None:
                report(line)
        now = time.monotonic()
        if now - last_tick >= 1.0:
            recorder.tick()
            last_tick = now
        if loop.price_source is not None:  # the warm-up thread loaded the prices
            writer.set_meta(price_source=loop.price_source)
            loop.price_source = None
        if loop.inbox is not None:
            take_inbox(loop)
        if writer.pending and now - last_commit >= interval:
            if writer.commit():
                committed(loop)
                status.committed(loop.flows)
            last_commit = now
        if loop.inbox is not None and not writer.pending:
            loop.inbox.acknowledge()


def commit_interval(loop: Loop) -> float:
    """Seconds between the loop's commits (`capture.commit_interval_ms`)."""
    return loop.spec.capture.get("commit_interval_ms", 250) / 1000


def take_inbox(loop: Loop) -> None:
    """Queue the rows that came to the inbox (a failure is counted as a failed message)."""
    assert loop.inbox is not None
    try:
        loop.inbox.handle(loop.writer, loop.inbox.take())
    except Exception as exc:
        loop.recorder.failures += 1
        logger.warning("capsem: rows from capsem run could not be queued: %r", exc)


class _Status:
    """The `committed` and `health` lines of the loop, each sent when its value changed."""

    def __init__(self, report: Callable[[str], None] | None, loop: Loop) -> None:
        self.report = report
        self.loop = loop
        self.flows = 0
        self.last: tuple[int, int, int, str | None] = (0, 0, 0, None)

    def committed(self, flows: int) -> None:
        if self.report is not None and flows != self.flows:
            self.flows = flows
            self.report(f"committed {flows}")

    def health(self) -> None:
        """A change of the writer's health goes to mitmdump and to the health file."""
        health = self.loop.writer.health
        now = (health.commit_failures, health.rows_lost, self.loop.recorder.failures, health.last_error)
        if now != self.last:
            self.last = now
            keep_health(self.loop, self.report)


def keep_health(loop: Loop, report: Callable[[str], None] | None, stop: Stop | None = None) -> None:
    """The session's capture counts where they survive a full disk: the health file beside
    session.db (`capsem/health.py`) and mitmdump's memory (a `health` line)."""
    values = loop.health(stop)
    health.write(Path(loop.spec.db_path).parent, values)
    if report is not None:
        report("health " + json.dumps(values, separators=(",", ":")))


def committed(loop: Loop) -> None:
    """After a commit: this session's spend to main.db (budgets), a wake-up to the OTLP export."""
    if loop.recorder.spend is not None:
        loop.recorder.spend.save(Path(loop.spec.main_db_path))
    if loop.live is not None:
        loop.live.wake()


def finish(loop: Loop, stop: Stop | None, main_db: Path | None = None,
           report: Callable[[str], None] | None = None) -> None:  # fmt: skip
    """Write what is open, close session.db, roll the session up into main.db and mark it with the
    stop's status (`crashed` when the input ended without one: mitmdump died). The capture counts
    are kept (`keep_health`) before main.db is opened: when that fails (a full disk) they are
    what tells the session was not recorded whole."""
    from capsem.rollup import finish_session, open_main

    status = stop.status if stop is not None else "crashed"
    if loop.warming is not None:
        loop.warming.join(30)
    if loop.price_source is not None:
        loop.writer.set_meta(price_source=loop.price_source)
    loop.recorder.close()
    if loop.recorder.spend is not None:
        loop.recorder.spend.close()  # the rollup below writes the session's final spend rows
    if stop is not None and (stop.dropped_chunks or stop.dropped_messages):
        loop.writer.set_meta(capture_dropped_chunks=str(stop.dropped_chunks),
                             capture_dropped_messages=str(stop.dropped_messages))  # fmt: skip
    if loop.inbox is not None:  # what came before the stop (its clients flushed before it)
        take_inbox(loop)
        if loop.writer.commit():
            loop.inbox.acknowledge()
        loop.inbox.close()
    if loop.recorder.failures:
        loop.writer.set_meta(capture_failed_messages=str(loop.recorder.failures))
    loop.writer.close(end=True)
    keep_health(loop, report, stop)
    if loop.live is not None:  # before the rollup: a backfill leaves a running session to it
        loop.live.close()
    main = open_main(main_db)
    try:
        finish_session(main, loop.spec.session_id, status)
    finally:
        main.close()


# -- the child process -------------------------------------------------------------------------


def main() -> int:
    # mitmdump decides when recording ends (a Stop, or the end of input if it dies): a Ctrl-C or a
    # SIGTERM sent to the whole process group must not cut the recorder short of its last rows
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.umask(CHILD_UMASK)  # capsem's own process: what it writes (session.db, its files) is private
    keep_large_blocks()
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    scrubbing = scrub_logs(uncaught=True)  # its stderr is mitmdump's log
    frames = Frames(sys.stdin.fileno())
    first = frames.next(None)
    if not first:
        return 2
    spec = msgspec.json.decode(first, type=RecorderSpec)

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        loop = open_recorder(spec)
    except Exception as exc:
        logger.error("capsem: cannot open %s: %r", spec.db_path, exc)
        return 3
    scrubbing.use(loop.writer.scrubber)  # the rows' scrubber: it knows the session's credentials
    say("ready")
    if not spec.restart:
        _recover_crashed(spec)
    if spec.team:  # a process of its own: PostgreSQL never holds up this loop
        from addons.recorder.team_push import start_pusher

        start_pusher(spec.session_id)
    warm_up(loop, freeze=True)
    # idle, it wakes only as often as it commits (at least once a second, for `tick`): batches
    # come at most every BATCH_INTERVAL
    stop = run(loop, frames.batches(min(1.0, commit_interval(loop))), lambda token: say(f"ack {token}"), say)
    try:
        finish(loop, stop, Path(spec.main_db_path), say)
    except Exception as exc:  # main.db cannot be written (a full disk): mitmdump reports it
        logger.error("capsem: the end of session %s could not be recorded in %s: %r",
                     spec.session_id, spec.main_db_path, exc)  # fmt: skip
        return 4
    say("stopped")
    return 0


def _recover_crashed(spec: RecorderSpec) -> None:
    """Sessions left `running` by a dead process: marked `crashed` and rolled up (here, never in
    mitmdump: reading another session.db may fault)."""
    from capsem.rollup import open_main, recover_crashed

    try:
        main = open_main(Path(spec.main_db_path))
        try:
            for crashed in recover_crashed(main, exclude=spec.session_id):
                logger.warning(
                    "capsem: session %s was left running by a dead process; marked crashed", crashed
                )
        finally:
            main.close()
    except Exception as exc:
        logger.warning("capsem: recovering crashed sessions failed: %r", exc)


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # all is closed: the interpreter's teardown (~90 ms) would only delay mitmdump's stop
