"""Secrets that agents really handle never reach disk (issue 21), end to end: real mitmdump, the
real anthropic and openai SDKs against the emulator, each shape planted where an agent puts it,
then every file under CAPSEM_HOME, search.db, the vacuumed archives and every export (HAR, JSONL,
Parquet, `view --html`, bundle, OTLP with content) searched for each raw value and its base64.

Two recordings share one CAPSEM_HOME: the agent's run (points 1-6) and a run against a local
server whose every answer carries a new rate-limit timestamp and a new cookie (point 7)."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import ssl
import stat
import string
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from capsem.emulator import Emulator
from capsem.markers import hash_value
from capsem.mitm import start_mitmdump
from tests.cli.conftest import run
from tests.conftest import rows, seeded_confdir
from tests.reliability.sweep import Corpus, everything, found_in, home_of

RNG = random.Random(21)
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


# 1. passwords on command lines (the agent's Bash calls and what they printed)
PASSWORDS = {name: "Pw" + rand(12) for name in
             ("curl", "mysql", "sshpass", "docker", "openssl", "htpasswd", "cookie", "set_cookie", "mcp")}  # fmt: skip
COMMANDS = [
    f"curl -sf -u admin:{PASSWORDS['curl']} https://ci.internal/api/builds",
    f"mysql -h db.internal -u root -p{PASSWORDS['mysql']} app -e 'select 1'",
    f"sshpass -p {PASSWORDS['sshpass']} ssh deploy@web1 uptime",
    f"docker login -u ci-bot -p {PASSWORDS['docker']} registry.internal",
    f"openssl pkcs12 -in cert.p12 -passin pass:{PASSWORDS['openssl']} -nodes -out cert.pem",
    f"htpasswd -b /etc/nginx/.htpasswd alice {PASSWORDS['htpasswd']}",
]
HTTP_OUTPUT = (
    f"HTTP/1.1 200 OK\nContent-Type: text/html\nSet-Cookie: sid={PASSWORDS['set_cookie']}; Path=/; HttpOnly\n"
    f"\n> GET / HTTP/1.1\n> Cookie: sessionid={PASSWORDS['cookie']}; theme=dark\n"
)

# 2. key shapes with no secret-named key nearby (random, as real keys are)
KEYS = {
    "sendgrid": f"SG.{rand(22, ALNUM + '-_')}.{rand(43, ALNUM + '-_')}",
    "twilio": "SK" + rand(32, HEX),
    "stripe_webhook": "whsec_" + rand(32),
    "groq": "gsk_" + rand(52),
    "xai": "xai-" + rand(80),
    "perplexity": "pplx-" + rand(48),
    "replicate": "r8_" + rand(37),
    "google_oauth": "GOCSPX-" + rand(28, ALNUM + "-_"),
    "slack_app": f"xapp-1-A{rand(10, string.ascii_uppercase + string.digits)}-{rand(13, string.digits)}-{rand(64, HEX)}",
    "shopify": "shpat_" + rand(32, HEX),
    "vault": "hvs." + rand(95, ALNUM + "_-"),
    "databricks": "dapi" + rand(32, HEX),
    "mailgun": "key-" + rand(32, HEX),
    "notion": "ntn_" + rand(11, string.digits) + rand(35),
    "telegram": rand(10, string.digits) + ":AA" + rand(33, ALNUM + "_-"),
    "putty": rand(64, ALNUM + "+/"),
    "custom": "acme_" + rand(24, string.ascii_lowercase + string.digits),  # a redaction.rules entry
}
PUTTY = ("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: deploy@ci\nPublic-Lines: 2\n"
         "AAAAC3NzaC1lZDI1NTE5AAAAIB3vnKmPUBLICpartONLY00000000000000000000\nAAAA\nPrivate-Lines: 1\n"
         f"{KEYS['putty']}\nPrivate-MAC: {rand(64, HEX)}\n")  # fmt: skip
CONFIG = (
    "redaction:\n  rules:\n    - {id: acme-key, regex: '\\b(acme_[a-z0-9]{24})\\b', keywords: [acme_]}\n"
    # the MCP shell call waits for a person (nobody answers): its arguments reach `approvals`
    "policy:\n  ask_timeout_s: 0.2\n  rules:\n    - {name: ask-shell, action: ask, mcp_tool: run_command}\n"
)

# 3. a key and a private key cut by storage (requests cut every 64 KiB; a long answer)
CUT_KEY = "sk-ant-api03-" + rand(40)
CUT_PEM_BODY = rand(48)
CUT_PEM = f"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA{CUT_PEM_BODY}\n-----END RSA PRIVATE KEY-----\n"
CUT_ANSWER_KEY = "ghp_" + rand(36)

# 4. keys split across a streamed answer's deltas
STREAMED = {"anthropic": "sk-ant-api03-" + rand(40), "openai": "sk-proj-" + rand(40)}

# 5. a bot token in a URL path; JSON-escaped secrets in raw bodies (Go's \u0026, PHP's \/)
BOT = rand(10, string.digits) + ":AA" + rand(33, ALNUM + "_-")
SAS_SIG = rand(43, ALNUM + "%")
PHP_PASSWORD = "P" + rand(15)

# 6. a weak password (a wordlist has it) and one key seen in a header and in a prompt
WEAK = "Summer2024!"
SHARED_KEY = "sk-ant-api03-" + rand(40)

# 7. a credential learned from a header after hundreds of rotating cookies
LATE_TOKEN = rand(40)
ROTATIONS = 530


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, Corpus]:
    """CAPSEM_HOME after both recordings, and everything written or exported from it."""
    home = tmp_path_factory.mktemp("secrets-home")
    work = tmp_path_factory.mktemp("secrets-work")
    (home / "config.yaml").write_text(CONFIG)
    with home_of(home), Emulator() as emu:
        proxy = start_mitmdump(confdir=seeded_confdir(work / "conf"), log_path=work / "agent.log",
                               args=["--mode", f"upstream:{emu.proxy_url}",
                                     "--set", f"ssl_verify_upstream_trusted_ca={emu.ca_path}"])  # fmt: skip
        try:
            agent_run(proxy)
        finally:
            assert proxy.stop() == 0
        with rotating_server() as url:
            proxy = start_mitmdump(confdir=seeded_confdir(work / "conf"), log_path=work / "rotation.log")
            try:
                rotation_run(proxy, url)
            finally:
                assert proxy.stop() == 0
        logs = [(str(p), p.read_bytes()) for p in work.glob("*.log")]
    return home, logs + everything(home, work / "exports")


def trust(proxy) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=proxy.ca_cert)


def agent_run(proxy) -> None:
    http = httpx.Client(proxy=proxy.url, verify=trust(proxy), timeout=60)
    claude = anthropic.Anthropic(api_key=SHARED_KEY, http_client=http, max_retries=0)
    gpt = openai.OpenAI(api_key="sk-proj-" + rand(40), http_client=http, max_retries=0)
    model = "claude-haiku-4-5"
    # 1. the agent ran shell commands (tool_use in its history) and sends back what they printed
    history = [{"role": "user", "content": "check the services"},
               {"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "Bash",
                                                  "input": {"command": c}} for i, c in enumerate(COMMANDS)]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                             "content": HTTP_OUTPUT if i == 0 else "ok"}
                                            for i in range(len(COMMANDS))]}]  # fmt: skip
    claude.messages.create(model=model, max_tokens=50, messages=history)
    # MCP: a shell tool run through an MCP server
    http.post(
        "http://127.0.0.1:9/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "run_command",
                "arguments": {"cmd": f"mysql -uroot -p{PASSWORDS['mcp']} -e 'show tables'"},
            },
        },
    )
    # 2. keys pasted into a prompt, bare, and a file the agent read (a .ppk, a .env without names)
    listing = "\n".join(f"{name}: {key}" for name, key in KEYS.items() if name != "putty")
    gpt.chat.completions.create(
        model="gpt-4.1", messages=[{"role": "user", "content": f"which of these work?\n{listing}"}]
    )
    claude.messages.create(model=model, max_tokens=50, messages=[
        {"role": "user", "content": "read deploy.ppk"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_ppk", "name": "Read",
                                           "input": {"path": "deploy.ppk"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_ppk", "content": PUTTY}]}])  # fmt: skip
    # 3. a request longer than 64 KiB in one JSON string, the keys at every offset; a long answer
    unit = f"build log line: token in use {CUT_KEY} and key\n{CUT_PEM}"
    claude.messages.create(model=model, max_tokens=50, messages=[{"role": "user", "content": unit * 60}])
    claude.messages.create(
        model=model,
        max_tokens=50,
        messages=[{"role": "user", "content": "print the log"}],
        extra_headers={"x-emulator": f"text=log {CUT_ANSWER_KEY} line ;repeat=3000"},
    )
    # 4. streamed answers that name a key: its characters arrive a few per delta
    said = f"I found {STREAMED['anthropic']} in the config."
    with claude.messages.stream(model=model, max_tokens=200, messages=[{"role": "user", "content": "find it"}],
                                extra_headers={"x-emulator": f"text={said}"}) as stream:  # fmt: skip
        assert "".join(stream.text_stream) == said
    chunks = gpt.chat.completions.create(
        model="gpt-4.1",
        stream=True,
        messages=[{"role": "user", "content": "?"}],
        extra_headers={"x-emulator": f"text=use {STREAMED['openai']} now"},
    )
    assert STREAMED["openai"] in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # 5. a bot token in the path; raw bodies as Go and PHP encode JSON
    http.post(f"https://api.telegram.org/bot{BOT}/sendMessage", json={"chat_id": 1, "text": "deployed"})
    go = (
        '{"model":"claude-haiku-4-5","max_tokens":20,"messages":[{"role":"user","content":'
        f'"fetch https://acct.blob.core.windows.net/c/r.csv?sv=2022-11-02\\u0026sig={SAS_SIG}\\u0026sp=r"}}]}}'
    )
    php = ('{"model":"claude-haiku-4-5","max_tokens":20,"messages":[{"role":"user","content":'
           f'"DATABASE_URL=postgres:\\/\\/app:{PHP_PASSWORD}@db.internal:5432\\/app"}}]}}')  # fmt: skip
    for raw in (go, php):
        http.post(
            "https://api.anthropic.com/v1/messages",
            content=raw.encode(),
            headers={"content-type": "application/json", "anthropic-version": "2023-06-01"},
        )
    # 6. a weak password in a tool call's arguments; the header's key in a prompt too
    claude.messages.create(model=model, max_tokens=50, messages=[
        {"role": "user", "content": f"is {SHARED_KEY} still valid?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_db", "name": "connect",
                                           "input": {"user": "app", "password": WEAK}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_db", "content": "ok"}]}])  # fmt: skip


class _Rotating(BaseHTTPRequestHandler):
    """Answers like a provider behind a CDN: a new rate-limit reset timestamp and a new cookie each time."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK wait each
    count = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        type(self).count += 1
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header("anthropic-ratelimit-tokens-reset", reset_at(type(self).count))
        self.send_header("x-ratelimit-remaining-tokens", str(100000 - type(self).count))
        self.send_header("set-cookie", f"__cf_bm={rand(43)}; path=/; HttpOnly; Secure; SameSite=None")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def reset_at(n: int) -> str:
    return f"2026-11-25T20:{n // 60 % 60:02d}:{n % 60:02d}.{n:06d}Z"


@contextmanager
def rotating_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Rotating)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def rotation_run(proxy, url: str) -> None:
    with httpx.Client(proxy=proxy.url, timeout=30) as client:
        for n in range(ROTATIONS):
            client.post(f"{url}/v1/ping", json={"n": n})
        client.post(f"{url}/v1/ping", json={"n": "late"}, headers={"x-internal-token": LATE_TOKEN})
        client.post(
            f"{url}/v1/echo", json={"note": f"the token is {LATE_TOKEN}; it resets at {reset_at(100)}"}
        )


def assert_nowhere(corpus: Corpus, secrets: dict[str, str] | list[str]) -> None:
    named = secrets.items() if isinstance(secrets, dict) else ((s, s) for s in secrets)
    leaks = {name: found_in(corpus, secret) for name, secret in named}
    assert not any(leaks.values()), {k: v for k, v in leaks.items() if v}


def session_db(home: Path, n: int) -> Path:
    """The n-th session's database (archived by the sweep: unpacked next to it)."""
    archive = sorted(home.glob("sessions/*/session.db.gz"))[n]
    db = archive.with_name(f"read-{n}.db")
    if not db.exists():
        db.write_bytes(gzip.decompress(archive.read_bytes()))
    return db


def hash_value_in(home: Path, secret: str) -> str:
    """The marker name `secret` gets in that installation."""
    with home_of(home):
        return hash_value(secret)


def texts(home: Path, sql: str) -> str:
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in rows(session_db(home, 0), sql))


def test_1_passwords_on_command_lines_and_cookies(recorded):
    home, corpus = recorded
    assert_nowhere(corpus, PASSWORDS)
    items = texts(home, "SELECT content FROM item_contents")
    for command in COMMANDS:  # the command stays readable, the password is gone
        assert command.split(" -")[0] in items
    assert (
        "-u admin:[redacted hash:" in items
        and "-p[redacted hash:" in items
        and "pass:[redacted hash:" in items
    )
    assert (
        "Set-Cookie: sid=[redacted hash:" in items and "Path=/" in items and "theme=[redacted hash:" in items
    )
    asked = texts(home, "SELECT decision, arguments FROM approvals")  # the MCP call an `ask` rule held
    assert "timed_out" in asked and "mysql -uroot -p[redacted hash:" in asked, asked


def test_2_key_shapes_from_the_maintained_rule_set_and_the_config(recorded):
    home, corpus = recorded
    assert_nowhere(corpus, KEYS)
    items = texts(home, "SELECT content FROM item_contents")
    assert "sendgrid: [redacted hash:" in items and "custom: [redacted hash:" in items
    assert (
        "PuTTY-User-Key-File-3: ssh-ed25519" in items and "Private-Lines: 1" in items
    )  # what it was, visible


def test_3_a_key_cut_by_storage_is_found_across_the_cut(recorded):
    home, corpus = recorded
    assert_nowhere(corpus, [CUT_KEY, CUT_PEM_BODY, CUT_ANSWER_KEY])
    db = session_db(home, 0)
    sizes = [r["size"] for r in rows(db, "SELECT size FROM event_body_blobs")]
    assert max(sizes) > 2 * 65536  # bodies that were cut more than once
    assert "BEGIN RSA PRIVATE KEY" in texts(home, "SELECT content FROM item_contents")


def test_4_a_key_split_across_stream_deltas_is_cut_from_every_delta(recorded):
    home, corpus = recorded
    assert_nowhere(corpus, STREAMED)
    answers = texts(home, "SELECT text_content FROM model_calls WHERE stream = 1")
    assert "I found [redacted hash:" in answers and "use [redacted hash:" in answers
    # the streamed body still reads as the stream it was, the key's marker in the delta where it began
    with home_of(home):
        sid = session_db(home, 0).parent.name
        calls = rows(
            session_db(home, 0), "SELECT id FROM model_calls WHERE stream = 1 AND provider = 'anthropic'"
        )
        raw = run("show-call", str(calls[-1]["id"]), "--response", "--raw", sid)
    assert "content_block_delta" in raw and raw.count("[redacted hash:") == 1
    events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    joined = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert joined == f"I found [redacted {hash_value_in(home, STREAMED['anthropic'])}] in the config."


def test_5_bot_tokens_in_paths_and_json_escaped_secrets_in_raw_bodies(recorded):
    home, corpus = recorded
    assert_nowhere(corpus, [BOT, SAS_SIG, PHP_PASSWORD])
    (hook,) = rows(session_db(home, 0), "SELECT path FROM net_events WHERE domain = 'api.telegram.org'")
    assert re.fullmatch(r"/bot\[redacted hash:[0-9a-f]{12}\]/sendMessage", hook["path"]), hook


def test_6_markers_are_keyed_per_installation_and_not_reversible(recorded):
    home, corpus = recorded
    key = home / "hash.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_text().strip()) == 64
    assert_nowhere(corpus, [WEAK])
    plain = hashlib.sha256(WEAK.encode()).hexdigest()[:12]  # what a wordlist would compute
    assert found_in(corpus, plain) == []
    marker = hash_value_in(home, SHARED_KEY)  # this installation's marker for the key
    assert marker != "hash:" + hashlib.sha256(SHARED_KEY.encode()).hexdigest()[:12]
    headers = texts(home, "SELECT request_headers FROM net_events WHERE domain = 'api.anthropic.com'")
    prompts = texts(home, "SELECT content FROM item_contents")
    assert (
        marker in headers and f"is [redacted {marker}] still valid" in prompts
    )  # the same secret, one marker


def test_7_learned_credentials_never_overflow_and_rate_limit_values_are_kept(recorded):
    home, corpus = recorded
    assert_nowhere(corpus, [LATE_TOKEN])
    db = session_db(home, 1)
    (echo,) = rows(db, "SELECT request_body_preview FROM net_events WHERE path = '/v1/echo'")
    assert "the token is [redacted hash:" in echo["request_body_preview"]
    assert reset_at(100) in echo["request_body_preview"]  # a rate-limit timestamp is no credential
    assert len(rows(db, "SELECT id FROM net_events")) == ROTATIONS + 2
