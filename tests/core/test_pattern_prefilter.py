"""Hyperscan's prefilter for capsem's own patterns says no only where Python's `re` finds nothing.

On a long ASCII text the scrubber asks each pattern whose literal occurs a Hyperscan prefilter of
the same regex before Python's `re` runs it over the whole text (`ascii_prefilter_regex`: Python's
`\\s` takes in `\\x1c`-`\\x1f`, which Hyperscan's does not). A prefilter that said no where the
pattern matches would let a secret through, so every pattern is tried on texts generated from the
pattern itself, inside ASCII context that holds the separators where the two engines differ.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capsem.literal_scan import SHORT_TEXT, ascii_prefilter_regex
from capsem.redact import _COMPILED, _PATTERN_PREFILTERS, _PATTERNS, Scrubber, default_rules


@pytest.mark.parametrize(
    ("pattern", "translated"),
    [
        (r"a(?P<s>[^\s'\\]+)", r"a(?:[^\s\x1c-\x1f'\\]+)"),
        (r"\s-P\S+", r"[\s\x1c-\x1f]-P[^\s\x1c-\x1f]+"),
        (r"[]\s]x\\s", r"[]\s\x1c-\x1f]x\\s"),  # a `]` first in a class; an escaped backslash
        (r"[^]a]\[\s", r"[^]a]\[[\s\x1c-\x1f]"),
    ],
)
def test_the_translation(pattern, translated):
    assert ascii_prefilter_regex(pattern) == translated
    assert re.compile(translated)  # still a regex Python reads


def test_no_prefilter_for_what_it_cannot_translate():
    with pytest.raises(ValueError):
        ascii_prefilter_regex(r"[\S]")


def _generator(pattern: str) -> str:
    """The pattern as hypothesis can generate it: a command led by its second word
    (`\\blogin(?<=\\baz login)`) spelled out (`\\baz login`)."""
    return re.sub(r"\\b\w+\(\?<=\\b([^)]*)\)", r"\\b\1", pattern)


ASCII = st.characters(codec="ascii")
CONTEXT = st.text(st.sampled_from(["\x1c", "\x1d", "\x1e", "\x1f", " ", "\t", "\n", "\\", '"', "a", "-", "é"]),
                  max_size=4)  # fmt: skip


@st.composite
def pattern_and_text(draw) -> tuple[int, str]:
    i = draw(st.sampled_from(range(len(_PATTERNS))))
    core = draw(st.from_regex(re.compile(_generator(_PATTERNS[i][1])), fullmatch=True, alphabet=ASCII))
    # the separators Python's `\s` reads as blanks, where the pattern has a blank
    core = "".join(draw(st.sampled_from([c, "\x1c", "\x1f"])) if c == " " else c for c in core)
    return i, draw(CONTEXT).replace("é", "e") + core + draw(CONTEXT).replace("é", "e")


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(case=pattern_and_text())
def test_a_prefilter_never_says_no_where_the_pattern_matches(case):
    i, text = case
    assert text.isascii()
    if _COMPILED[i][1].search(text) is not None:
        assert _PATTERN_PREFILTERS[i].maybe(text.encode())


def test_every_pattern_has_a_prefilter():
    """Each compiles (a pattern without one would run on every text whose literal occurs)."""
    for prefilter in _PATTERN_PREFILTERS:
        prefilter.maybe(b"x")
        assert prefilter._db is not None, prefilter.pattern


class _Always:
    def maybe(self, data: bytes) -> bool:
        return True


@pytest.mark.parametrize("padding", ["lorem ipsum zip(a, b) curl x ", "a:b \x1c \x1f -P x "])
def test_long_ascii_texts_scrub_the_same_without_the_prefilters(padding, monkeypatch):
    pw = "Pw9kQz3xVb7LmN2r"
    lines = [f"zip -P {pw} out.zip f", f"zip\x1c-P {pw} out.zip", f"curl -u admin:{pw} https://ci",
             f"psql postgresql://app:{pw}@db/app", f"unzip -P {pw} a.zip", f"mc alias set s3 https://s3 AKID {pw}",
             f"curl\x1f-u admin:{pw} https://ci"]  # fmt: skip
    text = (padding * (SHORT_TEXT // len(padding) + 1)).join(lines) + padding * 50
    assert text.isascii() and len(text) > SHORT_TEXT
    scrubber = Scrubber(default_rules())
    scrubbed = scrubber.scrub(text)
    monkeypatch.setattr(scrubber._prefilter, "patterns", tuple(_Always() for _ in _PATTERNS))
    assert scrubber.scrub(text) == scrubbed
    assert pw not in scrubbed
