"""Faults while capture runs: kill -9 with streams in flight, an upstream that resets the TCP
connection mid-stream, a client that hangs up mid-stream, a reader holding session.db open."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import only_session, rows
from tests.e2e.test_capture_sdk import ANTHROPIC_KEY, finish, http_client
from tests.shared_proxy import assert_clean_log

MESSAGES = "https://api.anthropic.com/v1/messages"


def ask(proxy, n: int, control: str = "") -> int:
    body = {"model": "claude-haiku-4-5", "max_tokens": 64, "stream": True,
            "messages": [{"role": "user", "content": f"question {n}"}]}  # fmt: skip
    with http_client(proxy) as client:
        resp = client.post(MESSAGES, json=body, headers={"x-api-key": ANTHROPIC_KEY, "x-emulator": control})
        return resp.status_code


@pytest.mark.serial  # the recorder must commit within the second before the kill
def test_kill_9_mid_stream_keeps_every_flow_finished_a_second_before(mitmdump, emu, capsem_home):
    first = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(lambda n: ask(first, n), range(12))) == [200] * 12
        finished_at = time.monotonic()
        in_flight = [pool.submit(ask, first, 100 + n, "delay_ms=300; chunk=4") for n in range(6)]
        time.sleep(max(0.0, finished_at + 1.0 - time.monotonic()) + 0.3)  # streams are mid-way by now
        assert not any(job.done() for job in in_flight)
        first.kill()  # SIGKILL: no hook runs, no final commit
        for job in in_flight:
            with pytest.raises(httpx.HTTPError):
                job.result(timeout=30)
    db = only_session(capsem_home)
    second = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)  # recovers the dead session
    deadline = time.monotonic() + 10  # beside the proxy, never before it accepts traffic
    while (statuses := [r["status"] for r in rows(capsem_home / "main.db", "SELECT status FROM sessions "
                                                  "ORDER BY created_at")]) != ["crashed", "running"]:  # fmt: skip
        assert time.monotonic() < deadline, statuses
        time.sleep(0.05)
    crashed = rows(capsem_home / "main.db", "SELECT * FROM sessions ORDER BY created_at")[0]
    answered = {r["request_body_preview"].split("question ")[1].split('"')[0]
                for r in rows(db, "SELECT request_body_preview FROM model_calls WHERE complete = 1")}  # fmt: skip
    assert {str(n) for n in range(12)} <= answered  # every flow that ended a second before the kill
    assert crashed["total_model_calls"] >= 12 and crashed["stopped_at"]
    assert rows(db, "PRAGMA integrity_check") == [{"integrity_check": "ok"}]
    second.stop()


class ResettingUpstream:
    """A provider that sends the response head and a few SSE events, then resets the connection."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length"))
        )
        await reader.readexactly(length)
        events = [b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_reset","model":'
                  b'"claude-haiku-4-5","usage":{"input_tokens":7,"output_tokens":1}}}\n\n',
                  b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
                  b'"content_block":{"type":"text","text":""}}\n\n',
                  b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                  b'"delta":{"type":"text_delta","text":"partial answer"}}\n\n']  # fmt: skip
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        for event in events:
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        writer.transport.abort()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


def test_upstream_reset_and_client_hangup_mid_stream(mitmdump, capsem_home):
    upstream = ResettingUpstream()
    proxy = mitmdump()
    body = {
        "model": "claude-haiku-4-5",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    url = f"http://127.0.0.1:{upstream.port}/v1/messages"
    received = b""
    with (
        httpx.Client(proxy=proxy.url, timeout=30) as client,
        pytest.raises(httpx.HTTPError),
        client.stream("POST", url, json=body) as resp,
    ):
        for chunk in resp.iter_raw():
            received += chunk
    assert b"partial answer" in received  # the agent got every byte sent before the reset
    # and one that hangs up after the first event
    with httpx.Client(proxy=proxy.url, timeout=30) as client, client.stream("POST", url, json=body) as resp:
        next(resp.iter_raw())
    upstream.close()
    db = finish(proxy, capsem_home)
    calls = rows(db, "SELECT * FROM model_calls ORDER BY id")
    assert len(calls) == 2
    for call in calls:
        assert (call["complete"], call["message_id"], call["input_tokens"]) == (0, "msg_reset", 7)
    assert calls[0]["text_content"] == "partial answer"
    nets = rows(db, "SELECT error FROM net_events ORDER BY id")
    assert len(nets) == 2 and all(n["error"] for n in nets)


def test_a_reader_holding_session_db_open_does_not_stop_capture(mitmdump, emu, capsem_home):
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    ask(proxy, 0)
    db = only_session(capsem_home)
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
    reader.execute("BEGIN")  # a long read transaction (a Datasette or sqlite3 shell left open)
    seen_before = reader.execute("SELECT COUNT(*) FROM model_calls").fetchone()[0]
    for n in range(1, 21):
        assert ask(proxy, n) == 200
    assert (
        reader.execute("SELECT COUNT(*) FROM model_calls").fetchone()[0] == seen_before
    )  # its snapshot holds
    reader.execute("COMMIT")
    deadline = time.monotonic() + 10
    while reader.execute("SELECT COUNT(*) FROM model_calls").fetchone()[0] < 21:
        assert time.monotonic() < deadline, "rows written while the reader held its snapshot never showed up"
        time.sleep(0.05)
    assert proxy.stop() == 0
    reader.close()
    assert_clean_log(proxy.log())
    assert len(rows(db, "SELECT id FROM model_calls WHERE complete = 1")) == 21
