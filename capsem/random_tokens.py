"""Tokens that look random: a secret of unknown shape, told apart from words, ids and paths.

A key with no known prefix is still a run of characters drawn at random from a large alphabet,
which names, words, paths and version strings are not. `looks_random` says so of a token when
all of these hold:

- long enough: 20 characters or more (shorter runs of mixed characters are everywhere in code);
  a token of hex digits alone needs 32;
- letters and digits both, and one stretch of 16 characters or more between separators
  (`/ . _ - + ~ =`): a path, a dotted name or a UUID has none;
- random enough: Shannon entropy per character at least 80 % of the most its length and alphabet
  allow (`log2(min(length, alphabet))`, the alphabet 16 for hex, else the sizes of the classes
  it uses: 26 lower, 26 upper, 10 digits, 4 separators), and no character more than a fifth of it;
- not made of words: less than half of it in runs of 3+ letters (a capital and lower-case letters,
  or capitals) with a fifth or more vowels (`AmazonS3ReadOnly2`, `test_handler_v2_2024` are words).

Measured on random tokens (2,000 each): a 40-character base62 key passes 97 % of the time, 64
characters 99 %, 32 hex digits 95 %, 20 base62 characters 89 %; keys of lower-case letters and
digits 73-85 % (their letters read as words more often).

It is used only where a credential is expected (after `token`, `key`, `secret`, `password`… in
prose, `capsem.secret_names`): its false-positive rate there, on the project's and its packages'
sources, is measured by `benchmarks/entropy_false_positives.py` (docs/RELIABILITY.md).
"""

from __future__ import annotations

import math
import re
from collections import Counter

MIN_LENGTH = 20
MIN_HEX_LENGTH = 32
MIN_STRETCH = 16
RATIO = 0.8
LONG_TOKEN_RE = re.compile(r"(?<![A-Za-z0-9+/_\-.~])[A-Za-z0-9][A-Za-z0-9+/_\-.~]{18,}[A-Za-z0-9]={0,2}")
"""A candidate of `MIN_LENGTH` or more: base64, base64url, hex, or a key with `-`, `_`, `.` in it."""
_HEX_RE = re.compile(r"[0-9a-fA-F\-]+")
_SEPARATOR_RE = re.compile(r"[/._\-+~=]")
_WORD_RE = re.compile(r"[A-Z]?[a-z]{2,}|[A-Z]{3,}(?![a-z])")


def _alphabet(token: str) -> int:
    if _HEX_RE.fullmatch(token):
        return 16
    size = 4 if _SEPARATOR_RE.search(token) else 0
    size += 26 * any(c.islower() for c in token) + 26 * any(c.isupper() for c in token)
    return size + 10 * any(c.isdigit() for c in token)


def entropy_ratio(token: str) -> float:
    """Shannon entropy per character over the most a string of its length and alphabet can have."""
    if len(token) < 2:
        return 0.0
    total = len(token)
    entropy = -sum(c / total * math.log2(c / total) for c in Counter(token).values())
    return entropy / math.log2(max(2, min(total, _alphabet(token))))


def word_share(token: str) -> float:
    """How much of `token` is in runs of letters that read as words (see module doc)."""
    covered = 0
    for m in _WORD_RE.finditer(token):
        word = m.group(0).lower()
        if len(word) >= 3 and sum(c in "aeiouy" for c in word) * 5 >= len(word):
            covered += len(word)
    return covered / len(token)


def looks_random(token: str) -> bool:
    """Whether `token` looks like a randomly drawn secret (see module doc)."""
    if len(token) < MIN_LENGTH or not any(c.isdigit() for c in token) or not any(c.isalpha() for c in token):
        return False
    if _HEX_RE.fullmatch(token) and sum(c != "-" for c in token) < MIN_HEX_LENGTH:
        return False
    if max(map(len, _SEPARATOR_RE.split(token))) < MIN_STRETCH or max(Counter(token).values()) * 5 > len(
        token
    ):
        return False
    return entropy_ratio(token) >= RATIO and word_share(token) < 0.5
