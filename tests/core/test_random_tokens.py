"""The random-token rule: what it calls random, and how rarely it redacts real code and prose
(below 1 redaction per 100 KB of the standard library and the project's own sources, a corpus
that is always present; `benchmarks/entropy_false_positives.py` measures site-packages too)."""

from __future__ import annotations

import random
import string
import sysconfig
from pathlib import Path

import pytest

from benchmarks.entropy_false_positives import PROJECT, ROOT, files_under, measure
from capsem.random_tokens import looks_random

RNG = random.Random(7)


@pytest.mark.parametrize(
    ("alphabet", "length", "at_least"),
    [(string.ascii_letters + string.digits, 40, 0.95), (string.ascii_letters + string.digits, 24, 0.85),
     ("0123456789abcdef", 40, 0.95), (string.ascii_letters + string.digits + "+/", 64, 0.95)],
)  # fmt: skip
def test_random_keys_look_random(alphabet, length, at_least):
    keys = ["".join(RNG.choice(alphabet) for _ in range(length)) for _ in range(500)]
    assert sum(map(looks_random, keys)) / len(keys) >= at_least


@pytest.mark.parametrize(
    "token",
    ["getAccessTokenFromRefreshToken", "AmazonS3ReadOnlyAccess2024", "08ceef7e-e86b-4b41-84c8-ea3241f610de",
     "python3.11/site-packages/capsem", "test_secrets_agents_handle_2024", "0123456789abcdef", "a" * 40,
     "ELB_Security_Policy_TLS13_2021", "v1.2.3-rc4+build.5678.abcdef"],
)  # fmt: skip
def test_words_ids_and_paths_do_not(token):
    assert not looks_random(token)


def test_false_positives_on_real_code_stay_below_one_per_100_kb():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    corpus = [stdlib / name for name in ("email", "http", "json", "asyncio", "unittest", "logging", "urllib",
                                         "xml", "sqlite3", "importlib", "concurrent", "multiprocessing")]  # fmt: skip
    rate = measure(files_under([*corpus, *(ROOT / name for name in PROJECT)]))
    assert rate.size > 5_000_000, rate.size  # a corpus large enough to say something
    assert rate.per_100kb < 1.0, (rate.per_100kb, rate.examples)
