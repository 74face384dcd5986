import json
import os
import re
import shlex
import subprocess
import sys
from unittest.mock import patch

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assembler.procdiag.sample import ProcessReader
from capsem import redact, secret_names
from capsem.credential_places import pgpass_spans
from capsem.escapes import scrub_decoded
from capsem.redact import Scrubber, hash_value, headers_json, redact_query
from capsem.rollup import register_session
from capsem.settings import defaults
from capsem.store.schema import open_main_db

ALLOW = frozenset({"content-type", "user-agent"})


def test_headers_allowlisted_verbatim_others_hashed_and_learned():
    scrubber = Scrubber()
    stored = json.loads(
        headers_json(
            [
                ("Content-Type", "application/json"),
                ("X-Api-Key", "sk-ant-api03-secretvalue123"),
                ("Authorization", "Bearer tok_abcdefghijklmnop"),
                ("Accept", "a"),
                ("Accept", "b"),
            ],
            ALLOW | {"accept"},
            scrubber,
        )
    )
    assert stored["content-type"] == "application/json"
    assert stored["x-api-key"] == hash_value("sk-ant-api03-secretvalue123")
    assert stored["authorization"].startswith("hash:") and len(stored["authorization"]) == 17
    assert stored["accept"] == ["a", "b"]
    # the bearer token was learned and is scrubbed wherever it shows up later
    assert "tok_abcdefghijklmnop" not in scrubber.scrub("echo tok_abcdefghijklmnop")


def test_scrub_known_shapes_and_json_fields():
    text = (
        "k1 sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAA k2 sk-proj-BBBBBBBBBBBBBBBBBBBBBBBB "
        "k3 AIzaSyCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC k4 ghp_DDDDDDDDDDDDDDDDDDDDDDDD "
        '{"client_secret": "plainvalue99", "max_tokens": 100}'
    )
    out = Scrubber().scrub(text)
    for secret in (
        "AAAAAAAAAAAAAAAAAAAA",
        "BBBBBBBBBBBBBBBB",
        "CCCCCCCCCCCCCCCC",
        "DDDDDDDDDDDDDDDD",
        "plainvalue99",
    ):
        assert secret not in out
    assert '"max_tokens": 100' in out


def test_hashed_headers_and_queries_stay_as_they_are_when_stored():
    """The store scrubs the JSON of hashed headers and the redacted query once more: no change."""
    scrubber = Scrubber()
    headers = headers_json(
        [("Authorization", "Bearer tok_abcdefghijklmnop"), ("X-Api-Key", "k" * 20)], ALLOW, scrubber
    )
    query = redact_query("X-Amz-Signature=abc123&token=xyz&x=1", frozenset(), scrubber)
    assert query == f"X-Amz-Signature={hash_value('abc123')}&token={hash_value('xyz')}&x=1"
    for stored in (headers, query, "--password hash:0123456789ab"):
        assert scrubber.scrub(stored) == stored


def test_query_secrets_hashed_order_kept():
    scrubber = Scrubber()
    out = redact_query(
        "alt=sse&key=AIzaSyEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEE&x=1", frozenset({"key"}), scrubber
    )
    assert out == f"alt=sse&key={hash_value('AIzaSyEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEEE')}&x=1"


_PIECES = [
    "sk-ant-api03-abcdefghij12", "sk-proj-ABCDEFGHIJKLMNOPQRST", "AIzaSyA0123456789012345678901",
    "ghp_" + "a" * 24, "github_pat_" + "b" * 22, "xoxb-1234567890ab", "ya29." + "c" * 24,
    "AKIAABCDEFGHIJKLMNOP", "Bearer tok_abcdefghijkl", "eyJhbGciOi.eyJzdWIiOiIx.c2lnbmF0dXJl",
    '"api_key": "s3cr3tvalue"', '\\"password\\": \\"hunter2hunter2\\"', '"Authorization":"xyzw1234"',
    "learned-credential-42", " ", "\n", "sk-", "AIza", '"', "'", "\\", ":", "=", "token", "TOKEN", "Key",
    "db_password=", "--passphrase ", "max_tokens: ", "X-Amz-Signature=", "&sig=", "?sig=abc", "[redacted ",
    "hash:0123456789ab",    "-----BEGIN RSA PRIVATE KEY-----", "MIIEow\\n", "-----END RSA PRIVATE KEY-----", "PRIVATE KEY",
    "https://hooks.slack.com/services/T0ABCDEF/B1/xyz", "discord.com/api/webhooks/1234567/", "/webhookb2/a",
    "a" * 16, "hooks.zapier.com/hooks/catch/1/ab", "aws_secret_access_key = ", "os.environ[", "str", "$TOKEN",
]  # fmt: skip
_TEXTS = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=12)), max_size=14).map("".join)


def plain_named_pass(text: str) -> str:
    """The secret-named values pass with its name words found by a regex scan of the whole
    lower-cased text (no Hyperscan, whatever its length)."""
    hits = [
        m.start() for m in secret_names._WORD_STARTS_RE.finditer(text.translate(secret_names._ASCII_LOWER))
    ]
    with patch.object(secret_names, "_word_hits", lambda _text, _data: hits):
        return secret_names.scrub_named_values(text)


@settings(max_examples=150, deadline=None)  # the reference runs every one of the 232 rules' regexes
@given(
    _TEXTS,
    st.sampled_from(["", " lorem ipsum." * 200, " lørem ïpsum 😀 \udc80." * 150, "lorem ipsum\n" * 700]),
)
def test_prefiltered_scrub_equals_the_plain_regex_passes(text, padding):
    """The prefilters (literals, name words; a regex scan for short texts, Hyperscan for long
    ones, ASCII or not) only skip what could not match, and a long text's later rounds run only
    around its markers (lines of padding) when that changes nothing: the output is the same as
    running every regex over the whole text until it holds."""
    text = padding + text + padding
    scrubber = Scrubber()
    scrubber.learn("learned-credential-42")
    every_rule = range(len(scrubber.rules.rules))

    def plain_passes(reference: str) -> str:
        reference = plain_named_pass(reference)
        reference = redact._redact_spans(
            reference, [m.span() for m in re.finditer(re.escape("learned-credential-42"), reference)]
        )
        for _, pattern in redact._PATTERNS:
            reference = redact._redact_spans(
                reference, [redact._secret_of(m) for m in re.finditer(pattern, reference)]
            )
        reference = redact._redact_spans(reference, redact._cookie_spans(reference))
        reference = redact._redact_spans(
            reference, pgpass_spans(reference, reference.encode("utf-8", "surrogatepass"))
        )
        return redact._redact_spans(reference, redact._rule_spans(reference, scrubber.rules, every_rule))

    reference = text
    for _ in range(4):  # the passes over the decoded view, until the text holds
        before = reference
        reference = scrub_decoded(reference, plain_passes)
        if reference == before:
            break
    assert scrubber.scrub(text) == (reference or text)


@pytest.mark.parametrize("text", ["&sig=/webhookb2/a", "&sig=\\/webhookb2/a", "x=1&sig=/webhookb2/abc def"])
def test_a_value_partly_redacted_is_redacted_around_the_marker(text):
    """A rule redacts the end of a `sig=` value, then the query pattern reads the value up to a
    blank: the rest is redacted beside the marker, never over half of it (found by hypothesis:
    the second scrub of `&sig=\\/webhookb2/a` redacted again)."""
    once = Scrubber().scrub(text)
    assert Scrubber().scrub(once) == once and "webhookb2" not in once
    assert re.sub(r"\[redacted hash:[0-9a-f]{12}\]", "", once).count("[redacted") == 0


@settings(max_examples=400, deadline=None)
@given(_TEXTS)
def test_scrubbing_twice_changes_nothing(text):
    """Stored text is scrubbed again on its way into a bundle: a second pass must not re-redact."""
    once = Scrubber().scrub(text)
    assert Scrubber().scrub(once) == once


LINES = "lorem ipsum dolor\n" * 700


@pytest.mark.parametrize(
    ("line", "rounds"),
    [  # (a line, the whole rounds it takes)
        ("export GITHUB_TOKEN=ghp_" + "a" * 36, 1),  # holds: the lines around its marker say so
        ("/aws_secret_access_key = &xoxb-1234567890ab=$TOKEN'", 2),  # a second round redacts more
    ],
)
def test_a_long_texts_later_rounds_read_the_lines_around_its_markers_first(line, rounds):
    """A long text that a round changed is read again around its markers only; if that changes
    nothing it holds, else it gets whole rounds as a short one does: the same output either way."""
    text = LINES + line + "\n" + LINES
    scrubber = Scrubber()
    read: list[int] = []
    passes = scrubber._passes
    with patch.object(scrubber, "_passes", lambda view: read.append(len(view)) or passes(view)):
        scrubbed = scrubber.scrub(text)
    assert scrubbed == LINES + Scrubber().scrub(line) + "\n" + LINES
    assert "[redacted hash:" in scrubbed and Scrubber().scrub(scrubbed) == scrubbed
    windowed = [length < len(text) / 2 for length in read]  # a window: the line and ~2 KiB either side
    assert windowed == [False] + [True, False] * (rounds - 1) + [True]


# --- the leaks of the hardening issue (defect 3): each test failed before the fix ------------------

PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACBPEMSECRETbodyPEMSECRETbody0000000000000000000000000000000AAAA\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
PEM_BODY = "PEMSECRETbody"


def test_a_private_key_block_is_redacted_raw_escaped_once_and_twice():
    scrub = Scrubber().scrub
    arguments = json.dumps({"path": "/root/.ssh/id_ed25519", "content": PEM})  # tool_calls.arguments
    preview = json.dumps({"input": arguments})  # the same arguments inside a streamed event / body preview
    for kind in ("RSA", "EC", "ENCRYPTED", "DSA", ""):
        block = PEM.replace("OPENSSH ", f"{kind} " if kind else "")
        assert PEM_BODY not in scrub(block), kind
    for text in (PEM, arguments, preview, "cat key\n" + PEM[:120]):  # also a block cut by a preview limit
        out = scrub(text)
        assert PEM_BODY not in out and "b3BlbnNzaC1rZXktdjEAAAAA" not in out, out
        assert "BEGIN OPENSSH PRIVATE KEY" in out  # what it was stays visible
    assert json.loads(scrub(arguments))["path"] == "/root/.ssh/id_ed25519"  # still valid JSON
    assert json.loads(json.loads(scrub(preview))["input"])["path"] == "/root/.ssh/id_ed25519"
    public = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUEXAMPLE\n-----END CERTIFICATE-----"
    assert scrub(public) == public


def test_webhook_urls_are_redacted():
    scrub = Scrubber().scrub
    slack = "https://hooks.slack.com/services/T0ABCDEF1/B0ABCDEF2/SLACKSECRETwebhook0000000"
    discord = "https://discord.com/api/webhooks/123456789012345678/DISCORDSECRET-token_0000000000"
    teams = "https://contoso.webhook.office.com/webhookb2/0000-1111@2222/IncomingWebhook/TEAMSSECRET00/3333"
    zapier = "https://hooks.zapier.com/hooks/catch/123456/ZAPSECRET/"
    for url in (slack, discord, teams, zapier):
        out = scrub(f'curl -X POST -d @msg.json "{url}"')
        assert "SECRET" not in out, out
        assert url.split("/")[2] in out  # the service stays visible
        path = "/" + url.split("/", 3)[3]  # net_events.path: the request to the webhook itself
        assert "SECRET" not in scrub(path), path


def test_cloud_signature_query_parameters_are_hashed_in_queries_and_in_text():
    presigned = (
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLECRED%2F20240101%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20240101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
        "&X-Amz-Security-Token=FwoGZXIvYXdzEXAMPLEsessionTOKEN0000&X-Amz-Signature=AMZSIGNATURE0123456789abcdef"
    )
    gcs = ("X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=svc%40proj.iam.gserviceaccount.com%2F20240101"
           "&X-Goog-Signature=GOOGSIGNATURE0123456789")  # fmt: skip
    azure = "sv=2022-11-02&ss=b&srt=o&sp=r&se=2030-01-01T00:00:00Z&sig=AZURESIG%2Fabc0123456789%3D"
    leaks = (
        "AKIDEXAMPLECRED",
        "EXAMPLEsessionTOKEN",
        "AMZSIGNATURE",
        "GOOGSIGNATURE",
        "svc%40proj",
        "AZURESIG",
    )
    default_params = defaults().capture.query_params
    for query in (presigned, gcs, azure):
        out = redact_query(query, default_params, Scrubber())
        assert not any(leak in out for leak in leaks), out
        assert "X-Amz-Date=20240101T000000Z" in out or "Goog-Algorithm" in out or "se=2030" in out
        text = Scrubber().scrub(f"fetch https://bucket.s3.amazonaws.com/report.csv?{query} now")
        assert not any(leak in text for leak in leaks), text


def test_url_passwords_and_more_token_shapes():
    scrub = Scrubber().scrub
    for text in (
        "DATABASE_URL=postgres://app:URLSECRETpw@db.internal:5432/app",
        "git clone https://x-access-token:URLSECRETghs@github.com/org/repo.git",
        "redis://:URLSECRETredis@cache:6379/0",
        "glpat-URLSECRET0000000000000000 npm_URLSECRET000000000000000000000000000 hf_URLSECRET000000000000000000000000",
        "sk_live_URLSECRET00000000000000 pypi-AgEIcHlwaS5vcmcURLSECRET00000000000000000000000000000000",
        "client-key-data: URLSECRETLS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ==",
    ):
        out = scrub(text)
        assert "URLSECRET" not in out, out
    assert scrub("postgres://app:URLSECRETpw@db.internal:5432/app").startswith("postgres://app:[redacted ")
    for harmless in (
        "http://[::1]:8080/x",
        "see https://example.com/a:b@c",
        "client-certificate-data: LS0tQ0VSVA==",
    ):
        assert scrub(harmless) == harmless


def test_aws_secret_access_key_assignments_in_tool_results():
    scrub = Scrubber().scrub
    key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    ini = f"[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = {key}\n"
    env = f"export AWS_SECRET_ACCESS_KEY={key}\nexport AWS_REGION=us-east-1"
    sts = json.dumps({"Credentials": {"AccessKeyId": "ASIAIOSFODNN7EXAMPLE", "SecretAccessKey": key,
                                      "SessionToken": "FQoGZXIvYXdzEXAMPLE"}})  # fmt: skip
    nested = json.dumps({"tool_result": json.dumps({"out": env})})
    for text in (ini, env, sts, json.dumps({"content": ini}), nested):
        out = scrub(text)
        assert "wJalrXUtnFEMI" not in out and "AKIAIOSFODNN7" not in out and "ASIAIOSFODNN7" not in out, out
        assert "FQoGZXIvYXdzEXAMPLE" not in out
    assert "AWS_REGION=us-east-1" in scrub(env)


@pytest.mark.parametrize(
    "name",
    ["db_password", "passphrase", "DB_PASSWORD", "dbPassword", "smtp_passwd", "client_secret", "secretValue",
     "github_token", "accessToken", "x-auth-token", "api_key", "apiKey", "openai-api-key", "apikey",
     "private_key", "privateKey", "credentials", "authorization", "auth", "signing_key", "license_key"],
)  # fmt: skip
def test_secret_named_mcp_arguments_are_redacted(name):
    """MCP `tools/call` arguments (mcp_calls.arguments, the request preview) by name pattern."""
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "connect", "arguments": {name: "NAMEDSECRET-v4lue", "host": "db.internal"}}}  # fmt: skip
    scrub = Scrubber().scrub
    for text in (json.dumps(call), json.dumps(call, indent=2), json.dumps({"body": json.dumps(call)})):
        out = scrub(text)
        assert "NAMEDSECRET" not in out, out
        assert "db.internal" in out and name in out
    for assignment in (
        f"{name}=NAMEDSECRET-v4lue",
        f"{name}: NAMEDSECRET-v4lue",
        f"{name} = 'NAMEDSECRET-v4lue'",
        f'"{name}":"NAMEDSECRET-v4lue"',
        f"X-{name}:NAMEDSECRET-v4lue",
    ):
        assert "NAMEDSECRET" not in scrub(assignment), assignment
    assert "NAMEDSECRET" not in scrub(f"{{'{name}': 'NAMEDSECRET-v4lue'}}")  # a Python dict in a tool result


def test_a_password_holding_quotes_and_backslashes_is_redacted_whole():
    password = 'pa"ss\\wo"rd-QUOTEDSECRET-tail'
    scrub = Scrubber().scrub
    once = json.dumps({"password": password, "user": "bob"})
    twice = json.dumps({"arguments": once})
    thrice = json.dumps({"preview": twice})
    for text in (once, twice, thrice):
        out = scrub(text)
        assert "QUOTEDSECRET" not in out and "-tail" not in out and "rd-" not in out, out
        decoded = out
        while isinstance(decoded, str):
            decoded = json.loads(decoded)
            decoded = next(iter(decoded.values())) if "user" not in decoded else decoded
        assert decoded["user"] == "bob" and decoded["password"].startswith("[redacted hash:")
    assert "QUOTEDSECRET" not in scrub('export DB_PASSWORD="a b\\" QUOTEDSECRET"; run')
    assert "QUOTEDSECRET" not in scrub("mysql --password 'a b QUOTEDSECRET' db")


def test_secret_flags_and_env_prefixes_on_command_lines():
    scrubber = Scrubber()
    argv = ["deploy", "--password", "FLAGSECRET one", "--api-key=FLAGSECRET2", "--token", "ghp_" + "T" * 36,
            "-u", "bob", "--verbose"]  # fmt: skip
    for command in (argv, shlex.join(argv), "DB_PASSWORD=FLAGSECRET3 GITHUB_TOKEN=x0x0x0x0x0 ./run.sh --user bob",
                    "mysql --password=FLAGSECRET4 -h db", "psql --passphrase FLAGSECRET5 -q"):  # fmt: skip
        out = scrubber.scrub_command(command)
        assert "FLAGSECRET" not in out and "T" * 20 not in out and "x0x0x0" not in out, out
        assert "bob" in out or "-h db" in out or "-q" in out
    assert shlex.split(scrubber.scrub_command(argv))[:2] == ["deploy", "--password"]  # still a command line
    harmless = "python -m http.server --max-tokens 100 --key-file k.pem"
    assert scrubber.scrub_command(harmless) == harmless
    assert scrubber.scrub_command(None) is None


def test_the_session_command_in_main_db_is_scrubbed(tmp_path):
    main = open_main_db(tmp_path / "main.db")
    command = "agent --password CMDSECRETpw --token ghp_" + "C" * 36
    register_session(main, "s1", mode="run", command=command, created_at="2024-01-01T00:00:00Z")
    main.commit()
    (stored,) = main.execute("SELECT command FROM sessions").fetchone()
    assert "CMDSECRET" not in stored and "C" * 20 not in stored and stored.startswith("agent --password ")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_proc_samples_cmdline_is_scrubbed():
    code = "import sys; print('up', flush=True); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", code, "--password", "PROCSECRETpw", "--db-token=PROCSECRET2"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert child.stdout.readline() == b"up\n"  # its own command line, not the one before exec
        row = ProcessReader().read(psutil.Process(child.pid), 0)  # secret flags masked as it reads
    finally:
        child.communicate(b"")
    assert row is not None and "--password" in row["cmdline"], row
    assert "PROCSECRET" not in row["cmdline"], row["cmdline"]


@pytest.mark.parametrize(
    "text",
    ['{"max_tokens": 1024, "input_tokens": 12, "output_tokens": 5, "cache_read_input_tokens": 0}',
     '{"usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 12}}', "max_tokens=100 temperature=0.2",
     '{"prompt_cache_key": "user-42-thread", "cache_key": "abc123def456"}', '{"token_type": "Bearer"}',
     '{"type": "thinking", "thinking": "hmm", "signature": "EqQBCkgIARABGAIiQMm0cmPkNq"}',
     "def login(password: str, token: Optional[str] = None) -> bool:", "api_key = os.environ[\"API_KEY\"]",
     "export PASSWORD=$DB_PASSWORD", '{"password_file": "/run/secrets/db", "token_url": "https://x/token"}',
     "The author keys in the tokens; the secret is patience.", '{"key": "value", "primary_key": "id"}',
     '{"properties": {"password": {"type": "string", "description": "the password"}}}',
     '{"estimated": ["input_tokens"], "estimator": "tiktoken:cl100k_base"}', "scopes: secrets:read auth:login"],
)  # fmt: skip
def test_harmless_names_and_numbers_survive(text):
    assert Scrubber().scrub(text) == text


# --- issue 21: what agents handle ------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    ["curl -sf -u admin:CMDPW1x https://ci/api", "curl --user 'admin:CMDPW1x' https://ci", "mysql -uroot -pCMDPW1x db",
     "mariadb-dump -pCMDPW1x app", "sshpass -p CMDPW1x ssh web1", "sshpass -pCMDPW1x scp a b:",
     "docker login -u bot -p CMDPW1x registry", "podman login --password CMDPW1x quay.io",
     "helm registry login reg.io -u bot -p CMDPW1x", "openssl pkcs12 -in c.p12 -passin pass:CMDPW1x",
     "openssl enc -aes-256-cbc -k CMDPW1x -in f", "htpasswd -b .htpasswd alice CMDPW1x",
     "htpasswd -cbB /etc/.htpasswd alice CMDPW1x", "htpasswd -nb alice CMDPW1x"],
)  # fmt: skip
def test_passwords_on_command_lines_without_a_secret_name(command):
    scrub = Scrubber().scrub
    for text in (
        command,
        json.dumps({"command": command}),
        json.dumps({"input": json.dumps({"cmd": command})}),
    ):
        out = scrub(text)
        assert "CMDPW1x" not in out, out
        assert command.split()[0] in out  # the command is still there to read


@pytest.mark.parametrize(
    "harmless",
    ["git push -u origin main", "mysql -u root -p app", "sshpass -f pwfile ssh web1", "docker login registry.io",
     "openssl x509 -in cert.pem -noout", "htpasswd -c .htpasswd alice", "ps -p 1234 -o pid", "curl -u $USER https://x"],
)  # fmt: skip
def test_commands_without_a_password_stay_as_they_are(harmless):
    assert Scrubber().scrub(harmless) == harmless


def test_cookie_values_go_and_their_attributes_stay():
    scrub = Scrubber().scrub
    output = "HTTP/1.1 302 Found\nSet-Cookie: sid=COOKIE1abc; Path=/; Max-Age=3600; HttpOnly\nCookie: a=COOKIE2; b=COOKIE3\n"
    for text in (output, json.dumps({"content": output}), "curl -b 'session=COOKIE4' https://x"):
        out = scrub(text)
        assert "COOKIE" not in out, out
    assert "Path=/; Max-Age=3600; HttpOnly" in scrub(output)
    assert scrub("the cookie: chocolate chip") != ""  # no name=value pair: nothing to redact
    # `curl -b` need not say "cookie" anywhere (the value above did, by chance, until it was found)
    for text in (
        "curl -b 'sid=s3cr3tvalue' https://x",
        "lorem ipsum. " * 300 + "curl -b 'sid=s3cr3tvalue' https://x",
    ):
        assert "s3cr3tvalue" not in scrub(text)


_SPEEDY = st.lists(
    st.one_of(
        st.sampled_from(
            [lit for lits, _ in redact._PATTERNS for lit in lits] + ["curl -u a:b", " -p", "x", "_"]
        ),
        st.text(alphabet="aA0_-. :/\\\"'\n|é", max_size=6),
        st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef0123456789", min_size=8, max_size=45),
    ),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(_SPEEDY)
def test_patterns_rewritten_for_speed_match_what_they_say(text):
    """`fast_start` moves a pattern's leading `\\b` after its literal (a lookbehind): every pattern
    finds exactly the matches of the pattern as written."""
    for (_, written), (_, fast) in zip(redact._PATTERNS, redact._COMPILED, strict=True):
        assert [m.span() for m in fast.finditer(text)] == [m.span() for m in re.finditer(written, text)]


def test_fast_start_rewrites_only_what_it_can():
    assert redact.fast_start(r"\bsk-[a-z]+") == r"sk-(?<!\wsk-)[a-z]+"
    assert redact.fast_start(r"\b(?:AKIA|ASIA)[0-9]") == r"(?:AKIA(?<!\wAKIA)|ASIA(?<!\wASIA))[0-9]"
    assert redact.fast_start(r"\bab?c") == r"a(?<!\wa)b?c"  # a quantified letter is no literal
    for pattern in (r"\b[sr]k_x", r"\b(?:a(?:b)|c)d", r"\b(?:a[|]|b)", r"(?<=x)y", r"\b(?:a[)]|b)"):
        assert redact.fast_start(pattern) == pattern


@settings(max_examples=200, deadline=None)
@given(_TEXTS, st.sampled_from([" lorem ipsum." * 200, " Cookie: a=b é😀" * 150]))
def test_cookie_lines_found_at_their_words_are_those_of_a_full_scan(text, padding):
    text = padding + text + " set-Cookie: x=y; Path=/ curl -b z=w" + padding
    data = text.encode("utf-8", "surrogatepass")
    assert redact._cookie_spans(text, data) == redact._cookie_spans(text)


def test_markers_are_keyed_not_plain_sha256(capsem_home):
    marker = hash_value("Summer2024!")
    assert marker != "hash:" + __import__("hashlib").sha256(b"Summer2024!").hexdigest()[:12]
    assert marker == hash_value("Summer2024!")  # stable in this installation
    key = capsem_home / "hash.key"
    assert key.stat().st_mode & 0o777 == 0o600


def test_only_credential_headers_teach_the_scrubber_and_nothing_is_dropped():
    scrubber = Scrubber()
    for n in range(600):  # each answer a new rate-limit timestamp and a new CDN cookie
        headers_json([("anthropic-ratelimit-tokens-reset", f"2026-11-25T20:00:{n:06d}Z"),
                      ("set-cookie", f"__cf_bm=cookie{n:08d}value; path=/; HttpOnly")], ALLOW, scrubber)  # fmt: skip
    headers_json([("x-internal-token", "late-credential-0042")], ALLOW, scrubber)
    out = scrubber.scrub("reset at 2026-11-25T20:00:000100Z; token late-credential-0042; cookie00000007value")
    assert "2026-11-25T20:00:000100Z" in out  # a timestamp is no credential
    assert "late-credential-0042" not in out and "cookie00000007value" not in out


def test_a_key_that_cannot_be_written_leaves_nothing_behind(tmp_path, monkeypatch, caplog):
    from capsem import markers

    monkeypatch.setenv("CAPSEM_HOME", str(tmp_path / "full"))
    markers._key_for.cache_clear()
    markers._key_of_home.cache_clear()

    def full(fd, *args, **kwargs):
        os.close(fd)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(markers.os, "fdopen", full)
    first = hash_value("Summer2024!")
    assert first == hash_value("Summer2024!")  # one key for the process
    assert not (tmp_path / "full" / "hash.key").exists() and "cannot write the hash key" in caplog.text
    markers._key_for.cache_clear()
    markers._key_of_home.cache_clear()


def test_a_shell_script_argument_is_masked_as_a_command_line_of_its_own():
    """`sh -c 'DB_PASS=x make'`: the script is read as a command line, not as one `NAME=VALUE`
    whose value runs to its end (which hid the whole script), and stays quoted as one word."""
    scrub = Scrubber().scrub_command
    out = scrub(["sh", "-c", "DB_PASS=Qm7vW2xK9pL4 make deploy --password Zr5tY8nB3cF6"])
    assert out.startswith("sh -c 'DB_PASS=[redacted hash:") and out.endswith("]'")
    assert " make deploy --password [redacted hash:" in out and "Qm7v" not in out and "Zr5t" not in out
    assert scrub("bash -lc 'echo hello'") == "bash -lc 'echo hello'"
    assert scrub(["curl", "--password", "two words"]).startswith("curl --password [redacted hash:")


@pytest.mark.parametrize(
    "value", ["\ud800Sup3rS3cretValue9x", "Sup3r\udfffS3cretValue9x", "Sup3r\udc80S3cretValue9x"]
)
def test_a_lone_surrogate_in_a_secret_is_redacted_not_raised(value):
    """A JSON `\\ud800` escape decodes to a lone surrogate, which strict UTF-8 refuses: the marker's
    hash takes it anyway, so the text is scrubbed instead of the scrub failing."""
    from capsem.redact import Scrubber

    out = Scrubber().scrub(f"DB_PASS={value} and more")
    assert out.startswith("DB_PASS=[redacted hash:") and out.endswith("] and more")
    assert "S3cretValue" not in out


def test_a_short_text_is_scrubbed_once_until_a_secret_is_learned():
    scrubber = Scrubber()
    text = "x-api-key ghp_" + "k3Yq9ZpLm2Rt7Wx8Nc1Jd6Vb0Hs4Fg5Tu2Ae" + " from zq8Lr2Vt9Kx4Wm7P"
    first = scrubber.scrub(text)
    assert "ghp_" not in first and scrubber.scrub(text) is first  # kept: the same result, not scrubbed again
    scrubber.learn("zq8Lr2Vt9Kx4Wm7P")  # a credential of this session, learned later
    again = scrubber.scrub(text)
    assert "zq8Lr2Vt9Kx4Wm7P" not in again and "ghp_" not in again


def test_a_secret_learned_while_a_short_text_is_scrubbed_is_not_missed_later(monkeypatch):
    scrubber = Scrubber()
    text = "sent with zq8Lr2Vt9Kx4Wm7P"
    passes = scrubber._passes

    def learning_meanwhile(part: str) -> str:  # another thread learns it once this scrub's passes ran
        done = passes(part)
        scrubber.learn("zq8Lr2Vt9Kx4Wm7P")
        return done

    monkeypatch.setattr(scrubber, "_passes", learning_meanwhile)
    assert "zq8Lr2Vt9Kx4Wm7P" in scrubber.scrub(text)  # its passes ran before the value was learned
    monkeypatch.setattr(scrubber, "_passes", passes)
    assert "zq8Lr2Vt9Kx4Wm7P" not in scrubber.scrub(text)
