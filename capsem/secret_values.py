"""Where the value after a secret name ends: its extent follows its syntax.

A quoted value is the whole quoted string, at any JSON escaping depth (a quote inside it has
more backslashes than the ones that open and close it). An unquoted value runs to a blank, a
quote, an escaped quote (`\\"`: the end of the JSON string it is in) or the end of the text,
punctuation inside included (`Kx9(m,Q&2<z` is one value), except where its syntax ends it:

- `;`, `,` or `&` followed by another `name=` (`Server=h;Pwd=X;Database=d`, `uid=0,password=X,rw`,
  `?token=X&page=2`) or by a blank or the end (`f(password=pw, user=u)`);
- `&` and `#` in a URL's query (the name comes after `?` or `&`);
- `<` that opens a closing tag (`password=X</td>`);
- a closing bracket that closes nothing in the value (`(password=X)`).

A value is kept when it is code, not a literal: a call or subscript (`get_password()`,
`os.environ["PW"]`) that does not look random, a type or literal word (`str`, `None`), a
reference to a variable (`$DB_PASSWORD`, `${TOKEN}`, `%PASSWORD%`), the name itself or an
attribute of that name (`api_key=api_key`, `token = self.token`), and the working directory of
`PWD=/home/me` (an absolute path after a `pwd` name).
"""

from __future__ import annotations

import re

from capsem.random_tokens import looks_random

DONE_RE = re.compile(r"\[redacted hash:[0-9a-f]{12}\]|hash:[0-9a-f]{12}")  # what the scrubber already hid
_OPEN_QUOTE_RE = re.compile(r"(\\*)([\"'])")
_QUOTE_RUN_RE = re.compile(r"(\\*)\"")
_SCHEME_RE = re.compile(r"(?:bearer|basic|token|digest)[ \t]+(?=\S)", re.IGNORECASE | re.ASCII)
_UNQUOTED_RE = re.compile(r"""(?:[^\s"'\\]|\\[^\s"'])+""")
_ENDS_RE = re.compile(r"[;,&<#)\]}]")
_NEXT_ASSIGNMENT_RE = re.compile(r"[ \t]*[A-Za-z_][\w .\-]{0,40}?[ \t]*=(?!=)")
_LAST_PART_RE = re.compile(r"[._\-]")
_CLOSERS = {")": "(", "]": "[", "}": "{"}
_CALL_RE = re.compile(r"[A-Za-z_$][\w.$]*(?:\((?:[^()]|\([^()]*\))*\)|\[[^\[\]]*\])+")
_REFERENCE_RE = re.compile(
    r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%[A-Za-z_][A-Za-z0-9_]*%|\$env:[A-Za-z_]\w*", re.I
)
_ABSOLUTE_PATH_RE = re.compile(r"(?:/|~/|[A-Za-z]:\\)")
_CODE_WORDS = frozenset({"str", "string", "int", "bool", "bytes", "none", "null", "true", "false",
                         "undefined", "any", "number", "object", "optional"})  # fmt: skip
_JSON_SCALAR_START = (*"0123456789-{[", "true", "false", "null")


def closing_quote(text: str, start: int, depth_run: int) -> int:
    """Where the JSON string opened by a quote after `depth_run` backslashes ends (-1: cut off).

    A string nested n times in JSON strings opens with 2**n - 1 backslashes before its quote; a
    quote inside it has more, and exactly those runs ≡ depth_run (mod 2**(n+1)) close it."""
    modulus = 2 * (depth_run + 1)
    for m in _QUOTE_RUN_RE.finditer(text, start):
        if len(m.group(1)) % modulus == depth_run:
            return m.start()
    return -1


def quoted_span(text: str, pos: int) -> tuple[int, int] | bool | None:
    """The span inside the quoted value that opens at `pos`; None to keep it (empty, or already
    redacted); False when no quote opens there."""
    quote_open = _OPEN_QUOTE_RE.match(text, pos)
    if quote_open is None:
        return False
    start = quote_open.end()
    single = quote_open.group(2) == "'"
    end = text.find("'", start) if single else closing_quote(text, start, len(quote_open.group(1)))
    end = len(text) if end < 0 else end
    if end == start or DONE_RE.fullmatch(text, start, end):
        return None
    return start, end


def _cut(text: str, start: int, end: int, in_query: bool) -> int:
    """Where the unquoted value `text[start:end]` really ends (see module doc)."""
    for m in _ENDS_RE.finditer(text, start, end):
        char, after = m.group(0), m.end()
        if char in _CLOSERS:
            if _CLOSERS[char] not in text[start : m.start()]:
                return m.start()
        elif char == "<":
            if text.startswith("/", after):
                return m.start()
        elif char == "#":
            if in_query:
                return m.start()
        elif (in_query and char == "&") or after == end or _NEXT_ASSIGNMENT_RE.match(text, after):
            return m.start()
    return end


def unquoted_span(text: str, pos: int, name: str, in_query: bool) -> tuple[int, int] | None:
    """The span of the unquoted value at `pos` after `name`, or None when it is no secret."""
    bare = _UNQUOTED_RE.match(text, pos)
    if bare is None or text.startswith("[redacted ", pos):
        return None
    end = _cut(text, pos, bare.end(), in_query)
    value = text[pos:end]
    if not value or DONE_RE.fullmatch(value):
        return None
    lowered, lowered_name = value.lower(), name.lower()
    call = _CALL_RE.match(text, pos)
    if (
        (call is not None and call.end() >= end and not looks_random(value))
        or lowered in _CODE_WORDS
        or _REFERENCE_RE.fullmatch(value)
        or lowered
        in (lowered_name, _LAST_PART_RE.split(lowered_name)[-1])  # `api_key=api_key`, `self.key = key`
        or lowered.endswith("." + lowered_name.lstrip("-"))
        or (lowered_name.endswith("pwd") and _ABSOLUTE_PATH_RE.match(value))
    ):
        return None
    return pos, end


def value_span(text: str, pos: int, name: str, quoted_name: bool, in_query: bool) -> tuple[int, int] | None:
    """The span of the secret value starting at `pos` (after a secret name), or None to keep it."""
    if not quoted_name:
        scheme = _SCHEME_RE.match(text, pos)
        pos = scheme.end() if scheme else pos
    quoted = quoted_span(text, pos)
    if quoted is not False:
        return quoted  # type: ignore[return-value]
    if quoted_name and text.startswith(_JSON_SCALAR_START, pos):
        return None  # JSON numbers, literals and nested objects stay (usage counts, schemas)
    return unquoted_span(text, pos, name, in_query)
