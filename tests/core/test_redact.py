import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from capsem import redact
from capsem.redact import Scrubber, hash_value, headers_json, redact_query

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
    "learned-credential-42", " ", "\n", "sk-", "AIza", '"', ":", "token",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=12)), max_size=12))
def test_prefiltered_scrub_equals_the_plain_regex_passes(parts):
    """The literal prefilters only skip passes that could not match: same output as running every regex."""
    text = "".join(parts)
    scrubber = Scrubber()
    scrubber.learn("learned-credential-42")
    reference = re.compile("|".join(re.escape(s) for s in ["learned-credential-42"])).sub(
        lambda m: redact._redacted(m.group(0)), text
    )
    for _, pattern in redact._PATTERNS:
        reference = re.sub(pattern, lambda m: redact._redacted(m.group(0)), reference)
    reference = redact._JSON_FIELD_RE.sub(
        lambda m: m.group(1) + redact._redacted(m.group(2)) + m.group(3), reference
    )
    assert scrubber.scrub(text) == (reference or text)
