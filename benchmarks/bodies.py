"""Storage of whole request bodies over a long conversation: linear, not quadratic.

Two scripted Claude Code-sized conversations: one with a ~30 KB system prompt and ~60 KB of tool
definitions before the messages (the change of every turn at the end of the request), one in
Claude Code's own order, messages first (the change of every turn in the middle); ~3 KB of new
messages per turn, the whole history resent every turn with `cache_control` moved to the newest
message, as Claude Code does. Each goes through the real recorder and writer
(`Recorder` + `SessionWriter`, messages in). After every turn the session.db bytes that hold
bodies are measured; beside them, the same bodies stored each as is (zstd-compressed whole):
the quadratic line (compressed even). Then the time to read a call's body back (`capsem.store.bodies.read_body`) in a
session of `read_turns` turns, the last call (the longest) and one in the middle.
"""

from __future__ import annotations

import json
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import zstandard

from addons.messages import FlowEnded, RequestHead, ResponseHead, Route
from addons.recorder.recorder import Recorder
from capsem.redact import Scrubber
from capsem.settings import defaults
from capsem.store.bodies import read_body
from capsem.store.writer import SessionWriter

WORDS = [
    "the",
    "agent",
    "reads",
    "file",
    "path",
    "line",
    "value",
    "function",
    "returns",
    "error",
    "test",
    "module",
    "import",
    "class",
    "config",
    "option",
    "request",
    "response",
    "token",
    "cache",
    "model",
    "tool",
    "call",
    "result",
    "patch",
    "diff",
    "branch",
    "commit",
    "review",
    "docstring",
    "parameter",
    "argument",
    "default",
    "list",
    "dict",
    "string",
    "integer",
]


def _text(rng: random.Random, size: int) -> str:
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def _tool_turn(rng: random.Random, turn: int, tool: str, argument: str, result_size: int) -> list[dict]:
    """The assistant's text and tool call of `turn`, and the user's tool result."""
    call = {"type": "tool_use", "id": f"toolu_{turn:04d}", "name": tool, "input": {argument: f"f{turn}.py"}}
    said = {"role": "assistant", "content": [{"type": "text", "text": _text(rng, 500)}, call]}
    result = {"type": "tool_result", "tool_use_id": f"toolu_{turn:04d}", "content": _text(rng, result_size)}
    return [said, {"role": "user", "content": [result]}]


def conversation(turns: int, *, seed: int = 7) -> list[bytes]:
    """Request bodies of a Claude Code-like conversation, one per turn (whole history resent)."""
    rng = random.Random(seed)
    system = [{"type": "text", "text": _text(rng, 30_000)}]
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    tools = [
        {"name": f"tool_{i}", "description": _text(rng, 1500), "input_schema": schema} for i in range(40)
    ]
    messages: list[dict] = []
    bodies = []
    for turn in range(turns):
        if turn:
            messages += _tool_turn(rng, turn, "tool_1", "path", 2000)
        else:
            messages.append({"role": "user", "content": [{"type": "text", "text": _text(rng, 2500)}]})
        for message in messages:  # cache_control on the newest block only, as Claude Code does
            for block in message["content"]:
                block.pop("cache_control", None)
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        body = {"model": "claude-sonnet-4-5", "max_tokens": 32000, "system": system, "tools": tools,
                "messages": messages, "stream": False}  # fmt: skip
        bodies.append(json.dumps(body).encode())
    return bodies


def claude_code(turns: int, *, seed: int = 11) -> list[bytes]:
    """Request bodies shaped as Claude Code sends them: `messages` first, then a ~20 KB `system` of
    several blocks and ~50 KB of `tools` whose input schemas describe each property (~650 pieces
    after the messages), ~3.6 KB new per turn, `cache_control` on the newest block only. The change
    of every turn (the new messages, the marker moved) lies before the unchanged system and tools."""
    rng = random.Random(seed)
    system = [{"type": "text", "text": _text(rng, 60)}] + [
        {"type": "text", "text": _text(rng, 4000)} for _ in range(5)
    ]
    tools = []
    for i in range(24):
        props = {f"arg_{j}": {"type": "string", "description": _text(rng, 60)} for j in range(24)}
        schema = {"type": "object", "properties": props, "required": ["arg_0"], "additionalProperties": False}
        tools.append({"name": f"Tool{i}", "description": _text(rng, 400), "input_schema": schema})
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": _text(rng, 2500)}]}]
    bodies = []
    for turn in range(turns):
        if turn:
            messages += _tool_turn(rng, turn, "Tool1", "arg_0", 2600)
        for message in messages:
            for block in message["content"]:
                block.pop("cache_control", None)
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        body = {"model": "claude-sonnet-4-5", "messages": messages, "temperature": 1, "system": system,
                "tools": tools, "metadata": {"user_id": "user_0"}, "max_tokens": 32000, "stream": False}  # fmt: skip
        bodies.append(json.dumps(body).encode())
    return bodies


ANSWER = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                     "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                     "usage": {"input_tokens": 10, "output_tokens": 2}}).encode()  # fmt: skip


def _flow(n: int, body: bytes) -> FlowEnded:
    now = time.time()
    head = RequestHead(key=f"f{n}", conn=None, started=now, scheme="https", host="api.anthropic.com", port=443,
                       method="POST", path="/v1/messages", query="", http_version="HTTP/1.1",
                       headers=(("content-type", "application/json"),))  # fmt: skip
    return FlowEnded(request=head, ended=now, route=Route("anthropic", "anthropic"), request_body=body,
                     request_size=len(body), response=ResponseHead(200, (("content-type", "application/json"),), now),
                     response_body=ANSWER, response_size=len(ANSWER))  # fmt: skip


def _db_bytes(conn: sqlite3.Connection) -> int:
    """The session.db's size in pages (WAL frames included: what the file holds once checkpointed)."""
    return conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]


SHAPES = {"history-last": conversation, "claude-code": claude_code}
"""The conversations the benchmark stores: the change of each turn at the end of the request (history
last) or in its middle (Claude Code's order: messages before system and tools)."""


def run_bodies(
    turns: int, read_turns: int, shape: str = "history-last", log: Callable[[str], None] = print
) -> dict:
    """Per-turn storage of `turns` turns of a conversation of `shape`, and read times in a session of
    `read_turns` turns."""
    bodies = SHAPES[shape](max(turns, read_turns))
    zstd = zstandard.ZstdCompressor(level=3)
    with tempfile.TemporaryDirectory(prefix="capsem-bench-bodies-") as tmp:
        writer = SessionWriter(Path(tmp) / "session.db", Scrubber())
        recorder = Recorder(writer, defaults().capture)
        stored, naive, growth, lists = [], [], [], []
        naive_total = 0
        started = time.perf_counter()
        for n, body in enumerate(bodies[:read_turns]):
            recorder.handle(_flow(n, body))
            writer.commit()
            if n < turns:
                total = _db_bytes(writer.conn)
                growth.append(total - (stored[-1] if stored else 0))
                stored.append(total)
                naive_total += len(zstd.compress(body))
                naive.append(naive_total)
                lists.append(_list_bytes(writer.conn, n + 1))
        seconds = time.perf_counter() - started
        distinct = sum(len(p) for p in _distinct(bodies[:turns]))
        conn = writer.conn
        last = conn.execute("SELECT MAX(id) FROM model_calls").fetchone()[0]
        reads = {}
        for label, call in (("last", last), ("middle", last // 2)):
            times = []
            for _ in range(5):
                t = time.perf_counter()
                data, _blob = read_body(conn, call)  # type: ignore[misc]
                times.append(time.perf_counter() - t)
            if data != bodies[call - 1]:
                raise AssertionError(f"the request of call {call} does not read back byte-identical")
            reads[label] = {"call": call, "ms": statistics.median(times) * 1000, "bytes": len(data)}
        writer.close()
        file_bytes = (Path(tmp) / "session.db").stat().st_size
    result = {
        "shape": shape, "turns": turns, "read_turns": read_turns, "stored": stored, "naive": naive, "growth": growth,
        "lists": lists, "first_body": len(bodies[0]), "last_body": len(bodies[turns - 1]),
        "request_bytes": sum(map(len, bodies[:turns])), "distinct_raw": distinct, "reads": reads,
        "file_bytes": file_bytes, "seconds": seconds,
    }  # fmt: skip
    log(f"  bodies ({shape}): {turns} turns: session.db {stored[-1] / 2**20:.2f} MiB, {stored[-1] / distinct:.2f}x "
        f"the distinct content (bodies as is: {naive[-1] / 2**20:.1f} MiB); list of pieces per turn "
        f"{statistics.median(lists[1:]):.0f} B; read last call {reads['last']['ms']:.1f} ms of {read_turns}")  # fmt: skip
    return result


def _list_bytes(conn: sqlite3.Connection, call: int) -> int:
    """Bytes of a call's request list of pieces (its own keys and its runs)."""
    sql = (
        "SELECT LENGTH(chunks) + LENGTH(runs) FROM event_body_blobs "
        "WHERE source_table = 'model_calls' AND row_id = ? AND direction = 'request'"
    )
    found = conn.execute(sql, (call,)).fetchone()
    return found[0] if found else 0


def _distinct(bodies: list[bytes]) -> set[bytes]:
    from capsem.store.bodies import pieces

    return {p for body in bodies for p in pieces(body)}
