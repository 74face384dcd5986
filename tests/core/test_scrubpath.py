"""The compiled scrubber path (capsem/native/scrubpath.c) scrubs exactly what the Python one does.

`named_next` skips, in C, the name words that `scrub_named_values` would only move past; each test
scrubs the same text with it and with it turned off (the reference) and compares the scrubbed
text: generated texts long enough for the compiled path (it runs above `SHORT_TEXT`) that hold
secrets in every syntax the scrubber knows, next to every delimiter, among prose, CSV, unicode
and junk; the benchmark corpora; and the secret-context cases of the other tests, padded long.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capsem import native, secret_names
from capsem.literal_scan import DENSE, SHORT_TEXT
from capsem.redact import _COOKIE_PLACES, Scrubber, default_rules
from capsem.secret_names import scrub_named_values

pytestmark = pytest.mark.skipif(native.named_next is None, reason=f"fast path: {native.status()}")

SECRET = "hunter2Xq9"
TOKEN = "8Kq3vZp0Lm2Rt7Wx9Yb4Nc1Jd6"
NAMES = ["DB_PASS", "password", "passwd", "api_key", "apiKey", "secretAccessKey", "token", "auth_token",
         "AUTH", "key", "keys", "tokens", "credentials", "x-api-key", "X-Amz-Signature", "MYSQL_PWD", "sshpass",
         "max_tokens", "cache_key", "password_file", "bypass", "author", "token_count", "PUBLIC_KEY",
         "Token", "TOKEN", "passphrase", "client_secret", "self._key", "flow_key", "-storepass", "--password",
         "--token", "-p", "signature", "KEY_ID", "pwd", "OLDPWD", "secret"]  # fmt: skip
SEPARATORS = ["=", ": ", ":", " = ", " ", "\t", ":=", "==", " is ", " was ", " -> ", "\t\t", "  ", " => ", "=>",
              " IS ", " wAs ", " is", "('", '\\"', "`", " iſ ", " İs ", '" = "', "\\\\'", ")", ", ", "x",
              "\n    value: ", ",ParameterValue="]  # fmt: skip
VALUES = [SECRET, TOKEN, f'"{SECRET}"', f"'{SECRET}'", f'\\"{SECRET}\\"', "branch", "is", "was", "Is",
          "the", "abcdefghijklmnopqrstuvwxyz", "$VAR", "${DB_PASS}", "123", "null", "[redacted hash:abc]",
          "token", "keyword", "x.y", "word/", "word=", "wordé", "word1", "é", "ok,", "ok\n",
          "XqZkWvBnMpLrTsYhGdF", "XqZkWvBnMpLrTsYhGdFj", "XqZkWvBnMpLrTsYhGdFj9", f".{TOKEN}", f"~{TOKEN}",
          "8Kq3vZp0Lm2+t7Wx/Yb4N==", "8Kq3vZp0Lm2Rt7Wx9Yb4", "8Kq3vZp0Lm2Rt7Wx9Yb", "8Kq3vZp0Lm2Rt7Wx9Yb4é",
          "ab-cd_ef.gh~ij+kl/mn9"]  # fmt: skip
FRAGMENTS = [
    "the agent reads file path token branch error, dict f",
    "user,password,host\nbob,hunter2,db\nann,s3cret,db2\n",
    "name,api_key\r\nsvc,abc123def\n",
    "machine example.com login alice password pa55word\n",
    "setx API_TOKEN abc123\n", "set -gx DB_PASS hunter2\n", "aws configure set aws_secret_access_key AbC\n",
    "export GITHUB_TOKEN=ghp_0123456789abcdefghij0123\n",
    "postgres://app:Sup3rS3cret@db:5432/app ", "https://x-access-token:tok123@github.com/a ",
    '{"name": "password", "value": "hunter2"}', '<password>hunter2</password>', "<token>, then",
    '{\\"api_key\\": \\"sk-0123456789abcdefghij\\"}', '"max_tokens": 32000, "system": "x"',
    "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAK\n-----END RSA PRIVATE KEY-----\n",
    "curl -u user:pa55 https://x ", "mysql -pHunter2 db ", "Cookie: session=abc123; theme=dark\n",
    "Authorization: Bearer abcdefghijklmnop1234\n", "localhost:5432:db:user:pgpa55\n",
    "the key is 8Kq3vZp0Lm2Rt7Wx9Yb4Nc1Jd6 ok", "token 8Kq3vZp0Lm2Rt7Wx9Yb4Nc1Jd6,",
    "İstanbul token é K\u212aey ключ пароль 🔑 key: значение", "\x00\x01\ufffd\ud800 token\x7f key\x1b",
    "keyboard monkey passport tokenizer authors secretary", ", , , ,\n,\n",
]  # fmt: skip
DELIMITERS = [" ", "\n", "\r\n", ",", ";", "&", "?", "\"", "'", "\\", "(", ")", "[", "]", "{", "}", "<", ">",
              "|", "`", "/", ".", "-", "_", "=", ":", "\t", "\\n", "é", "\u212a", ""]  # fmt: skip

piece = st.one_of(
    st.builds(
        lambda n, s, v: n + s + v,
        st.sampled_from(NAMES),
        st.sampled_from(SEPARATORS),
        st.sampled_from(VALUES),
    ),
    st.builds(
        lambda q, n, v: f"{q}{n}{q}: {q}{v}{q}",
        st.sampled_from(['"', '\\"', "'", '\\\\\\"']),
        st.sampled_from(NAMES),
        st.sampled_from([SECRET, TOKEN, "x"]),
    ),
    st.sampled_from(FRAGMENTS),
    st.sampled_from(DELIMITERS),
    st.text(max_size=12),
)


@st.composite
def long_text(draw) -> str:
    """Pieces joined by delimiters, repeated past `SHORT_TEXT` (the compiled path's threshold)."""
    parts = draw(st.lists(st.tuples(piece, st.sampled_from(DELIMITERS)), min_size=1, max_size=30))
    text = "".join(p + d for p, d in parts)
    filler = draw(st.sampled_from(["lorem ipsum dolor ", "x", "token branch, ", "\n", "é"]))
    reps = SHORT_TEXT // max(1, len(text) + len(filler)) + 1
    return (text + filler) * reps + draw(piece)


def _outcome(fn, text: str) -> tuple[str, object]:
    """fn(text), or the exception it raises (the paths must agree on that too; a lone surrogate in a
    redacted value no longer raises: `markers.hash_value`)."""
    try:
        return "scrubbed", fn(text)
    except UnicodeEncodeError as exc:
        return "raised", (type(exc), exc.start, exc.end)


def _both(fn, text: str):
    """(the outcome of fn(text) on the Python path, on the compiled one)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(native, "named_next", None)
        m.setattr(native, "word_places", None)
        reference = _outcome(fn, text)
    return reference, _outcome(fn, text)


def _hyperscan_places(places, text: str) -> list[int]:
    """`places.places(text, …)` as Hyperscan alone finds them (the reference of `word_places`)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(native, "word_places", None)
        return places.places(text, text.encode("utf-8", "surrogatepass"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=long_text() | st.text(max_size=300))
def test_name_places_are_the_same_without_a_python_call_each(text):
    """`word_places` reads the text itself (one-, two- and four-byte, any case, words side by side
    or overlapping) and finds where Hyperscan does; `places` gives the same, dense or not."""
    for places in (secret_names._WORD_PLACES, _COOKIE_PLACES):
        reference = _hyperscan_places(places, text)
        assert native.word_places(text, places._literals) == reference
        assert places.places(text, text.encode("utf-8", "surrogatepass")) == reference


def test_a_text_dense_with_names_is_read_again_in_c(monkeypatch):
    """Past `DENSE` places Hyperscan stops and the compiled path reads the whole text: the same
    places, every one (in prose, glued, in every case and width of text)."""
    text = "a TOKEN, pwd=1 ApiKey keykey ŧokensecret é " * (DENSE // 2) + "😀 Signature\tcredential"
    calls = []
    real = native.word_places
    monkeypatch.setattr(native, "word_places", lambda *a: calls.append(a) or real(*a))
    found = secret_names._WORD_PLACES.places(text, text.encode())
    assert len(calls) == 1 and len(found) > DENSE
    assert found == _hyperscan_places(secret_names._WORD_PLACES, text)
    sparse = "x" * 5000 + " token " + "y" * 5000
    assert secret_names._WORD_PLACES.places(sparse, sparse.encode()) == [5001] and len(calls) == 1


@pytest.mark.parametrize(
    "words", [(), ("to",), ("Token",), ("tok3n",), ("tokén",), tuple("abcdefghijklmnopq")]
)
def test_word_places_refuses_what_it_cannot_read_as_hyperscan_does(words):
    words = tuple(w * 3 if len(w) == 1 else w for w in words)
    with pytest.raises(ValueError):
        native.word_places("some text", words)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=long_text())
def test_named_values_are_the_same(text):
    reference, compiled = _both(scrub_named_values, text)
    assert compiled == reference


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=long_text())
def test_whole_scrub_is_the_same(text):
    scrubber = Scrubber(default_rules())
    reference, compiled = _both(scrubber.scrub, text)
    assert compiled == reference
    reference, compiled = _both(scrubber.scrub_stream, text)
    assert compiled == reference


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=long_text())
def test_with_nothing_learned_yet(text):
    """A name the compiled path has no verdict for goes to the Python loop, which decides it."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(secret_names, "_VERDICTS", {})
        compiled = _outcome(scrub_named_values, text)
        m.setattr(native, "named_next", None)
        assert compiled == _outcome(scrub_named_values, text)


PREFIXES = ["", "(", " ", "x = ", '": ', '{"name": "', "<", "self.", '= \\"', "a, ", "\t", "k: '", "é",
            "- name: ", "ParameterKey="]  # fmt: skip
"""What stands before a name: where `paired_value_span` and an element look."""


def test_every_word_separator_and_value_together_is_the_same():
    """Each name beside each separator and value (and the next delimiter), all in one text: what
    random texts may miss (a context word, then a random token of exactly 20 characters)."""
    lines = [f"{PREFIXES[i % len(PREFIXES)]}{name}{sep}{value}{DELIMITERS[i % len(DELIMITERS)]}\n"
             for i, (name, sep, value) in enumerate(itertools.product(NAMES, SEPARATORS, VALUES))]  # fmt: skip
    text = "".join(lines)
    assert len(text) > SHORT_TEXT
    scrub_named_values(text)  # the verdicts are known now
    reference, compiled = _both(scrub_named_values, text)
    assert compiled == reference


@pytest.mark.parametrize("name", ["claude_code_request", "anthropic", "openai_chat", "anthropic_code"])
def test_benchmark_corpora_are_the_same(name, monkeypatch):
    from benchmarks.micro import scrub_corpus

    text = scrub_corpus(name, 256 * 1024)
    scrubber = Scrubber(default_rules())
    scrub = scrubber.scrub if name == "claude_code_request" else scrubber.scrub_stream
    reference, compiled = _both(scrub, text)
    assert compiled == reference


def _handed(text: str, monkeypatch) -> tuple[str, list[str]]:
    """`text` scrubbed once its names' verdicts are known, and the names the compiled path handed
    to the Python loop meanwhile."""
    scrub_named_values(text)  # the verdicts of these names are known now
    calls = []
    real = native.named_next

    def counting(*args):
        found = real(*args)
        calls.append(found)
        return found

    monkeypatch.setattr(native, "named_next", counting)
    scrubbed = scrub_named_values(text)
    return scrubbed, [text[start:end] for _hit, start, end in filter(None, calls)]


def test_it_skips_what_the_loop_would_only_pass(monkeypatch):
    """The compiled path really runs, and hands the Python loop only the names that need it: of a
    long text of prose (`token branch`) and two secrets, the first prose name (the loop finds where
    commands that assign end, which the compiled path needs) and the secrets."""
    text = "the token branch error path " * 200 + 'x DB_PASS=hunter2Xq9 and "max_tokens": 5 ' * 2
    scrubbed, handed = _handed(text, monkeypatch)
    assert "hunter2Xq9" not in scrubbed and scrubbed.count("token branch") == 200
    assert handed == ["token", "DB_PASS", "DB_PASS"]


def test_a_word_no_token_can_follow_stays_in_c(monkeypatch):
    """`key)`, `keys, ` and `key = x` cannot be followed by a random token where `_random_token_after`
    looks, nor can a value follow `(self.flow_key)` or `g(token)`, so the compiled path passes
    them; `key: 8Kq…` and `key is 8Kq…` go to the Python loop."""
    text = ("d[key) for keys, in x; key = x\nf(self.flow_key) and g(token)\n" * 100
            + f"the key: {TOKEN} and the key is {TOKEN}. " * 2)  # fmt: skip
    scrubbed, handed = _handed(text, monkeypatch)
    assert TOKEN not in scrubbed and scrubbed.count("d[key) for keys, in x; key = x") == 100
    assert handed == ["key"] * 4


def test_names_met_again_in_one_call_are_decided_each_time():
    """The compiled path remembers, within a call, the verdicts of the names it met (by their place
    in the text, in fewer slots than names): after a hundred harmless names passed in C, a secret
    name whose slot one of them holds is still handed to the loop, and its value goes."""
    harmless = " ".join(f"the max_tokens{i} branch" for i in range(100))
    text = "the svc_token branch\n" + "".join(
        f"{harmless}\nsvc{i}_token={TOKEN[:12]}{i:04d}\n" for i in range(64)
    )
    scrub_named_values(text)  # the verdicts are known now
    reference, compiled = _both(scrub_named_values, text)
    assert compiled == reference
    kind, scrubbed = compiled
    assert kind == "scrubbed" and TOKEN[:12] not in scrubbed and scrubbed.count("branch") == 6401


ESCAPES = ["\\n", "\\\\n", "\\r", "\\t", "\\f", "\\b", "\\/", "\\\\", '\\"', "\\u0041", "\\u00e9", "\\u0022",
           "\\u005c", "\\u001b", "\\u0009", "\\uD83D\\uDE00", "\\ud83d\\udc00", "\\uD83D", "\\uDE00", "\\u0041\\uDC00",
           "\\uDC00\\uDFFF", "\\u12", "\\u12G4", "\\uFFFF", "\\u0080", "\\u007f", "%41", "%2D", "%2d", "%20", "%7E",
           "%7e", "%C3%A9", "%4", "%G1", "%%41", "%", "\\", "\\x", "\\u", "\\\\u0041"]  # fmt: skip
CHARACTERS = ["a", " ", "\n", "é", "ключ", "😀", "\udc80", "\x7f", "0", "F", "u", "n", "\\"]


def _compiled_view(text: str):
    from capsem.escapes import DecodedView

    found = native.decoded_view(text)
    return None if found is None else DecodedView(*found)


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(ESCAPES + CHARACTERS) | st.text(max_size=4), max_size=30).map("".join))
def test_the_decoded_view_is_the_reference_view(text):
    """`decoded_view` in C reads every escape as `python_view` does: the same view, places and
    shifts (one-, two- and four-byte texts; escapes cut short, kept, nested and side by side)."""
    from capsem.escapes import python_view

    assert _compiled_view(text) == python_view(text)


@pytest.mark.parametrize("name", ["claude_code_request", "anthropic", "openai_chat", "anthropic_code"])
def test_the_decoded_view_of_the_benchmark_corpora_is_the_reference_view(name):
    from benchmarks.micro import scrub_corpus
    from capsem.escapes import python_view

    text = scrub_corpus(name, 256 * 1024)
    assert _compiled_view(text) == python_view(text)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(CHARACTERS) | st.text(max_size=4), max_size=30).map("".join))
def test_the_ascii_view_is_the_reference_view(text):
    """`ascii_view` in C reads each non-ASCII character (a lone surrogate too) as `\\x7f`, as the
    Python fallback does, and gives an ASCII text back as it is."""
    from capsem import escapes

    compiled = native.ascii_view(text)
    assert compiled == escapes._NON_ASCII_RE.sub(escapes.NON_ASCII, text) and compiled.isascii()
    assert (compiled is text) == text.isascii()
