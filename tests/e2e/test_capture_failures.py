"""Bad traffic never breaks a flow and always leaves a complete net_events row.

The tests through a proxy upstream of the emulator whose flows all end share one mitmdump
(tests/shared_proxy.py); each reads its own scenario's rows."""

from __future__ import annotations

import base64
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import rows
from tests.e2e.test_capture_sdk import (
    ANTHROPIC_KEY,
    by_marker,
    finish,
    http_client,
)
from tests.shared_proxy import SharedProxy

MESSAGES = "https://api.anthropic.com/v1/messages"
CHAT = "https://api.openai.com/v1/chat/completions"


@pytest.fixture
def proxy(mitmdump, emu):
    return mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)


def post_stream(proxy, url: str, control: str, body: dict | None = None) -> bytes:
    body = body or {"model": "claude-haiku-4-5" if "anthropic" in url else "gpt-4.1", "max_tokens": 64,
                    "stream": True, "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    with http_client(proxy) as client:
        try:
            with client.stream("POST", url, json=body, headers={"x-emulator": control}) as resp:
                return b"".join(resp.iter_raw())
        except httpx.HTTPError:
            return b""


NET_COLUMNS = ("timestamp", "domain", "port", "decision", "method", "path", "request_headers",
               "request_body_preview", "conn_type", "flow_id")  # fmt: skip


def assert_complete_net_row(row: dict) -> None:
    for column in NET_COLUMNS:
        assert row[column] not in (None, ""), column


BAD_STREAMS = [
    (MESSAGES, "scenario=malformed; kind=bad_json"),
    (MESSAGES, "scenario=malformed; kind=garbage"),
    (MESSAGES, "scenario=malformed; kind=bad_sse"),
    (CHAT, "scenario=malformed; kind=bad_json"),
    (CHAT, "scenario=malformed; kind=garbage"),
    (MESSAGES, "lie_encoding=gzip"),
    (CHAT, "lie_encoding=gzip"),
    (MESSAGES, "truncate=300"),
    (CHAT, "truncate=300"),
    (MESSAGES, "encoding=gzip; truncate=200"),
]


def _markers(cases: list) -> list[str]:
    return [f"case-{n:02d}" for n in range(len(cases))]


def post_cases(proxy, cases: list[tuple[str, str]]) -> list[bytes]:
    """Each case's streamed request in turn through one proxy run, its user message naming the case."""
    out = []
    for n, (url, control) in enumerate(cases):
        body = {"model": "claude-haiku-4-5" if "anthropic" in url else "gpt-4.1", "max_tokens": 64,
                "stream": True, "messages": [{"role": "user", "content": f"hi case-{n:02d}"}]}  # fmt: skip
        out.append(post_stream(proxy, url, control, body))
    return out


@pytest.fixture(scope="module")
def shared(emulator, tmp_path_factory) -> SharedProxy:
    """The traffic of the tests below that use it through one mitmdump, then stopped."""
    shared = SharedProxy(emulator, tmp_path_factory.mktemp("failures"))
    try:
        shared.run("bad streams", lambda p: post_cases(p, BAD_STREAMS))
        errors = [(url, f"scenario=error; status={status}") for url, status, _ in HTTP_ERRORS]
        shared.run("http errors", lambda p: post_cases(p, errors))
        for url in (MESSAGES, CHAT):
            shared.run(f"midstream {url}", lambda p, u=url: post_stream(p, u, "scenario=midstream_error"))
        shared.run("secrets", secrets_traffic)
        shared.run("paced", paced_stream)
        shared.run("flood", flood, flows=2)
    finally:
        shared.stop()
    return shared


def test_bad_streams_are_recorded_not_raised(shared):
    """Malformed, mislabelled and cut streams, one after another through the proxy."""
    db, s = shared.db, shared.scenario("bad streams")
    received = s.result
    for (url, control), got, (net, call, ex) in zip(BAD_STREAMS, received,
                                                    by_marker(db, s, _markers(BAD_STREAMS), s.net_ids),
                                                    strict=True):  # fmt: skip
        case = f"{url} {control}"
        if "truncate" not in control:
            assert got == base64.b64decode(ex["response_body_b64"]), case
        assert_complete_net_row(net)
        if "truncate" in control:
            assert call["complete"] == 0, case
            assert net["decision"] in ("error", "allowed"), case
        if "malformed" in control:
            assert call["parse_errors"] >= 1, case
        if "lie_encoding" in control:
            assert "identity" in (net["decode_error"] or ""), case
            assert call["text_content"] == ex["expected"]["text"], case


def _minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def paced_stream(proxy) -> tuple[int, int]:
    """A stream written 4 bytes at a time, 1 ms apart: (mitmdump's minor page faults meanwhile,
    the writes)."""
    before = _minor_faults(proxy.process.pid)
    got = post_stream(proxy, MESSAGES, "chunk=4; delay_ms=1")
    return _minor_faults(proxy.process.pid) - before, len(got) // 4


FLOOD = "text=lorem ipsum dolor sit amet, ; repeat=4000"
"""An answer of ~108 KB of text, ~3 MB of events sent back to back."""


def flood(proxy) -> tuple[int, int]:
    """The same flood twice (the first one grows the heap), then (the minor page faults of
    mitmdump's threads that ran through the second, the bytes)."""
    post_stream(proxy, MESSAGES, FLOOD)
    threads = _thread_faults(proxy.process.pid)
    got = post_stream(proxy, MESSAGES, FLOOD)
    time.sleep(0.3)  # the sender's last round
    after = _thread_faults(proxy.process.pid)
    return sum(after[t] - threads[t] for t in threads.keys() & after.keys()), len(got)


def _thread_faults(pid: int) -> dict[int, int]:
    """Minor page faults of each live thread of `pid` (the sender thread is one of them)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = int((task / "stat").read_text().rsplit(")", 1)[1].split()[7])
        except (OSError, ValueError):
            pass  # it ended meanwhile
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_flood_costs_the_sender_thread_no_page_faults_per_frame(shared):
    """The sender thread's frames stay below mitmdump's fixed mmap threshold (`BATCH_BYTES`):
    megabyte frames were fresh mappings, each faulted in page by page (128 to 257 faults for this
    flood, against 1 to 34 since, most of them the event loop's; 69 once in a fresh-clone run, on a
    VM whose kernel reclaims pages on its own: the bound lies between that and the regression)."""
    faults, size = shared.scenario("flood").result
    assert size > 1_000_000
    assert faults < size / 32768, (faults, size)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_paced_stream_costs_mitmdump_no_page_faults_per_read(shared):
    """Each socket read comes from the heap (`addons/memory.py`): with asyncio's 256 KiB
    reads above the fixed 128 KiB mmap threshold, every read was a fresh mapping (~2 faults each)."""
    faults, writes = shared.scenario("paced").result
    assert writes > 100
    assert faults < writes / 4, (faults, writes)


HTTP_ERRORS = [
    (MESSAGES, 429, "rate_limit_error"),
    (MESSAGES, 529, "overloaded_error"),
    (MESSAGES, 400, "invalid_request_error"),
    (CHAT, 429, None),
    (CHAT, 400, "invalid_request_error"),
]


def test_http_errors_are_model_calls_with_error_type(shared):
    db, s = shared.db, shared.scenario("http errors")
    for (url, status, etype), (net, call, ex) in zip(
        HTTP_ERRORS, by_marker(db, s, _markers(HTTP_ERRORS), s.net_ids), strict=True
    ):
        case = f"{url} {status}"
        assert call["status_code"] == status, case
        assert call["error_type"] == ex["expected"]["error_type"], case
        if etype:
            assert call["error_type"] == etype, case
        assert (
            call["input_tokens"] is None
            and call["output_tokens"] is None
            and call["estimated_cost_usd"] is None
        ), case
        assert "error" in net["response_body_preview"], case


@pytest.mark.parametrize("url", [MESSAGES, CHAT])
def test_midstream_error_keeps_what_arrived(shared, url):
    db, s = shared.db, shared.scenario(f"midstream {url}")
    (ex,) = s.model_exchanges
    (call,) = rows(db, f"SELECT * FROM model_calls WHERE net_event_id IN ({s.ids()})")
    assert call["status_code"] == 200 and call["complete"] == 0
    assert call["error_type"] == ex["expected"]["error_type"]
    assert (call["text_content"] or "") == ex["expected"]["text"]


@pytest.fixture(scope="module")
def direct(emulator, tmp_path_factory) -> SharedProxy:
    """The tests below that reach a server of their own through one mitmdump (no upstream), stopped."""
    shared = SharedProxy(emulator, tmp_path_factory.mktemp("failures-direct"), upstream=False)
    try:
        shared.run("refused", refused_traffic, flows=1)
        shared.run("bad reply", bad_reply_traffic, flows=1)
    finally:
        shared.stop()
    return shared


def refused_traffic(proxy) -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with http_client(proxy) as client:
        return client.post(
            f"http://127.0.0.1:{port}/v1/messages", json={"model": "claude-haiku-4-5"}
        ).status_code


def test_upstream_refused_is_an_error_row(direct):
    s = direct.scenario("refused")
    assert s.result == 502
    (net,) = rows(direct.db, f"SELECT * FROM net_events WHERE id IN ({s.ids()})")
    assert net["decision"] == "error" and net["error"] and net["status_code"] in (None, 502)
    assert_complete_net_row(net)


def test_client_gone_mid_stream(proxy, emu, capsem_home):
    with http_client(proxy) as client, client.stream(
        "POST", MESSAGES, headers={"x-emulator": "delay_ms=50"},
        json={"model": "claude-haiku-4-5", "max_tokens": 64, "stream": True,
              "messages": [{"role": "user", "content": "hi"}]},
    ) as resp:  # fmt: skip
        next(resp.iter_raw())
    db = finish(proxy, capsem_home)
    (net,) = rows(db, "SELECT * FROM net_events")
    assert_complete_net_row(net)
    (call,) = rows(db, "SELECT complete FROM model_calls")
    assert call["complete"] == 0


SECRETS = {
    "header": ANTHROPIC_KEY,
    "custom": "corp-internal-token-7f3a9c2e1b",
    "query": "AIzaSyQUERYSECRET0000000000000000000000",
    "body": "sk-proj-BODYSECRET000000000000000000000000",
    "bearer": "oauth-bearer-value-3b9d2f77aa",
}


def secrets_traffic(proxy) -> None:
    secrets = SECRETS
    with http_client(proxy) as client:
        client.post(
            f"{MESSAGES}?key={secrets['query']}&beta=true",
            headers={"x-api-key": secrets["header"], "x-internal-token": secrets["custom"],
                     "authorization": f"Bearer {secrets['bearer']}"},
            json={"model": "claude-haiku-4-5", "max_tokens": 64, "system": f"key is {secrets['body']}",
                  "messages": [{"role": "user", "content": f"my token {secrets['custom']} and {secrets['query']}"}]},
        )  # fmt: skip


def test_secrets_never_reach_disk(shared):
    """No part of the shared home (every scenario's files) holds a secret this scenario sent."""
    db, s = shared.db, shared.scenario("secrets")
    blobs = b"".join(p.read_bytes() for p in shared.home.rglob("*") if p.is_file())
    for name, secret in SECRETS.items():
        assert secret.encode() not in blobs, name
    assert rows(db, f"SELECT COUNT(*) AS n FROM model_calls WHERE net_event_id IN ({s.ids()})")[0]["n"] == 1


def bad_reply_traffic(proxy) -> int:
    """A server answering with Content-Length and chunked together; the status the client got."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")  # fmt: skip

    threading.Thread(target=serve, daemon=True).start()
    body = {"model": "claude-haiku-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    try:
        with httpx.Client(proxy=proxy.url) as client:
            return client.post(f"http://127.0.0.1:{port}/v1/messages", json=body).status_code
    finally:
        server.close()


def test_a_reply_mitmproxy_refuses_is_recorded_with_the_502_the_client_got(direct):
    """Content-Length and chunked together: mitmproxy refuses the reply and answers 502 itself."""
    s = direct.scenario("bad reply")
    assert s.result == 502
    (net,) = rows(direct.db, f"SELECT status_code, decision, error FROM net_events WHERE id IN ({s.ids()})")
    (call,) = direct.model_calls(s, "status_code, input_tokens, output_tokens, complete")
    assert (net["status_code"], net["decision"]) == (502, "error") and "transfer-encoding" in net["error"]
    assert call == {"status_code": 502, "input_tokens": None, "output_tokens": None, "complete": 0}
