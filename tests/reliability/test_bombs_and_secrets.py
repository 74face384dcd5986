"""Decompression bombs keep mitmdump's memory bounded; no planted secret reaches any file under
CAPSEM_HOME, the `capsem vacuum` archive or a bundle, whatever API or place it was in (header,
query, path, request body, tool arguments and results, MCP arguments, model text, the session's
command line), in any form (JSON at any escaping depth, env and ini assignments, flags, PEM)."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
import ssl
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psutil
import pytest
import zstandard

from capsem.store.bodies import read_body
from tests.cli.conftest import run
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
    tree = [process, *process.children(recursive=True)]  # mitmdump and its recorder process

    def rss() -> int:
        return sum(p.memory_info().rss for p in tree if p.is_running())

    baseline = rss()
    peak, done = [baseline], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak.append(rss())
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
    print(f"mitmdump + recorder RSS growth on a {BOMB_MIB} MiB {content_type} bomb: {growth_mib:.0f} MiB")
    assert len(tree) == 2, tree
    # bounded by the settings, not by the bomb: the recorder decodes at most max_parse_bytes (64 MiB)
    # and keeps at most max_body_bytes (64 MiB) of it whole, scrubbing it as text before it is stored
    assert growth_mib < 384, f"mitmdump and its recorder grew {growth_mib:.0f} MiB on a {BOMB_MIB} MiB bomb"
    (net,) = rows(db, "SELECT bytes_received, decode_error, response_body_preview FROM net_events")
    assert net["bytes_received"] == len(bomb)
    (call,) = rows(db, "SELECT complete, parse_errors FROM model_calls")
    assert call["complete"] == 0  # zeros are no model answer, and nothing raised


# Every planted secret holds NEEDLE; nothing else does. The sweep looks for it in every file, in
# every value of every table, in the `capsem vacuum` archive and in a bundle made of the session.
NEEDLE = "RELSECRET"
SECRETS = {
    "anthropic": "sk-ant-api03-RELSECRETanthropic000000000000",
    "openai": "sk-proj-RELSECRETopenai0000000000000000",
    "gemini": "AIzaRELSECRETgemini0000000000000000",
    "bearer": "RELSECRETbearer.token.value.0000000000",
    "query": "RELSECRETquery00000000",
    "body": "RELSECRETbody-password-value",
    "custom": "RELSECRETcustomheader000000",
    "quoted": 'RELSECRETq1"RELSECRETq2\\RELSECRETq3',  # a password holding a quote and a backslash
    "aws": "RELSECRETawsSecretKey/K7MDENG/bPxRfiCY000",
    "flag": "RELSECRETflagValue",
    "pgpassword": "RELSECRETpgpassword",
    "mcp_db": 'RELSECRETmcp"db\\password',
    "mcp_phrase": "RELSECRETmcpPassphrase",
    "model_text": "RELSECRETmodelText000",
    "command": "RELSECRETcommandPassword",
    "command_token": "ghp_RELSECRETcommandToken000000000",
    "url": "RELSECRETdatabaseUrlPassword",
    "preview_cut": "ghp_RELSECRETcutAcrossPreview00000000000",  # a GitHub token: `ghp_` and 36
}
PEM = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtz\n"
       "QyNTUxOQAAACRELSECRETpemBody00000000000000000000000000AAAA\n-----END OPENSSH PRIVATE KEY-----\n")  # fmt: skip
SLACK = "https://hooks.slack.com/services/T0RELSEC1/B0RELSEC2/RELSECRETslackHook0000000"
DISCORD = "https://discord.com/api/webhooks/123456789012345678/RELSECRETdiscordHook00000"
PRESIGNED = {
    "https://bucket.s3.amazonaws.com/report.csv": {
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Credential": "RELSECRETamzCred/20240101/us-east-1/s3/aws4_request",
        "X-Amz-Date": "20240101T000000Z", "X-Amz-Expires": "3600", "X-Amz-SignedHeaders": "host",
        "X-Amz-Security-Token": "RELSECRETamzSessionToken", "X-Amz-Signature": "RELSECRETamzSignature0123"},
    "https://storage.googleapis.com/bucket/report.csv": {
        "X-Goog-Algorithm": "GOOG4-RSA-SHA256", "X-Goog-Credential": "RELSECRETgoogCred@proj.iam/20240101",
        "X-Goog-Signature": "RELSECRETgoogSignature0123"},
    "https://acct.blob.core.windows.net/c/report.csv": {
        "sv": "2022-11-02", "se": "2030-01-01T00:00:00Z", "sp": "r", "sig": "RELSECRETazureSig/abc="},
}  # fmt: skip
# declared tool parameters: the emulator's arguments for them start with the parameter's name, so
# the PEM-named one puts a private key into tool_calls.arguments; the others get values with a quote
SECRET_PARAMS = ("db_password", "passphrase", PEM)
TOOL_SCHEMA = {
    "type": "object",
    "properties": {name: {"type": "string"} for name in (*SECRET_PARAMS, "path")},
}
REDACTED = re.compile(r"\[redacted hash:[0-9a-f]{12}\]")
# a tool result that an agent would send back: env, ini, a webhook, a key and JSON with a quoted password
TOOL_OUTPUT = (
    "Command output follows (exit status 0), 14 lines in all:\n"
    f"[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = {SECRETS['aws']}\n"
    f"export SLACK_WEBHOOK={SLACK}\nexport PGPASSWORD={SECRETS['pgpassword']}\n{PEM}"
    f"DATABASE_URL=postgres://app:{SECRETS['url']}@db.internal:5432/app\n"
    + json.dumps({"db_password": SECRETS["quoted"], "host": "db.internal"})
)


def test_no_planted_secret_reaches_any_file(mitmdump, emu, capsem_home, tmp_path):
    command = f"agent --password {SECRETS['command']} --token {SECRETS['command_token']} --verbose"
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path, args=["--set", f"capsem_command={command}"])
    trust = ssl.create_default_context(cafile=proxy.ca_cert)
    with httpx.Client(proxy=proxy.url, verify=trust, timeout=30) as client:
        plant_through_real_traffic(client)
    db = finish(proxy, capsem_home)
    assert NEEDLE not in proxy.log()  # `capsem run` keeps this log in the session's folder
    assert_plants_arrived_redacted(db, capsem_home / "main.db")

    files = [p for p in capsem_home.rglob("*") if p.is_file()]
    assert any(p.name == "session.db" for p in files) and any(p.name == "main.db" for p in files)
    for path in files:
        assert_no_needle_in_file(path)
    for path in (db, capsem_home / "main.db"):
        assert leaks_in_tables(path) == []

    assert "vacuumed 1" in run("vacuum")
    archive = db.parent / "session.db.gz"
    assert archive.is_file() and not db.exists()
    unpacked = tmp_path / "unpacked.db"
    unpacked.write_bytes(gzip.decompress(archive.read_bytes()))
    for path in (archive, unpacked):
        assert_no_needle_in_file(path)
    assert leaks_in_tables(unpacked) == []

    bundle = tmp_path / "bundle.db"
    assert "wrote" in run("bundle", "create", str(db.parent), "-o", str(bundle))
    assert_no_needle_in_file(bundle)
    assert leaks_in_tables(bundle) == []
    (row,) = rows(bundle, "SELECT * FROM tool_calls LIMIT 1") or [{}]
    assert row, "the bundle holds the session's tool calls"


def plant_through_real_traffic(client: httpx.Client) -> None:
    """Secrets in headers, queries, request bodies, tool arguments and results, MCP arguments,
    model text and webhook paths, each through mitmdump to the emulator."""
    anthropic, openai = "https://api.anthropic.com/v1/messages", "https://api.openai.com/v1/chat/completions"
    client.post(anthropic, headers={"x-api-key": SECRETS["anthropic"]},
                json={"model": "claude-haiku-4-5", "max_tokens": 20, "messages": [{"role": "user", "content":
                      f"my key is {SECRETS['openai']}"}]})  # fmt: skip
    client.post(openai + "?api_key=" + SECRETS["query"],
                headers={"authorization": f"Bearer {SECRETS['bearer']}", "x-internal-token": SECRETS["custom"]},
                json={"model": "gpt-4.1", "stream": True, "stream_options": {"include_usage": True},
                      "messages": [{"role": "user", "content": f'{{"password": "{SECRETS["body"]}"}}'}]})  # fmt: skip
    client.post("https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent",
                params={"key": SECRETS["gemini"]},
                json={"contents": [{"role": "user", "parts": [{"text": "hi " + SECRETS["custom"]}]}]})  # fmt: skip
    # the model calls tools whose arguments hold secrets (not streamed: a streamed argument arrives
    # in fragments of a few characters, which no scrubber can recognise in the raw preview)
    tool = {"name": "connect", "description": "Connects to the database.", "input_schema": TOOL_SCHEMA}
    asked = client.post(anthropic, json={"model": "claude-haiku-4-5", "max_tokens": 200, "tools": [tool],
                                         "messages": [{"role": "user", "content": "connect"}]})  # fmt: skip
    assert asked.json()["content"][-1]["type"] == "tool_use", asked.text
    function = {"type": "function", "function": {"name": "connect", "parameters": TOOL_SCHEMA}}
    client.post(openai, json={"model": "gpt-4.1", "tools": [function],
                              "messages": [{"role": "user", "content": "connect"}]})  # fmt: skip
    # the agent sends tool calls and their results back (streamed answers)
    shell = f"PGPASSWORD={SECRETS['pgpassword']} psql --password {SECRETS['flag']} -h db.internal"
    client.post(anthropic, json={"model": "claude-haiku-4-5", "max_tokens": 200, "stream": True, "messages": [
        {"role": "user", "content": "check the config"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "bash",
                                           "input": {"command": shell}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": TOOL_OUTPUT}]},
    ]})  # fmt: skip
    client.post(openai, json={"model": "gpt-4.1", "stream": True, "messages": [
        {"role": "user", "content": "check the config"},
        {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "unlock", "arguments": json.dumps({"passphrase": SECRETS["mcp_phrase"], "key": PEM})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": TOOL_OUTPUT},
    ]})  # fmt: skip
    # the model's own text names secrets (the emulator says what the `text` control holds)
    said = f"Found aws_secret_access_key={SECRETS['model_text']} and the hook {DISCORD} in the env"
    question = {"model": "claude-haiku-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": "?"}]}
    client.post(anthropic, headers={"x-emulator": f"text={said}"}, json=question)
    # MCP: secret-named arguments beyond `password`
    client.post("http://127.0.0.1:9/mcp", headers={"authorization": f"Bearer {SECRETS['bearer']}"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "login", "arguments": {"api_key": SECRETS["anthropic"],
                                 "db_password": SECRETS["mcp_db"], "passphrase": SECRETS["mcp_phrase"]}}})  # fmt: skip
    # presigned cloud URLs and a webhook
    for url, query in PRESIGNED.items():
        client.get(url, params=query)
    client.post(SLACK, json={"text": "deploy finished"})
    # a body whose 64 KiB preview (net_events) is cut inside a token: its first part, alone no
    # token to any rule, holds the needle
    cut = 65536 - len("ghp_RELSECRET")
    client.post(
        "https://uploads.example.test/put", content="x" * cut + SECRETS["preview_cut"] + " end" * 9000
    )


def assert_plants_arrived_redacted(db: Path, main_db: Path) -> None:
    """The plants reached the tables they aim at, redacted, with their harmless neighbours intact."""
    calls = rows(db, "SELECT arguments FROM tool_calls WHERE tool_name = 'connect'")
    assert len(calls) == 2, calls  # Anthropic and OpenAI
    for call in calls:
        arguments = json.loads(call["arguments"])
        for name, value in arguments.items():
            if name in ("db_password", "passphrase"):
                assert REDACTED.fullmatch(value), (name, value)  # the quote inside did not stop it
            elif name == "path":
                assert value.startswith("path ünï"), value
        assert any("BEGIN OPENSSH PRIVATE KEY" in name for name in arguments)
    # tool_responses keeps a short preview; the whole results are conversation items
    assert rows(db, "SELECT content_preview FROM tool_responses")
    results = [
        json.loads(r["content"])
        for r in rows(db, "SELECT content FROM item_contents WHERE kind = 'tool_result'")
    ]
    texts = [json.dumps(r, ensure_ascii=False) for r in results]
    assert texts and all("aws_secret_access_key = [redacted" in t for t in texts), texts
    assert all("postgres://app:[redacted hash:" in t for t in texts)
    (mcp,) = rows(db, "SELECT request_preview FROM mcp_calls")
    arguments = json.loads(mcp["request_preview"])["arguments"]
    assert all(REDACTED.fullmatch(v) for v in arguments.values()), arguments
    queries = {
        r["domain"]: r["query"]
        for r in rows(db, "SELECT domain, query FROM net_events WHERE query IS NOT NULL")
    }
    assert "X-Amz-Date=20240101T000000Z" in queries["bucket.s3.amazonaws.com"]
    assert "X-Amz-Signature=hash:" in queries["bucket.s3.amazonaws.com"]
    assert "se=2030-01-01T00:00:00Z" in queries["acct.blob.core.windows.net"]
    (hook,) = rows(db, "SELECT path FROM net_events WHERE domain = 'hooks.slack.com'")
    assert hook["path"].startswith("/services/[redacted hash:"), hook
    (session,) = rows(main_db, "SELECT command FROM sessions")
    assert session["command"].startswith("agent --password [redacted hash:"), session


def assert_no_needle_in_file(path: Path) -> None:
    data = path.read_bytes()
    for name, secret in SECRETS.items():
        assert secret.encode() not in data, f"{name} secret found in {path}"
    assert NEEDLE.encode() not in data, (
        f"a planted secret found in {path}: ...{_around(data, NEEDLE.encode())}..."
    )


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def leaks_in_tables(db: Path, needle: str = NEEDLE) -> list[str]:
    """`table.column: value` for every stored value that holds `needle` (a value longer than a page
    is split across overflow pages, so a byte search of the file alone could miss it)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        assert tables
        found = []
        for table in tables:
            cursor = conn.execute(f'SELECT * FROM "{table}"')
            columns = [d[0] for d in cursor.description]
            for row in cursor:
                for column, value in zip(columns, row, strict=True):
                    if isinstance(value, bytes) and value[:4] == ZSTD_MAGIC:  # bodies, item contents
                        value = zstandard.ZstdDecompressor().decompress(value)
                    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
                    if isinstance(text, str) and needle in text:
                        found.append(f"{table}.{column}: ...{_around(text, needle)}...")
        if "body_chunks" in tables:  # and every body as `capsem show-call` reads it
            assert conn.execute("SELECT COUNT(*) FROM event_body_blobs").fetchone()[0] > 0
            for row_id, direction, source in conn.execute(
                "SELECT row_id, direction, source_table FROM event_body_blobs"
            ).fetchall():
                body, _ = read_body(conn, row_id, direction, source)
                if needle.encode() in body:
                    found.append(f"{source} {row_id} {direction} body")
        return found
    finally:
        conn.close()


def _around(data, needle):
    at = data.find(needle)
    return data[max(0, at - 80) : at + 80]
