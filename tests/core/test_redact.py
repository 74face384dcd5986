import json

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
