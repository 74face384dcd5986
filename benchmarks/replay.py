"""`capsem replay` answering from a long session: how long one call takes to be answered.

A Claude Code-sized conversation of `turns` turns (benchmarks/bodies.py: ~90 KB of system prompt and
tools, the whole history resent every turn, so the last request is about 1 MB) is recorded through
the real recorder and writer into a session under CAPSEM_HOME. Then the session is loaded for replay
(`assembler.replay.recording.load`) and a replay server is started on loopback; every request of
the conversation is sent to it in order over one keep-alive HTTP connection, and the time from
sending a request to having read its whole answer is measured (scrubbing the request as the
recorder did, matching it, sending the recorded answer). Also: the matching alone for the last,
longest request.
"""

from __future__ import annotations

import http.client
import statistics
import time
from collections.abc import Callable

from addons.recorder.recorder import Recorder
from assembler.replay.match import Endpoint
from assembler.replay.recording import load
from assembler.replay.server import Options, Replayer, ReplayServer
from benchmarks.bodies import ANSWER, _flow, conversation
from capsem.emulator import Emulator
from capsem.paths import session_dir
from capsem.redact import Scrubber
from capsem.settings import defaults
from capsem.store.writer import SessionWriter

SESSION = "20260101-000000-bench"


def _record(bodies: list[bytes]) -> None:
    folder = session_dir(SESSION)
    folder.mkdir(parents=True, exist_ok=True)
    writer = SessionWriter(folder / "session.db", Scrubber())
    recorder = Recorder(writer, defaults().capture)
    for n, body in enumerate(bodies):
        recorder.handle(_flow(n, body))
        writer.commit()
    writer.close()


def run_replay(turns: int, log: Callable[[str], None] = print) -> dict:
    """Record `turns` turns, then replay them through a replay server; times in ms."""
    bodies = conversation(turns)
    _record(bodies)
    started = time.perf_counter()
    recording = load(SESSION)
    load_ms = (time.perf_counter() - started) * 1000
    replayer = Replayer(recording, Options())
    server = Emulator(server=ReplayServer(replayer)).start()
    times = []
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        for body in bodies:
            t = time.perf_counter()
            conn.request("POST", "/v1/messages", body=body,
                         headers={"host": "api.anthropic.com", "content-type": "application/json"})  # fmt: skip
            answer = conn.getresponse().read()
            times.append((time.perf_counter() - t) * 1000)
            assert answer == ANSWER, answer[:200]
        conn.close()
    finally:
        server.stop()
    report = replayer.report
    assert report.matched == turns and not report.missed, report
    fresh = Replayer(load(SESSION), Options())  # the last request matched alone, its strings not seen yet
    endpoint = Endpoint("http", "POST", "api.anthropic.com", "/v1/messages")
    for body in bodies[:-1]:
        fresh.answer(endpoint, body)
    t = time.perf_counter()
    fresh.answer(endpoint, bodies[-1])
    match_last = (time.perf_counter() - t) * 1000
    result = {
        "turns": turns, "last_body": len(bodies[-1]), "load_ms": load_ms,
        "median_ms": statistics.median(times), "p95_ms": sorted(times)[int(len(times) * 0.95) - 1],
        "max_ms": max(times), "last_ms": times[-1], "match_last_ms": match_last,
    }  # fmt: skip
    log(f"  replay: {turns} turns loaded in {load_ms:.0f} ms; a call answered in {result['median_ms']:.1f} ms "
        f"(median), {result['p95_ms']:.1f} ms (p95), the last ({len(bodies[-1]) / 1024:.0f} KB) "
        f"{times[-1]:.1f} ms")  # fmt: skip
    return result


def replay_section(replay: dict) -> list[str]:
    return [
        "## Replay",
        "",
        f"`capsem replay` answering a {replay['turns']}-turn Claude Code-sized session (the last request "
        f"{replay['last_body'] / 1024:.0f} KB) through its replay server on loopback, every request in order "
        "over one connection (scrubbed as recorded, matched, the recorded answer sent and read):",
        "",
        "| loaded | a call: median | p95 | max | the last call | matching the last alone |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {replay['load_ms']:.0f} ms | {replay['median_ms']:.1f} ms | {replay['p95_ms']:.1f} ms | "
        f"{replay['max_ms']:.1f} ms | {replay['last_ms']:.1f} ms | {replay['match_last_ms']:.1f} ms |",
    ]
