"""Possessive patterns read the same on a Python that mis-matches them (3.11 before 3.11.5)."""

from __future__ import annotations

import re

from addons import possessive

PATTERNS = (rb'[^"{}\[\]]*+(?:"[^"\\]*+(?:\\.[^"\\]*+)*+"[^"{}\[\]]*+)*+', r"\n*+(?:data: [^\n]*+\n\n++)*+")


def test_without_the_possessive_quantifiers_the_same_text_matches(monkeypatch):
    texts = {bytes: [b'ab"c\\"d"e{', b'"x', b""], str: ["\n\ndata: a\n\n\ndata: b\n\n", "data: x\n", ""]}
    for pattern in PATTERNS:
        native = re.compile(pattern)
        monkeypatch.setattr(possessive, "POSSESSIVE", False)
        plain = possessive.compile_possessive(pattern)
        monkeypatch.setattr(possessive, "POSSESSIVE", True)
        assert "++" not in str(plain.pattern) and "*+" not in str(plain.pattern)
        for text in texts[type(pattern)]:
            assert native.match(text)[0] == plain.match(text)[0], (pattern, text)
