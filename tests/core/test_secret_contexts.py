"""Secrets found by their context (issue 34), table by table: each secret in each syntax, written
as the issue's end-to-end tests write it and as they do not (quotes, spacing, case), plain, in a
JSON string and in a JSON string inside a JSON string; what only looks like a credential stays.

`leaks` looks for any 6 characters of a secret in what is stored (in its raw and its decoded
form), so a secret cut in two by an escape, a `(` or a `;` counts as kept."""

from __future__ import annotations

import json
import random
import string

import pytest

from capsem.escapes import decoded_view
from capsem.random_tokens import looks_random
from capsem.redact import Scrubber
from capsem.rollup import register_session
from capsem.secret_names import is_secret_name
from capsem.store.rows import FsEvent, new_event_id
from capsem.store.schema import open_main_db
from capsem.store.writer import SessionWriter
from tests.conftest import rows

RNG = random.Random(34)
ALNUM = string.ascii_letters + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def leaks(out: str, secret: str) -> list[str]:
    """The 6-character pieces of `secret` still in `out` (or in what `out` decodes to)."""
    view = decoded_view(out)
    texts = (out, view.text if view else out)
    return [secret[i : i + 6] for i in range(len(secret) - 5) if any(secret[i : i + 6] in t for t in texts)]


def forms(text: str) -> list[str]:
    """`text` as a tool result stores it: plain, in a JSON string, and in one inside another."""
    once = json.dumps({"type": "tool_result", "content": text})
    return [text, once, json.dumps({"input": once})]


def assert_scrubbed(text: str, secret: str) -> None:
    scrub = Scrubber().scrub
    for form in forms(text):
        out = scrub(form)
        assert not leaks(out, secret), (form, out)


# --- 1. escapes ---------------------------------------------------------------------------------

BOT = rand(10, string.digits) + ":AA" + rand(33, ALNUM + "_-")
KEY = "sk-ant-api03-" + rand(40)


@pytest.mark.parametrize(
    ("raw", "secret"),
    [
        (json.dumps({"content": f'TELEGRAM_BOT = "{BOT}"'}), BOT),  # a bare bot token before `\"`
        (json.dumps({"content": f"TELEGRAM_BOT = '{BOT}'\nnext"}), BOT),
        (json.dumps({"content": json.dumps({"cfg": f'bot = "{BOT}"'})}), BOT),  # `\\\"`, two deep
        ('{"content": "key: \\u0073' + KEY[1:] + '"}', KEY),  # the first character as `\u0073`
        ('{"content": "' + KEY[:20] + "\\u00" + format(ord(KEY[20]), "x") + KEY[21:] + '"}', KEY),
        ('{"content": "' + KEY[:-1] + "\\u00" + format(ord(KEY[-1]), "x") + '"}', KEY),
        ('{"content": "x\\nAKIA' + "IOSFODNN7" + 'ABCDEFG y"}', "AKIAIOSFODNN7ABCDEFG"),  # glued to `\n`
        ('{"content": "x\\tghp_' + "K" * 2 + rand(34) + '"}', None),
        ('{"c": "PASSWORD=Pw9sl\\/ashIsPartOfIt tail"}', "Pw9sl/ashIsPartOfIt"),
        ('{"c": "PASSWORD=Pw9um\\u00e4lautPartOfIt tail"}', "Pw9umälautPartOfIt"),
        ('{"c": "PASSWORD=Pw9em\\ud83d\\ude00jiPartOfIt tail"}', "Pw9em😀jiPartOfIt"),
        ('{"c": "api_key=\\"Pw9qu\\\\\\"oteInside\\"\\n"}', 'Pw9qu\\"oteInside'),
        ("token=sk%2Dant%2Dapi03%2D" + KEY[13:] + "&page=2", KEY[13:]),  # URL-encoded
        ("curl -d 'x=1&client_secret=Pw9perc%2Dent%2Dencoded'", "Pw9perc-ent-encoded"),
        ("grant_type=password&password=Pw9+with+plus&user=bob", "Pw9+with+plus"),  # a form's `+`
    ],
)
def test_no_escape_keeps_any_part_of_a_secret(raw, secret):
    out = Scrubber().scrub(raw)
    if secret is None:  # the whole shape, as generated
        secret = raw.split("\\t")[1].split('"')[0]
    assert not leaks(out, secret), out
    assert "[redacted hash:" in out
    if raw.startswith("{"):
        json.loads(out)  # still the JSON it was


def test_a_redaction_over_escapes_keeps_the_marker_of_what_they_mean():
    """The marker is the hash of the decoded secret: the same secret in a decoded item and in the
    raw body it came from get the same marker."""
    scrub = Scrubber().scrub
    raw = scrub('{"c": "PASSWORD=Pw9sl\\/ash tail"}')
    decoded = scrub("PASSWORD=Pw9sl/ash tail")
    assert json.loads(raw)["c"] == decoded


# --- 2. credential syntaxes ---------------------------------------------------------------------

PW = "Pw9" + rand(13)
SYNTAXES = [
    # assignments of names that mean a secret, in every common syntax
    f"DB_PASS={PW}",
    f"db_pass = '{PW}'",
    f'export DB_PASS="{PW}"',
    f"MYSQL_PWD={PW}",
    f"SSHPASS={PW} sshpass -e ssh h",
    f"set DB_PASS={PW}",
    f"setx DB_PASS {PW}",
    f'setx DB_PASS "{PW}" /M',
    f'$env:DB_PASS="{PW}"',
    f"$Env:Db_Pass = '{PW}'",
    f"set -gx DB_PASS {PW}",
    f"ENV DB_PASSWORD {PW}",
    f"RABBITMQ_DEFAULT_PASS: {PW}",
    f"rediscli_auth: {PW}",
    f'<add name="x" connectionString="Server=h;Password={PW};" />',
    f'"dbPwd": "{PW}"',
    f"<user password='{PW}'/>",
    # netrc, one line and several
    f"machine api.heroku.com login me@x.io password {PW}",
    f"machine h\n  login u\n  password {PW}\n",
    f"default login anonymous password {PW}",
    # XML elements (Maven's settings.xml)
    f"<server><id>x</id><username>u</username><password>{PW}</password></server>",
    f"<Password>{PW}</Password>",
    f'<password encrypted="false">{PW}</password>',
    # connection strings: ADO.NET, ODBC (a braced value), JDBC-style
    f"Server=db;Database=app;User Id=sa;Password={PW};",
    f"Driver={{ODBC Driver 18}};Server=db;Uid=sa;Pwd={PW};",
    f"Driver={{ODBC}};Server=db;Uid=sa;Pwd={{{PW}}};",
    f"Data Source=db;Initial Catalog=app;pwd = {PW}",
    # .pgpass lines
    f"localhost:5432:app:postgres:{PW}",
    f"*:*:*:replicator:{PW}\ndb.internal:6432:*:app:{PW}",
    # name/value pairs (Kubernetes, ECS, .NET appSettings, CloudFormation)
    f"env:\n  - name: DB_PASSWORD\n    value: {PW}\n",
    f'{{"name": "DB_PASSWORD", "value": "{PW}"}}',
    f'<add key="DbPassword" value="{PW}" />',
    f"ParameterKey=DbPassword,ParameterValue={PW}",
    # aws configure set
    f"aws configure set aws_secret_access_key {PW}",
    f"aws configure set aws_session_token {PW} --profile ci",
    # password flags of command-line tools
    f"redis-cli -h cache -a {PW} ping",
    f"redis-cli --pass {PW}",
    f"sqlcmd -S db -U sa -P {PW} -Q 'select 1'",
    f"sqlcmd -S db -U sa -P{PW}",
    f"bcp t out f -S db -U sa -P {PW}",
    f"az login -u me@x.io -p {PW}",
    f"az login --service-principal -u app -p={PW} --tenant t",
    f"mongosh -u admin -p {PW} --authenticationDatabase admin",
    f"mongodump --uri x -u a -p {PW}",
    f"keytool -list -keystore k.jks -storepass {PW}",
    f"keytool -genkey -keypass {PW} -alias a",
    f"jarsigner -storepass {PW} app.jar a",
    f"mysql -uroot -p{PW} app",
    f"mysql --password={PW} app",
    f"sshpass -p {PW} ssh h",
    f"psql postgresql://app:{PW}@db/app",
    f"curl -u admin:{PW} https://ci",
    f"ldapsearch -x -D cn=admin -w {PW} -b dc=x",
    f"cqlsh -u cassandra -p {PW}",
    f"zip -P {PW} out.zip f",
    f"7z a -p{PW} out.7z f",
    f"smbclient //fs/share -U bob%{PW}",
    f"sqlplus scott/{PW}@orcl",
    f"xfreerdp /v:h /u:bob /p:{PW}",
    f"lftp -u bob,{PW} ftp.x",
    f"ssh-keygen -t ed25519 -N {PW} -f k",
    f"twine upload -u __token__ -p {PW} dist/*",
    f"gh secret set DEPLOY --body {PW}",
    f"rabbitmqctl add_user bob {PW}",
    f"mc alias set s3 https://s3 AKID {PW}",
    f"$p = ConvertTo-SecureString '{PW}' -AsPlainText -Force",
    f"nmcli dev wifi connect Home password {PW}",
]


@pytest.mark.parametrize("text", SYNTAXES)
def test_credential_syntaxes(text):
    assert_scrubbed(text, PW)


AWS_SECRET = rand(30, ALNUM) + "/" + rand(9, ALNUM)


@pytest.mark.parametrize(
    "csv",
    [
        f"Access key ID,Secret access key\nAKIAIOSFODNN7ABCDEFG,{AWS_SECRET}\n",
        f"User name,Password,Access key ID,Secret access key,Console login link\n"
        f"ci,{PW},AKIAIOSFODNN7ABCDEFG,{AWS_SECRET},https://x.signin.aws.amazon.com/console\n",
        f"access key id, secret access key\r\nAKIAIOSFODNN7ABCDEFG, {AWS_SECRET}",
    ],
)
def test_the_secret_columns_of_a_csv_file(csv):
    for form in forms(csv):
        out = Scrubber().scrub(form)
        assert not leaks(out, AWS_SECRET) and not leaks(out, PW), out
        assert "Secret access key" in out or "secret access key" in out


# --- 3. a value's true extent -------------------------------------------------------------------


@pytest.mark.parametrize(
    "secret",
    ["Kx9(mQ2[zr7Lp", "Kx9,mQ2;zr7Lp", "Kx9&mQ2<zr7Lp", "Kx9(m)Q2[z]r7Lp", "Kx9{mQ2}zr7#p", "Kx9%mQ2!zr7@p"],
)
@pytest.mark.parametrize(
    "template",
    [
        "DB_PASSWORD={}",
        "db_password: {}",
        "export DB_PASSWORD={} && run",
        "--password={} -v",
        "-storepass {}",
    ],
)
def test_a_value_is_redacted_to_where_its_syntax_ends_it(template, secret):
    text = template.format(secret)
    assert_scrubbed(text, secret)
    out = Scrubber().scrub(text)
    assert out.endswith(("&& run", "-v")) or not template.endswith(("run", "-v")), out


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Server=db;Pwd=Kx9mQ2zr;Database=app", ";Database=app"),  # `;` ends it in a connection string
        ("https://x/cb?token=Kx9mQ2zr&page=2#top", "&page=2#top"),  # `&` in a query
        ("mount -o uid=0,password=Kx9mQ2zr,gid=0", ",gid=0"),
        ("<td>password=Kx9mQ2zr</td>", "</td>"),
        ("connect(password=Kx9mQ2zr, user=u)", ", user=u)"),
        ("(DB_PASSWORD=Kx9mQ2zr)", ")"),
    ],
)
def test_the_syntax_around_a_value_stays(text, kept):
    out = Scrubber().scrub(text)
    assert "Kx9mQ2zr" not in out and out.endswith(kept), out


# --- 4. shapes no list had ----------------------------------------------------------------------

SHAPES = {
    "supabase_pat": "sbp_" + rand(40, "0123456789abcdef"),
    "supabase_secret": "sb_secret_" + rand(22) + "_" + rand(8),
    "aws_session": "FwoGZXIvYXdzE" + rand(200, ALNUM + "+/") + "==",
    "aws_session_v2": "IQoJb3JpZ2luX2Vj" + rand(300, ALNUM + "+/"),
    "cloudflare_user": "cfut_" + rand(40) + rand(8, "0123456789abcdef"),
    "cloudflare_account": "cfat_" + rand(40) + rand(8, "0123456789abcdef"),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_new_key_shapes_bare_in_text_and_paths(name):
    key = SHAPES[name]
    for text in (
        f"which works? {key}",
        f"/v1/hooks/{key}/run",
        f"deploy/{key}.txt",
    ):  # text, a request path, a file
        assert_scrubbed(text, key)


@pytest.mark.parametrize(
    "text",
    [
        "the deploy token is {t}",
        "Bearer {t}",
        "my API key: {t}",
        "use key `{t}` for staging",
        'cloudflare = {{"token": "{t}"}}',
        "Token={t}",
        "secret -> {t}",
        "auth {t}",
    ],
)
def test_a_random_token_where_a_credential_is_expected(text):
    legacy_cloudflare = next(t for t in (rand(40, ALNUM + "_-") for _ in range(100)) if looks_random(t))
    assert_scrubbed(text.format(t=legacy_cloudflare), legacy_cloudflare)


def test_fs_events_paths_are_scrubbed(tmp_path):
    key = SHAPES["supabase_pat"]
    writer = SessionWriter(tmp_path / "s.db", Scrubber())
    writer.add([FsEvent(new_event_id(), "2026-01-01T00:00:00Z", "created", f"/work/keys/{key}.txt", 1)])
    writer.commit()
    writer.close()
    (row,) = rows(tmp_path / "s.db", "SELECT path FROM fs_events")
    assert key not in row["path"] and row["path"].startswith("/work/keys/[redacted hash:")


# --- what is not a credential stays -------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "PUBLIC_KEY=ssh-ed25519-AAAAC3Nza",
        "KEY_ID=k-2024-01",
        "TOKEN_URL=https://auth.x.io/token",
        "passenger=alice",
        "passenger_count=3",
        "bypass=true",
        "BYPASS_CACHE=1",
        "compass=north",
        "author=bob",
        "author: Jane Doe",
        "PWD=/home/me/project",
        "OLDPWD=/tmp",
        "GIT_ASKPASS=/usr/lib/git-core/git-gui--askpass",
        "sb_publishable_" + "x1Y2z3" * 4,
        "the request token 08ceef7e-e86b-4b41-84c8-ea3241f610de expired",
        "password=get_password()",
        'token = os.environ["TOKEN"]',
        "def check(password: str, token: Optional[str]):",
        "key: AmazonS3ReadOnlyAccessPolicy2024",
        "the key is in the vault",
        "Passed: 12, bypassed: 0",
        "DB_PASSWORD=$DB_PASSWORD",
        "password=${DB_PASSWORD}",
        "set PASSWORD=%DB_PASSWORD%",
        "sqlcmd -S db -E -Q 'select 1'",
        "mongosh -u admin -p --authenticationDatabase admin",
        "redis-cli -h cache ping",
        "unzip out.zip",
        "ssh-keygen -t ed25519 -N '' -f k",
        "login alice (last seen 2024)",
        "12:30:45:10:20",
        "a,b,c\n1,2,3",
    ],
)
def test_what_only_looks_like_a_credential_stays(text):
    scrub = Scrubber().scrub
    for form in forms(text):
        assert scrub(form) == form


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("DB_PASS", True),
        ("SSHPASS", True),
        ("MYSQL_PWD", True),
        ("pwd", True),
        ("dbPwd", True),
        ("-storepass", True),
        ("keypass", True),
        ("REDISCLI_AUTH", True),
        ("proxy_auth", True),
        ("passwd", True),
        ("Secret access key", True),
        ("PASSENGER", False),
        ("bypass", False),
        ("compass", False),
        ("author", False),
        ("OLDPWD", False),
        ("GIT_ASKPASS", False),
        ("PUBLIC_KEY", False),
        ("KEY_ID", False),
        ("TOKEN_URL", False),
        ("pass_through", False),
        ("password_file", False),
    ],
)
def test_names_by_meaning(name, secret):
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    "command",
    [
        ["redis-cli", "-a", PW, "ping"], f"sqlcmd -S db -U sa -P {PW}", ["keytool", "-list", "-storepass", PW],
        f"DB_PASS={PW} SSHPASS={PW} ./deploy.sh", ["az", "login", "-u", "me", "-p", PW], f"mongosh -u a -p '{PW}'",
    ],
)  # fmt: skip
def test_command_lines_as_stored(command, tmp_path):
    """Process command lines and main.db's `sessions.command` go through `scrub_command`."""
    out = Scrubber().scrub_command(command)
    assert PW not in out and "[redacted hash:" in out, out
    main = open_main_db(tmp_path / "main.db")
    text = command if isinstance(command, str) else " ".join(command)
    register_session(main, "s1", mode="run", command=text, created_at="2026-01-01T00:00:00Z")
    main.commit()
    (stored,) = main.execute("SELECT command FROM sessions").fetchone()
    assert PW not in stored, stored
