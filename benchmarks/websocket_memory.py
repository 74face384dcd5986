"""mitmdump's memory over a long Codex-shaped session on one WebSocket.

mitmproxy keeps every message of a WebSocket flow in `flow.websocket.messages` until the flow
ends (mitmproxy issue #6620), and Codex CLI holds one socket (Responses over WebSocket) for a
whole session, resending its whole input every turn (`store: false`). Here a client opens one
socket through the proxy (a CONNECT tunnel, plain WebSocket inside) to a small Responses-shaped
WebSocket server in this process, and runs `turns` turns on it: each `response.create` carries
~8 KB of instructions, six tool definitions and the whole history so far, which grows by a ~1 KB
tool result and the previous answer every turn; each answer is the event sequence of a short
streamed text reply. (capsem's emulator is not the upstream: it keeps every exchange it served.)
The resident size of the mitmdump process (and of capsem's recorder process, apart) is read after
every `every` turns, for (2) streaming mitmdump and (5) mitmdump + capsem, one after the other.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from benchmarks.bodies import _text
from benchmarks.proxies import Scenario, start_proxy, wait_idle

SCENARIOS = (
    Scenario("stream", "(2) mitmdump, streaming", ("--set", "stream_large_bodies=1")),
    Scenario("capsem", "(5) mitmdump + capsem", addon=True),
)
GOAL_GROWTH_MIB = 32.0
"""capsem's mitmdump may grow at most this much from the first sample to the last: flat, not
with the bytes sent."""


def _answer(turn: int) -> list[str]:
    """The events of one streamed Responses answer (~20 text deltas)."""
    rid, mid = f"resp_{turn}", f"msg_{turn}"
    words = [f"word{i} " for i in range(20)]
    text = "".join(words)
    item = {"type": "message", "id": mid, "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
    head = {"id": rid, "object": "response", "model": "gpt-5", "status": "in_progress", "output": []}
    usage = {"input_tokens": 1000 + turn, "output_tokens": 20, "total_tokens": 1020 + turn}
    events = [{"type": "response.created", "response": head},
              {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}}]  # fmt: skip
    events += [{"type": "response.output_text.delta", "item_id": mid, "output_index": 0, "content_index": 0,
                "delta": w} for w in words]  # fmt: skip
    events += [{"type": "response.output_text.done", "item_id": mid, "output_index": 0, "content_index": 0,
                "text": text},
               {"type": "response.output_item.done", "output_index": 0, "item": item},
               {"type": "response.completed", "response": {**head, "status": "completed", "output": [item],
                                                           "usage": usage}}]  # fmt: skip
    return [json.dumps(e) for e in events]


async def _upstream(ws) -> None:
    turn = 0
    async for _message in ws:
        turn += 1
        for event in _answer(turn):
            await ws.send(event)


def _tools(rng: random.Random) -> list[dict]:
    props = {"type": "object", "properties": {"cmd": {"type": "string", "description": _text(rng, 200)}}}
    return [
        {"type": "function", "name": f"tool_{i}", "description": _text(rng, 600), "parameters": props}
        for i in range(6)
    ]


async def _session(proxy_port: int, turns: int, every: int, sample: Callable[[int, int], None]) -> int:
    """Run `turns` Codex-shaped turns on one socket through the proxy; return the bytes of the
    messages, both ways."""
    from websockets.asyncio.client import connect
    from websockets.asyncio.server import serve

    rng = random.Random(5)
    instructions, tools = _text(rng, 8000), _tools(rng)
    history: list[dict] = []
    async with serve(_upstream, "127.0.0.1", 0, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
        target = f"127.0.0.1:{port}"
        writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n")[0]:
            raise ConnectionError(f"CONNECT refused: {head[:60]!r}")
        sock = writer.get_extra_info("socket").dup()
        writer.transport.pause_reading()
        sent = received = 0
        async with connect(f"ws://{target}/v1/responses", sock=sock, max_size=None) as ws:
            for turn in range(1, turns + 1):
                history.append({"type": "function_call_output", "call_id": f"call_{turn}",
                                 "output": _text(rng, 1000)})  # fmt: skip
                message = json.dumps({"type": "response.create", "model": "gpt-5", "instructions": instructions,
                                      "tools": tools, "input": history, "store": False, "stream": True})  # fmt: skip
                await ws.send(message)
                sent += len(message)
                while True:
                    text = await ws.recv()
                    received += len(text)
                    event = json.loads(text)
                    if event["type"] == "response.completed":
                        break
                history += event["response"]["output"]
                if turn % every == 0 or turn == 1:
                    sample(turn, sent + received)
        writer.close()
    return sent + received


def _rss(process: psutil.Process) -> tuple[int, int]:
    """Resident bytes of mitmdump and of the processes it started."""
    children = process.children(recursive=True)
    return process.memory_info().rss, sum(c.memory_info().rss for c in children)


def run_ws_memory(turns: int, every: int, workdir: Path, log: Callable[[str], None] = print) -> dict:
    """RSS samples per scenario over one long socket."""
    workdir.mkdir(parents=True, exist_ok=True)
    out: dict = {"turns": turns, "every": every, "scenarios": {}, "goal_growth_mib": GOAL_GROWTH_MIB}
    for scenario in SCENARIOS:
        proxy = start_proxy(scenario, workdir)
        process = psutil.Process(proxy.process.pid)
        samples: list[dict] = []

        def sample(turn: int, sent: int, process: psutil.Process = process, samples: list = samples) -> None:
            mitm, others = _rss(process)
            samples.append({"turn": turn, "sent": sent, "mitmdump": mitm, "recorder": others})

        started = time.perf_counter()
        try:
            sent = asyncio.run(_session(proxy.port, turns, every, sample))
            wait_idle(proxy.process.pid, timeout=60)
            mitm, others = _rss(process)
        finally:
            proxy.stop()
        out["scenarios"][scenario.key] = {
            "label": scenario.label, "samples": samples, "sent": sent, "seconds": time.perf_counter() - started,
            "after": {"mitmdump": mitm, "recorder": others},
        }  # fmt: skip
        log(f"  websocket {scenario.label}: {turns} turns, {sent / 2**20:.0f} MiB of messages; mitmdump RSS "
            f"{samples[0]['mitmdump'] / 2**20:.0f} -> {samples[-1]['mitmdump'] / 2**20:.0f} MiB")  # fmt: skip
    return out


def ws_memory_section(result: dict) -> list[str]:
    """The samples side by side, and capsem's growth against its goal."""
    stream, capsem = result["scenarios"]["stream"], result["scenarios"]["capsem"]
    mib = 2**20
    lines = [
        "## Memory on one long WebSocket",
        "",
        f"A {result['turns']}-turn Codex-shaped session on one socket (a CONNECT tunnel through the proxy to a "
        "Responses-shaped WebSocket server; each `response.create` carries ~8 KB of instructions, six tools and "
        "the whole history, which grows by a ~1 KB tool result and the answer every turn). RSS of the mitmdump "
        "process, and of capsem's recorder process apart, after the turn.",
        "",
        "| after turn | MiB of messages | (2) mitmdump RSS MiB | (5) capsem: mitmdump RSS MiB | (5) recorder RSS MiB |",
        "|---:|---:|---:|---:|---:|",
    ]
    for a, b in zip(stream["samples"], capsem["samples"], strict=False):
        lines.append(
            f"| {a['turn']} | {a['sent'] / mib:.0f} | {a['mitmdump'] / mib:.0f} | {b['mitmdump'] / mib:.0f} "
            f"| {b['recorder'] / mib:.0f} |"
        )
    growth = ws_growth_mib(result)
    base = (stream["samples"][-1]["mitmdump"] - stream["samples"][0]["mitmdump"]) / mib
    met = "met" if growth <= result["goal_growth_mib"] else "missed"
    lines += [
        "",
        f"From the first turn to the last, capsem's mitmdump grew {growth:+.0f} MiB (goal: flat, ≤ "
        f"{result['goal_growth_mib']:g} MiB: {met}); streaming mitmdump alone grew {base:+.0f} MiB holding every "
        f"message of the socket ({stream['sent'] / mib:.0f} MiB of messages, both ways).",
        "",
    ]
    return lines


def ws_growth_mib(result: dict) -> float:
    """How much capsem's mitmdump grew from the first sample to the last, in MiB."""
    samples = result["scenarios"]["capsem"]["samples"]
    return (samples[-1]["mitmdump"] - samples[0]["mitmdump"]) / 2**20
