"""Micro-benchmarks of the capture pieces, in-process, on real-shaped data.

- SSE framing (`addons.framing.SSEDecoder`) in MiB/s on a 10 MiB corpus fed in 4 KiB pieces;
- provider parsing in MiB/s: each stream interpreter fed the framed events of its corpus
  (parse only), and `addons.body.ResponseReader` fed the raw bytes (decode + frame + parse:
  the recorder thread's work per streamed byte);
- the writer in rows/s: `SessionWriter` writing typed `net_events` rows with the recorder's
  batched commits (scrubbed), and whole non-streamed Anthropic calls through the recorder's
  real loop on a thread (`RecorderThread`: messages in, net_events, model_calls, tool_calls and
  tool_responses rows out, priced, scrubbed);
- memory of a 200 MiB streamed response read by `ResponseReader` (in a subprocess: memory.py);
- the canonical request (`addons.canonical.CanonicalRequest.of`), what `Flows.requestheaders`
  computes for every flow, in µs per request: for plain API requests (the common case: no escape,
  dot segment or odd host) and for rewritten ones, beside the `urlsplit` it replaced.

Each corpus repeats the content events of a wire fixture in tests/fixtures/ (head and tail
events kept once) up to the size asked, so the parsers see the real shapes. Framing and parsing
times are this process's CPU time, the best of `repeat` runs (a busy machine hardly moves them;
on a quiet one they equal wall time); the writer and the recorder loop, which wait on SQLite,
are timed by the wall clock.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from addons.body import ResponseReader
from addons.canonical import CanonicalRequest
from addons.framing import SSEDecoder, SSEEvent
from addons.memory import keep_large_blocks
from addons.messages import FlowEnded, RequestHead, ResponseHead, Route
from addons.providers import parser_for
from addons.proxy.outbox import Outbox
from addons.recorder.thread import RecorderThread
from addons.spec import spec_of
from benchmarks.bodies import conversation
from capsem.redact import Scrubber, default_rules
from capsem.secret_rules import RuleSet
from capsem.settings import defaults
from capsem.store.rows import NetEvent, new_event_id
from capsem.store.writer import SessionWriter

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
PIECE = 4096

# protocol -> (fixture, bytes marking the events that are repeated to grow the corpus)
CORPORA: dict[str, tuple[str, bytes]] = {
    "anthropic": ("anthropic/stream_text.sse", b'"content_block_delta"'),
    "openai_chat": ("openai_chat/stream_text_usage.sse", b'"delta":{"content"'),
    "openai_responses": ("openai_responses/stream_text_reasoning.sse", b'"response.output_text.delta"'),
    "gemini": ("gemini/stream_thinking.sse", b'"thought": true'),
}


def corpus(protocol: str, size: int) -> bytes:
    """About `size` bytes of a real-shaped stream of `protocol` (see module doc)."""
    name, marker = CORPORA[protocol]
    blocks = [b + b"\n\n" for b in (FIXTURES / name).read_bytes().split(b"\n\n") if b.strip()]
    body = [i for i, b in enumerate(blocks) if marker in b]
    head, middle, tail = blocks[: body[0]], blocks[body[0] : body[-1] + 1], blocks[body[-1] + 1 :]
    unit = b"".join(b for b in middle if marker in b)
    fixed = sum(map(len, head + tail))
    return b"".join(head) + unit * max(1, (size - fixed) // len(unit)) + b"".join(tail)


def split(data: bytes, size: int = PIECE) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def best_time(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        fn()
        best = min(best, time.process_time() - started)
    return best


def frame(pieces: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events = [ev for piece in pieces for ev in decoder.feed(piece)]
    return events + decoder.flush()


def bench_framing(size: int, repeat: int) -> dict:
    data = corpus("anthropic", size)
    pieces = split(data)
    seconds = best_time(lambda: frame(pieces), repeat)
    return {"mib": len(data) / 2**20, "events": len(frame(pieces)), "seconds": seconds,
            "mib_s": len(data) / 2**20 / seconds}  # fmt: skip


def bench_parser(protocol: str, size: int, repeat: int) -> dict:
    """Parse-only and whole-reader throughput of one protocol on its corpus."""
    parser = parser_for(protocol)
    data = corpus(protocol, size)
    pieces = split(data)
    events = frame(pieces)

    def parse():
        interp = parser.stream()
        for ev in events:
            interp.event(ev)
        return interp.finish()

    def read():
        reader = ResponseReader(parser, framing="sse", content_encoding=None, status=200,
                                max_parse_bytes=len(data) + 1)  # fmt: skip
        for piece in pieces:
            reader.feed(piece)
        return reader.finish()

    summary = read()
    if summary.parse_errors or not summary.text:
        raise RuntimeError(f"{protocol} corpus did not parse cleanly: {summary.parse_errors} errors")
    parse_s, read_s = best_time(parse, repeat), best_time(read, repeat)
    mib = len(data) / 2**20
    return {"mib": mib, "events": len(events), "parse_s": parse_s, "parse_mib_s": mib / parse_s,
            "reader_s": read_s, "reader_mib_s": mib / read_s}  # fmt: skip


def _net_row(i: int) -> NetEvent:
    return NetEvent(
        id=i + 1, event_id=new_event_id(), timestamp="2026-01-01T00:00:00Z", domain="api.anthropic.com", port=443,
        decision="allowed", method="POST", path="/v1/messages", flow_id=f"flow-{i}", http_version="HTTP/1.1",
        conn_type="https", status_code=200, bytes_sent=512, bytes_received=4096, duration_ms=1200,
        request_headers='{"content-type": "application/json"}', response_headers='{"content-type": "text/event-stream"}',
        request_body_preview='{"model":"claude-haiku-4-5","messages":[{"role":"user","content":"hi"}]}',
    )  # fmt: skip


def bench_store(rows: int, workdir: Path, batch: int = 5000) -> dict:
    """`SessionWriter` writing net_events rows, committed every `batch` rows (the recorder commits
    everything queued at least every 250 ms)."""
    writer = SessionWriter(workdir / "store.db", Scrubber())
    made = [_net_row(i) for i in range(rows)]
    started = time.perf_counter()
    for start in range(0, rows, batch):
        writer.add(made[start : start + batch])
        writer.commit()
    seconds = time.perf_counter() - started
    writer.close()
    return {"rows": rows, "seconds": seconds, "rows_s": rows / seconds}


def _call(i: int, request: bytes, response: bytes) -> FlowEnded:
    now = time.time()
    head = RequestHead(
        key=f"flow-{i}", conn=None, started=now, scheme="https", host="api.anthropic.com", port=443, method="POST",
        path="/v1/messages", query="", http_version="HTTP/1.1",
        headers=(("content-type", "application/json"), ("x-api-key", "sk-ant-api03-benchmark-key")),
    )  # fmt: skip
    return FlowEnded(request=head, ended=now, route=Route("anthropic", "anthropic"), request_body=request,
                     request_size=len(request), response=ResponseHead(200, (("content-type", "application/json"),), now),
                     response_body=response, response_size=len(response))  # fmt: skip


def bench_recorder(calls: int, workdir: Path) -> dict:
    """Whole Anthropic calls (text, thinking, two tool calls) through the recorder's loop on a thread."""
    request = (FIXTURES / "anthropic" / "request_tool_results.json").read_bytes()
    response = (FIXTURES / "anthropic" / "message_thinking_tools.json").read_bytes()
    outbox = Outbox()
    spec = spec_of(defaults().capture, session_id="20260101-000000-beef", db_path=str(workdir / "recorder.db"),
                   main_db_path=str(workdir / "main.db"), mode="bench")  # fmt: skip
    worker = RecorderThread(outbox, spec)
    worker.start()
    outbox.put(_call(-1, request, response))  # warm: prices and tokenizer load on first use
    worker.flush(60)
    flows = [_call(i, request, response) for i in range(calls)]
    started = time.perf_counter()
    for flow in flows:
        outbox.put(flow)
    if not worker.flush(600):
        raise RuntimeError("recorder did not drain its queue")
    seconds = time.perf_counter() - started
    worker.stop()
    conn = sqlite3.connect(workdir / "recorder.db")
    tables = ("net_events", "model_calls", "tool_calls", "tool_responses")
    rows = sum(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables)
    conn.close()
    per_call = rows / (calls + 1)
    return {"calls": calls, "rows": round(per_call * calls), "seconds": seconds, "calls_s": calls / seconds,
            "rows_s": per_call * calls / seconds, "failures": 0 if worker.exit_reason is None else 1}  # fmt: skip


def bench_memory(mib: int, workdir: Path) -> dict:
    """memory.py in a fresh process (its own peak RSS), with an empty CAPSEM_HOME."""
    env = {**os.environ, "CAPSEM_HOME": str(workdir / "memory-home")}
    out = subprocess.run([sys.executable, "-m", "benchmarks.memory", str(mib)], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=600, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


SCRUB_CORPORA = ("claude_code_request", "anthropic", "openai_chat", "anthropic_code")


def code_stream(size: int) -> bytes:
    """An Anthropic stream of about `size` bytes whose text is source code and prose (capsem's own
    modules: names with `token`, `key`, `cookie`, `curl`, `login` on every page, as an agent's
    answers about code have)."""
    root = Path(__file__).resolve().parent.parent
    text = "".join(p.read_text() for p in sorted((root / "addons").rglob("*.py")))
    events, i = [], 0
    while sum(map(len, events)) < size:
        piece = text[i % len(text) : i % len(text) + 200]
        i += 200
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
        events.append(b"event: content_block_delta\ndata: " + json.dumps(delta).encode() + b"\n\n")
    return b"".join(events)


@functools.lru_cache(maxsize=8)
def scrub_corpus(name: str, size: int) -> str:
    """About `size` bytes of text the recorder scrubs: a Claude Code-sized request (history, tool
    definitions, tool results) or a streamed answer (built once per process: a str)."""
    if name == "claude_code_request":
        turns = conversation(400)
        body = next((b for b in turns if len(b) >= size), turns[-1])
        return body.decode()
    if name == "anthropic_code":
        return code_stream(size).decode()
    return corpus(name, size).decode()


def bench_scrubber(size: int, repeat: int) -> dict:
    """`Scrubber.scrub` (and `scrub_stream` for streams) in MiB/s: capsem's own passes alone
    (no rule set), then with the shipped rule set (gitleaks' and capsem's), on each corpus. With
    the recorder process's malloc settings (`keep_large_blocks`), as it runs there: without them,
    glibc gives the heap's top back and faults it in again for each body's copies."""
    keep_large_blocks()
    out: dict = {}
    for name in SCRUB_CORPORA:
        text = scrub_corpus(name, size)
        mib = len(text.encode()) / 2**20
        row = out[name] = {"mib": round(mib, 2)}
        for label, rules in (("own_passes", RuleSet(())), ("with_rules", default_rules())):
            scrubber = Scrubber(rules)
            scrub = scrubber.scrub if name == "claude_code_request" else scrubber.scrub_stream
            scrub(text)  # warm: rules' prefilters are compiled on first use
            row[label] = round(mib / best_time(lambda scrub=scrub, text=text: scrub(text), repeat), 1)
        row["rules"] = len(default_rules().rules)
    return out


PLAIN = [("POST", 443, "/v1/messages", ("api.anthropic.com", "api.anthropic.com")),
         ("POST", 443, "/v1/chat/completions", ("api.openai.com", "api.openai.com", "api.openai.com")),
         ("GET", 8080, "/v1/models", ("127.0.0.1", "127.0.0.1:8080"))]  # fmt: skip
REWRITTEN = [("GET", 80, "//admin/./x/../users;x=1", ("0x7f000001", "X.PASTEBIN.COM.")),
             ("GET", 443, "/%61dmin%2Fusers", ("api.example.com", "[::ffff:7f00:1]:443", "bücher.de"))]  # fmt: skip


def bench_canonical(repeat: int, n: int = 20_000) -> dict:
    """µs of CPU per `CanonicalRequest.of` (the requests above, round robin), and per `urlsplit`."""
    from urllib.parse import urlsplit

    def per_request(fn: Callable[[], object], count: int) -> float:
        return best_time(fn, repeat) / count * 1e6

    def canonical(requests: list) -> Callable[[], object]:
        return lambda: [CanonicalRequest.of(*r) for _ in range(n // len(requests)) for r in requests]

    split = per_request(lambda: [urlsplit(r[2]) for _ in range(n // len(PLAIN)) for r in PLAIN], n)
    return {"plain_us": per_request(canonical(PLAIN), n), "rewritten_us": per_request(canonical(REWRITTEN), n),
            "urlsplit_us": split}  # fmt: skip


def run_micro(*, corpus_mib: int, repeat: int, store_rows: int, calls: int, memory_mib: int,
              log: Callable[[str], None] = print) -> dict:  # fmt: skip
    size = corpus_mib * 2**20
    results: dict = {"corpus_mib": corpus_mib, "piece": PIECE}
    results["framing"] = bench_framing(size, repeat)
    log(f"  framing: {results['framing']['mib_s']:.1f} MiB/s")
    canon = results["canonical"] = bench_canonical(repeat)
    log(f"  canonical request: {canon['plain_us']:.1f} µs plain, {canon['rewritten_us']:.1f} µs rewritten "
        f"(urlsplit: {canon['urlsplit_us']:.1f} µs)")  # fmt: skip
    results["scrubber"] = bench_scrubber(min(size, 2 * 2**20), repeat)
    for name, res in results["scrubber"].items():
        log(
            f"  scrub {name}: {res['own_passes']:.1f} MiB/s own passes, {res['with_rules']:.1f} with the rule set"
        )
    results["parsers"] = {}
    for protocol in CORPORA:
        res = results["parsers"][protocol] = bench_parser(protocol, size, repeat)
        log(f"  {protocol}: parse {res['parse_mib_s']:.1f} MiB/s, reader {res['reader_mib_s']:.1f} MiB/s")
    with tempfile.TemporaryDirectory(prefix="capsem-bench-") as tmp:
        results["store"] = bench_store(store_rows, Path(tmp))
        log(f"  store: {results['store']['rows_s']:.0f} rows/s")
        results["recorder"] = bench_recorder(calls, Path(tmp))
        log(
            f"  recorder: {results['recorder']['calls_s']:.0f} calls/s, {results['recorder']['rows_s']:.0f} rows/s"
        )
        results["memory"] = bench_memory(memory_mib, Path(tmp))
        log(f"  memory: {results['memory']['growth_mib']:.1f} MiB growth reading {memory_mib} MiB")
    return results
