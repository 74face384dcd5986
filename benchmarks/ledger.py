"""What the ledger costs: the recorder's CPU per call with the hash chain and signed heads, beside
without (`SessionWriter(ledger=False)`), and `capsem verify`'s time on a 5,000-call session.

The recorder's work is `profile_recorder`'s: the messages mitmdump would hand over for `streams`
concurrent streamed Anthropic calls, decoded and handled by a real `Recorder` and `SessionWriter`
in this process, committed as the recorder commits (when 250 ms have passed, and at the end of
each pass), three times over in one session (the first pass, which
opens it, is left out); with and without the ledger alternate, `reps` times each, and the median
CPU per call is kept. Two call shapes: short answers (50 events: the ledger's share is
largest when a call is small) and the streaming benchmark's paced answer (500 events).

The large session is built through the store's writer (`build`, also used by
tests/ledger/test_large.py): `calls` model calls, each with its net_events row, a tool call and
the result the next call carries (so the triggers run), committed 50 calls at a time.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from addons.messages import decode
from addons.recorder.recorder import Recorder
from benchmarks.profile_recorder import batches, handle
from benchmarks.upstream import StreamSpec
from capsem.redact import Scrubber
from capsem.settings import defaults
from capsem.store.ledger import Ledger
from capsem.store.writer import SessionWriter


# Long: one call's four rows, spelled out.
def build(db: Path, calls: int, per_batch: int = 50) -> None:
    """A session of `calls` model calls through the store's writer (see the module docstring)."""
    writer = SessionWriter(db)
    writer.set_meta(session_id=db.parent.name, mode="test")
    for i in range(1, calls + 1):
        at = f"2026-01-01T00:{i // 3600 % 60:02d}:{i // 60 % 60:02d}.{i % 1000:03d}Z"
        writer.add_dicts("net_events", [{"id": i, "timestamp": at, "domain": "api.anthropic.com",
                                         "decision": "denied" if i % 97 == 0 else "allowed", "method": "POST",
                                         "path": "/v1/messages", "status_code": 200, "bytes_sent": 900 + i}])  # fmt: skip
        writer.add_dicts("model_calls", [{"id": i, "timestamp": at, "provider": "anthropic", "model": "claude-x",
                                          "method": "POST", "path": "/v1/messages", "net_event_id": i,
                                          "input_tokens": 1000 + i, "output_tokens": 50,
                                          "estimated_cost_usd": 0.0031 * i}])  # fmt: skip
        writer.add_dicts("tool_calls", [{"id": i, "model_call_id": i, "call_index": 0, "call_id": f"toolu_{i}",
                                         "tool_name": "Read", "arguments": "{}", "timestamp": at}])  # fmt: skip
        if i > 1:
            writer.add_dicts("tool_responses", [{"id": i - 1, "model_call_id": i, "call_id": f"toolu_{i - 1}",
                                                 "content_preview": "def f(): ...", "timestamp": at}])  # fmt: skip
        if i % per_batch == 0 and not writer.commit():
            raise RuntimeError(writer.health.last_error)
    writer.close(end=True)


COMMIT_INTERVAL = 0.25
"""The recorder commits at most this often (addons/recorder/main.py: run)."""


class _LedgerClock:
    """CPU time spent inside the ledger's methods (outermost calls only), while installed."""

    METHODS = ("begin", "rows", "seal", "committed", "rolled_back")

    def __init__(self) -> None:
        self.used, self._depth, self._saved = 0.0, 0, {}

    def __enter__(self) -> _LedgerClock:
        for name in self.METHODS:
            original = self._saved[name] = getattr(Ledger, name)

            def timed(*args, _original=original, **kwargs):
                self._depth += 1
                started = time.process_time()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self._depth -= 1
                    if not self._depth:
                        self.used += time.process_time() - started

            setattr(Ledger, name, timed)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._saved.items():
            setattr(Ledger, name, original)


def _session_cpu(passes: list[list[bytes]], workdir: Path, *, ledger: bool) -> float:
    """CPU seconds of the passes' calls through one recorder and writer (as one session: the
    writer's first commit, which reads the schema, is left out with the first pass)."""
    writer = SessionWriter(workdir / f"session-{time.monotonic_ns()}.db", Scrubber(), ledger=ledger)
    recorder = Recorder(writer, defaults().capture)
    used, last = 0.0, time.monotonic()
    for n, encoded in enumerate(passes):
        started = time.process_time()
        for data in encoded:
            for message in decode(data):
                recorder.handle(message)
            recorder.feed_held()
            if writer.pending and time.monotonic() - last >= COMMIT_INTERVAL:  # as the recorder's run() does
                writer.commit()
                last = time.monotonic()
        writer.commit()
        if n:
            used += time.process_time() - started
    writer.close()
    return used


def recorder_cpu(streams: int, events: int, reps: int, workdir: Path, passes: int = 3) -> dict:
    """Median CPU seconds per call, without and with the ledger, and the ratio."""
    sets = [batches(streams, StreamSpec(events, 200), 200) for _ in range(passes + 1)]  # every answer new
    handle(sets[0], workdir)  # warm: imports, prices, the key
    runs: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(reps):
        for ledger in (rep % 2 == 0, rep % 2 != 0):  # alternate which goes first
            runs[ledger].append(_session_cpu(sets, workdir, ledger=ledger) / (streams * passes))
    off, on = statistics.median(runs[False]), statistics.median(runs[True])
    with _LedgerClock() as clock:  # the ledger's own share, measured inside one run (no noise between runs)
        total = _session_cpu(sets, workdir, ledger=True)
    return {"streams": streams, "events": events, "reps": reps, "off_ms": off * 1000, "on_ms": on * 1000,
            "extra_pct": (on / off - 1) * 100, "own_ms": clock.used / (streams * passes) * 1000,
            "own_pct": clock.used / (total - clock.used) * 100}  # fmt: skip


def verify_time(calls: int, workdir: Path) -> dict:
    from capsem.store.keys import load_public, signing_key
    from capsem.store.schema import connect
    from capsem.store.verify import verify_session

    db = workdir / "sessions" / "20260101-000000-b000" / "session.db"
    build(db, calls)
    signing_key()
    public = load_public(Path(__import__("os").environ["CAPSEM_HOME"]) / "ledger.pub")
    conn = connect(db, readonly=True)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        verdict = verify_session(conn, db.parent.name, public, status="stopped")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        conn.close()
    assert verdict.ok, verdict.problems[:3]
    return {"calls": calls, "rows": verdict.rows, "batches": verdict.batches, "seconds": wall, "cpu": cpu,
            "db_mib": db.stat().st_size / 2**20}  # fmt: skip


def run_ledger(shapes: list[tuple[int, int]], reps: int, verify_calls: int,
               log: Callable[[str], None] = print) -> dict:  # fmt: skip
    out: dict = {"recorder": [], "verify": None}
    with tempfile.TemporaryDirectory(prefix="capsem-ledger-") as tmp:
        for streams, events in shapes:
            found = recorder_cpu(streams, events, reps, Path(tmp))
            log(f"  {streams} calls of {events} events: {found['off_ms']:.2f} ms -> {found['on_ms']:.2f} ms "
                f"per call ({found['extra_pct']:+.1f} %); the ledger's own {found['own_ms']:.3f} ms "
                f"(+{found['own_pct']:.1f} %)")  # fmt: skip
            out["recorder"].append(found)
        out["verify"] = verify_time(verify_calls, Path(tmp))
        log(f"  verify {verify_calls} calls: {out['verify']['seconds']:.2f} s")
    return out


def ledger_section(results: dict) -> list[str]:
    lines = ["## The ledger's cost", "",
             "Recorder CPU per call (`benchmarks/ledger.py`: `profile_recorder`'s work in one session, medians "
             "of alternating runs), without and with the hash chain and its signed heads; and the CPU spent "
             "inside the ledger's own methods in one run, beside the rest of the recorder's (the steadier "
             "figure: runs on a shared machine differ by more than the ledger costs):", "",
             "| calls × events | without | with ledger | difference | the ledger's own | its share |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for r in results["recorder"]:
        lines.append(f"| {r['streams']} × {r['events']} | {r['off_ms']:.2f} ms | {r['on_ms']:.2f} ms | "
                     f"{r['extra_pct']:+.1f} % | {r['own_ms'] * 1000:.0f} µs | +{r['own_pct']:.1f} % |")  # fmt: skip
    v = results["verify"]
    lines += ["", f"`capsem verify` of a {v['calls']:,}-call session ({v['rows']:,} chained rows, "
              f"{v['batches']} signed batches, {v['db_mib']:.1f} MiB): {v['seconds']:.2f} s "
              f"({v['cpu']:.2f} s CPU)."]  # fmt: skip
    return lines
