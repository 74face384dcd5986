"""Decompression bombs keep mitmdump's memory bounded; no planted secret reaches any file under
CAPSEM_HOME, whatever API or place (header, query, body, tool arguments, MCP-style JSON) it was in."""

from __future__ import annotations

import ssl
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import psutil
import pytest

from tests.conftest import rows
from tests.e2e.test_capture_sdk import finish

BOMB_MIB = 1024


def gzip_bomb(mib: int) -> bytes:
    """`mib` MiB of zeros as one gzip member (about 1 MiB on the wire)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * (1 << 20)
    return b"".join([*(comp.compress(zeros) for _ in range(mib)), comp.flush()])


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return gzip_bomb(BOMB_MIB)


def serve(body: bytes, content_type: str) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-type", content_type)
            self.send_header("content-encoding", "gzip")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("content_type", ["application/json", "text/event-stream"])
def test_a_gzip_bomb_keeps_memory_bounded(mitmdump, capsem_home, bomb, content_type):
    server = serve(bomb, content_type)
    proxy = mitmdump()
    process = psutil.Process(proxy.process.pid)
    baseline = process.memory_info().rss
    peak, done = [baseline], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak.append(process.memory_info().rss)
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/messages"
    body = {"model": "claude-haiku-4-5", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
    with httpx.Client(proxy=proxy.url, timeout=120) as client, client.stream("POST", url, json=body) as resp:
        received = b"".join(resp.iter_raw())
    time.sleep(0.5)  # the recorder works on the flow after the client has it
    done.set()
    server.shutdown()
    server.server_close()
    assert received == bomb  # passed through compressed and unchanged
    db = finish(proxy, capsem_home)
    growth_mib = (max(peak) - baseline) / (1 << 20)
    print(f"mitmdump RSS growth on a {BOMB_MIB} MiB {content_type} bomb: {growth_mib:.0f} MiB")
    assert growth_mib < 256, f"mitmdump grew {growth_mib:.0f} MiB on a {BOMB_MIB} MiB bomb"
    (net,) = rows(db, "SELECT bytes_received, decode_error, response_body_preview FROM net_events")
    assert net["bytes_received"] == len(bomb)
    (call,) = rows(db, "SELECT complete, parse_errors FROM model_calls")
    assert call["complete"] == 0  # zeros are no model answer, and nothing raised


SECRETS = {
    "anthropic": "sk-ant-api03-RELSECRETanthropic000000000000",
    "openai": "sk-proj-RELSECRETopenai0000000000000000",
    "gemini": "AIzaRELSECRETgemini0000000000000000",
    "bearer": "RELSECRETbearer.token.value.0000000000",
    "query": "RELSECRETquery00000000",
    "body": "RELSECRETbody-password-value",
    "custom": "RELSECRETcustomheader000000",
}


def test_no_planted_secret_reaches_any_file(mitmdump, emu, capsem_home):
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    trust = ssl.create_default_context(cafile=proxy.ca_cert)
    with httpx.Client(proxy=proxy.url, verify=trust, timeout=30) as client:
        client.post("https://api.anthropic.com/v1/messages", headers={"x-api-key": SECRETS["anthropic"]},
                    json={"model": "claude-haiku-4-5", "max_tokens": 20, "messages": [{"role": "user", "content":
                          f"my key is {SECRETS['openai']}"}]})  # fmt: skip
        client.post("https://api.openai.com/v1/chat/completions?api_key=" + SECRETS["query"],
                    headers={"authorization": f"Bearer {SECRETS['bearer']}", "x-internal-token": SECRETS["custom"]},
                    json={"model": "gpt-4.1", "stream": True, "stream_options": {"include_usage": True},
                          "messages": [{"role": "user", "content": f'{{"password": "{SECRETS["body"]}"}}'}]})  # fmt: skip
        client.post("https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent",
                    params={"key": SECRETS["gemini"]},
                    json={"contents": [{"role": "user", "parts": [{"text": "hi " + SECRETS["custom"]}]}]})  # fmt: skip
        client.post("http://127.0.0.1:9/mcp", headers={"authorization": f"Bearer {SECRETS['bearer']}"},
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "login", "arguments": {"api_key": SECRETS["anthropic"]}}})  # fmt: skip
    finish(proxy, capsem_home)
    files = [p for p in capsem_home.rglob("*") if p.is_file()]
    assert any(p.name == "session.db" for p in files) and any(p.name == "main.db" for p in files)
    for path in files:
        data = path.read_bytes()
        for name, secret in SECRETS.items():
            assert secret.encode() not in data, f"{name} secret found in {path}"
