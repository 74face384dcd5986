"""Secrets found by their context, not by a list of shapes (issue 34), end to end: real mitmdump,
the real anthropic SDK against the emulator, each leak of the issue planted where an agent puts it
(a tool call's command and the tool result it printed, an MCP call's arguments, a raw JSON body as
another client escapes it, a request path), then every file under CAPSEM_HOME, search.db, the
vacuumed archives and every export (HAR, JSONL, Parquet, `view --html`, bundle, OTLP with content)
searched for each raw value, each piece an escape or a punctuation mark could have cut it into,
and their base64 (`tests/reliability/sweep.py`). Every secret here was stored on the code before."""

from __future__ import annotations

import random
import ssl
import string
from pathlib import Path

import anthropic
import httpx
import pytest

from capsem.emulator import Emulator
from capsem.mitm import start_mitmdump
from tests.conftest import rows, seeded_confdir
from tests.reliability.sweep import Corpus, everything, found_in, home_of
from tests.reliability.test_secrets_agents_handle import assert_nowhere, session_db


def texts(home: Path, sql: str) -> str:
    """The values a query reads from the first session, as one text with JSON's escapes undone
    (`\\"` read as `"`): what a person reading them sees."""
    return "\n".join(str(v) for r in rows(session_db(home, 0), sql) for v in r.values()).replace("\\", "")


RNG = random.Random(3434)
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def pw(tag: str) -> str:
    return f"Pw{tag}" + rand(14)


# 1. escapes: what a JSON encoder writes hides the secret from every pattern
BOT = rand(10, string.digits) + ":AA" + rand(33, ALNUM + "_-")
ESCAPED_KEY = "sk-ant-api03-" + rand(40)
SLASHED, UMLAUT = pw("Slash"), pw("Umlaut")
GLUED_KEY = "AKIA" + rand(16, string.ascii_uppercase + "234567")

# 2. credential syntaxes, each with its own password
SYNTAX = {
    "db_pass": ("DB_PASS={}", pw("DbPass")),
    "mysql_pwd": ("export MYSQL_PWD='{}'", pw("MysqlPwd")),
    "sshpass": ("SSHPASS={} sshpass -e ssh deploy@web1", pw("Sshpass")),
    "netrc": ("machine api.heroku.com\n  login ci@example.com\n  password {}\n", pw("Netrc")),
    "maven": (
        "<settings><servers><server><id>nexus</id><username>ci</username><password>{}</password>"
        "</server></servers></settings>",
        pw("Maven"),
    ),
    "ado": ("Server=tcp:db.internal,1433;Database=app;User Id=sa;Pwd={};Encrypt=true", pw("Ado")),
    "pgpass": ("db.internal:5432:app:postgres:{}\n", pw("Pgpass")),
    "aws_configure": ("aws configure set aws_secret_access_key {} --profile ci", pw("AwsConf")),
    "redis": ("redis-cli -h cache.internal -a {} ping", pw("Redis")),
    "sqlcmd": ("sqlcmd -S db.internal -U sa -P {} -Q 'select 1'", pw("Sqlcmd")),
    "az": ("az login -u ci@example.com -p {}", pw("Az")),
    "mongosh": ("mongosh mongodb://db.internal -u admin -p {} --authenticationDatabase admin", pw("Mongo")),
    "keytool": ("keytool -list -keystore release.jks -storepass {}", pw("Keytool")),
}
IAM_SECRET = rand(30) + "/" + rand(9)
IAM_CSV = f"Access key ID,Secret access key\nAKIA{rand(16, string.ascii_uppercase + '234567')},{IAM_SECRET}\n"
MCP_PASSWORD = pw("Mcp")

# 3. a value's true extent: punctuation inside it, the rest after it
EXTENT = {mark: f"Ex{rand(6)}{mark}{rand(8)}" for mark in ("(", "[", ",", ";", "&", "<")}

# 4. shapes no list had (also in a request path: net_events.path)
SHAPES = {
    "supabase_pat": "sbp_" + rand(40, HEX),
    "supabase_secret": "sb_secret_" + rand(22) + "_" + rand(8),
    "aws_session": "FwoGZXIvYXdzE" + rand(220, ALNUM + "+/"),
    "cloudflare": "cfut_" + rand(40) + rand(8, HEX),
}
PATH_TOKEN = "sbp_" + rand(40, HEX)
LEGACY_CLOUDFLARE = "Kq" + rand(36, ALNUM) + "9z"  # no prefix: found only by the word before it


def tool_turn(tool_id: str, command: str, result: str) -> list[dict]:
    return [{"role": "assistant", "content": [{"type": "tool_use", "id": tool_id, "name": "Bash",
                                               "input": {"command": command}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": result}]}]  # fmt: skip


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, Corpus]:
    home = tmp_path_factory.mktemp("context-home")
    work = tmp_path_factory.mktemp("context-work")
    with home_of(home), Emulator() as emu:
        proxy = start_mitmdump(confdir=seeded_confdir(work / "conf"), log_path=work / "agent.log",
                               args=["--mode", f"upstream:{emu.proxy_url}",
                                     "--set", f"ssl_verify_upstream_trusted_ca={emu.ca_path}"])  # fmt: skip
        try:
            agent_run(proxy)
        finally:
            assert proxy.stop() == 0
        logs = [(str(p), p.read_bytes()) for p in work.glob("*.log")]
    return home, logs + everything(home, work / "exports")


def agent_run(proxy) -> None:
    http = httpx.Client(proxy=proxy.url, verify=ssl.create_default_context(cafile=proxy.ca_cert), timeout=60)
    claude = anthropic.Anthropic(api_key="sk-ant-api03-" + rand(40), http_client=http, max_retries=0)
    model = "claude-haiku-4-5"
    history: list[dict] = [{"role": "user", "content": "set up the deploy"}]
    for i, (name, (template, secret)) in enumerate(SYNTAX.items()):  # the command, and what it printed
        history += tool_turn(f"toolu_{i}", template.format(secret), f"{name}: ok\n{template.format(secret)}")
    history += tool_turn("toolu_csv", "cat ~/Downloads/ci_accessKeys.csv", IAM_CSV)
    history += tool_turn("toolu_bot", "grep -r TELEGRAM .env.py", f'TELEGRAM_BOT = "{BOT}"\n')
    extent = "\n".join(f"DB_PASSWORD_{i}={value}" for i, value in enumerate(EXTENT.values()))
    history += tool_turn("toolu_extent", "cat .env", extent + "\n")
    shapes = "\n".join(f"{name} {key}" for name, key in SHAPES.items())
    history += tool_turn(
        "toolu_keys", "cat keys.txt", f"{shapes}\nthe cloudflare token is {LEGACY_CLOUDFLARE}\n"
    )
    history.append({"role": "user", "content": "which of these still work?"})
    claude.messages.create(model=model, max_tokens=50, messages=history)
    # an MCP server's tool, a credential in its arguments
    http.post("http://127.0.0.1:9/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "run_command", "arguments": {"cmd": f"redis-cli -a {MCP_PASSWORD} flushall"}}})  # fmt: skip
    # raw JSON as other encoders write it: a letter of a key as \u0073, `\/` and `\u00e4` in a value,
    # a key glued to a `\n`
    content = (f"key \\u0073{ESCAPED_KEY[1:]}\\nPASSWORD={SLASHED[:6]}\\/{SLASHED[6:]} next\\n"
               f"PASSWORD={UMLAUT[:6]}\\u00e4{UMLAUT[6:]} next\\n{GLUED_KEY}")  # fmt: skip
    raw = (
        '{"model":"claude-haiku-4-5","max_tokens":20,"messages":[{"role":"user","content":"'
        + content
        + '"}]}'
    )
    http.post("https://api.anthropic.com/v1/messages", content=raw.encode(),
              headers={"content-type": "application/json", "anthropic-version": "2023-06-01"})  # fmt: skip
    # a token in a request path
    http.get(f"https://api.supabase.com/v1/projects/{PATH_TOKEN}/functions")


def pieces(secret: str) -> list[str]:
    """`secret` and the parts a mark inside it could have cut it into (each long enough to be its own)."""
    out = [secret]
    for mark in "([,;&<":
        if mark in secret:
            out += [part for part in secret.split(mark) if len(part) >= 6]
    return out


ESCAPES = {
    "telegram_bot_before_escaped_quote": [BOT],
    "key_with_a_letter_as_u0073": [ESCAPED_KEY, ESCAPED_KEY[1:]],
    "escaped_slash_in_a_named_value": [SLASHED, SLASHED[6:]],
    "u00e4_in_a_named_value": [UMLAUT, UMLAUT[6:]],
    "key_glued_to_an_escaped_newline": [GLUED_KEY],
}


@pytest.mark.parametrize("leak", sorted(ESCAPES))
def test_1_escapes_keep_no_part_of_a_secret(recorded, leak):
    _, corpus = recorded
    assert_nowhere(corpus, ESCAPES[leak])


def test_1_escaped_secrets_are_redacted_in_place(recorded):
    home, _ = recorded
    items = texts(home, "SELECT content FROM item_contents")
    assert 'TELEGRAM_BOT = "[redacted hash:' in items and "PASSWORD=[redacted hash:" in items


@pytest.mark.parametrize("syntax", [*sorted(SYNTAX), "iam_csv", "mcp_arguments"])
def test_2_credential_syntaxes(recorded, syntax):
    _, corpus = recorded
    secret = {"iam_csv": IAM_SECRET, "mcp_arguments": MCP_PASSWORD}.get(syntax) or SYNTAX[syntax][1]
    assert_nowhere(corpus, [secret])


def test_2_what_held_them_stays_readable(recorded):
    home, _ = recorded
    items = texts(home, "SELECT content FROM item_contents")
    assert (
        "Access key ID,Secret access key" in items
        and "redis-cli -h cache.internal -a [redacted hash:" in items
    )
    assert (
        "<password>[redacted hash:" in items and "Pwd=[redacted hash:" in items and ";Encrypt=true" in items
    )
    asked = texts(home, "SELECT request_preview FROM mcp_calls")
    assert "redis-cli -a [redacted hash:" in asked, asked


@pytest.mark.parametrize("mark", sorted(EXTENT))
def test_3_a_value_is_redacted_to_its_true_end(recorded, mark):
    _, corpus = recorded
    assert_nowhere(corpus, pieces(EXTENT[mark]))


@pytest.mark.parametrize("shape", [*sorted(SHAPES), "legacy_cloudflare_after_token"])
def test_4_shapes_no_list_had(recorded, shape):
    _, corpus = recorded
    assert_nowhere(corpus, [SHAPES.get(shape, LEGACY_CLOUDFLARE)])


def test_4_a_token_in_a_request_path(recorded):
    home, corpus = recorded
    assert_nowhere(corpus, [PATH_TOKEN])
    (hook,) = rows(session_db(home, 0), "SELECT path FROM net_events WHERE domain = 'api.supabase.com'")
    assert hook["path"].startswith("/v1/projects/[redacted hash:") and hook["path"].endswith("/functions"), (
        hook
    )
    items = texts(home, "SELECT content FROM item_contents")
    assert "the cloudflare token is [redacted hash:" in items


def test_the_corpus_holds_what_was_recorded(recorded):
    """The sweep reads what it should: the recorded conversation is there."""
    _, corpus = recorded
    assert found_in(corpus, "which of these still work?")
