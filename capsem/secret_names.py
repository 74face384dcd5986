"""Secret-named values: what a key, variable, flag or parameter name says it holds.

`is_secret_name` decides from the name alone (`db_password`, `--api-key`, `secretAccessKey` hold
secrets; `max_tokens`, `cache_key`, `password_file` only mention one); `scrub_named_values`
redacts the values after such names in any text: JSON string values at any escaping depth
(`"k": "v"`, `\\"k\\": \\"v\\"`, …) whole, escaped quotes included; `k=v` / `k: v` (env, ini,
YAML, queries in URLs); `--k v` and `--k=v`. `mask_secret_args` does the same for an argv.
Only string values are redacted, never numbers or nested objects (usage counts and schemas stay).
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Sequence

from capsem.literal_scan import SHORT_TEXT, LiteralPlaces
from capsem.markers import MARKER_RE, MARKER_SPLIT_RE
from capsem.markers import redacted as _redacted

# --- secret-named keys ------------------------------------------------------------------------
# Every secret name contains one of these words (lower-cased); `is_secret_name` decides.
_NAME_WORDS = ("passw", "passphrase", "secret", "token", "credential", "auth", "key", "signature")
# A name (optionally quoted, at any JSON escaping depth: `"`, `\"`, `\\\"`…) and its separator:
# `:`, `=`, `:=`, or blanks (the last only for a `--flag VALUE`).
_NAMED_RE = re.compile(
    rf"(?:(?P<q>\\*[\"'])|(?<![\w.\-\]]))(?P<name>[\w.\-]*?(?:{'|'.join(_NAME_WORDS)})[\w.\-]*)(?(q)(?P=q))"
    r"(?P<sep>[ \t]*(?::=|:|=(?!=))[ \t]*|[ \t]+)",
    re.IGNORECASE | re.ASCII,
)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_NAME_RUN_RE = re.compile(r"[\w.\-]*", re.ASCII)
_OPEN_QUOTE_RE = re.compile(r"(\\*)([\"'])")
_QUOTE_RUN_RE = re.compile(r"(\\*)\"")
_SCHEME_RE = re.compile(r"(?:bearer|basic|token|digest)[ \t]+(?=\S)", re.IGNORECASE | re.ASCII)
_BARE_VALUE_RE = re.compile(r"[^\s\"'\\,;&<>()\[\]{}]+")
DONE_RE = re.compile(r"\[redacted hash:[0-9a-f]{12}\]|hash:[0-9a-f]{12}")  # what this module already hid
_ENV_REFERENCE_RE = re.compile(r"\$[A-Z_][A-Z0-9_]*")
_CODE_WORDS = frozenset({"str", "string", "int", "bool", "bytes", "none", "null", "true", "false",
                         "undefined", "any", "number", "object", "optional"})  # fmt: skip
_JSON_SCALAR_START = (*"0123456789-{[", "true", "false", "null")

_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_ALNUM_RE = re.compile(r"[^a-z0-9]+")
# a last part that makes the name describe a secret rather than hold one (`password_file`, `token_count`)
_HARMLESS_LAST = frozenset({
    "file", "files", "path", "paths", "dir", "url", "uri", "endpoint", "type", "name", "names", "count",
    "counts", "length", "len", "limit", "size", "ids", "ttl", "expiry", "expires", "expiration", "in", "at",
    "hint", "policy", "prefix", "suffix", "header", "env", "var", "field", "format", "kind", "mode",
    "enabled", "required", "version", "usage", "budget", "details", "index",
})  # fmt: skip
# `<owner>_key` / `<owner>_token` names that are not credentials
_HARMLESS_OWNERS = {
    "key": frozenset({"cache", "sort", "primary", "foreign", "partition", "public", "object", "idempotency",
                      "hash", "range", "row", "dedup", "dedupe", "unique", "composite", "lookup", "group", "map",
                      "dict", "index", "i18n", "translation", "message"}),
    "token": frozenset({"eos", "bos", "pad", "unk", "sep", "cls", "mask", "stop", "special", "start", "end"}),
}  # fmt: skip
# a last part that says how the secret is written down, not what it is
_ENCODING_LAST = frozenset({"data", "value", "b64", "base64", "hex", "pem", "raw", "str", "string", "text"})
_SECRET_SUBSTRINGS = ("passw", "passphrase", "secret", "credential", "authorization")
_SECRET_ARG_RE = re.compile(r"-{0,2}[A-Za-z_][\w.\-]*")


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether a key, variable, flag or parameter name holds a secret (`db_password`, `--api-key`,
    `secretAccessKey`, `X-Amz-Signature`), not merely mentions one (`max_tokens`, `cache_key`)."""
    parts = [p for p in _NON_ALNUM_RE.split(_CAMEL_RE.sub("_", name).lower()) if p]
    if not parts or parts[-1] in _HARMLESS_LAST:
        return False
    last = parts[-1]
    if last == "tiktoken" or (len(parts) > 1 and parts[-2] in _HARMLESS_OWNERS.get(last, ())):
        return False
    if last in _ENCODING_LAST and len(parts) > 1:  # `client-key-data`, `api_key_value`, `secret_b64`
        return is_secret_name("_".join(parts[:-1]))
    joined = "_".join(parts)
    if any(word in joined for word in _SECRET_SUBSTRINGS) or any(p.endswith("token") for p in parts):
        return True
    if last in ("auth", "apikey", "privatekey", "secretkey", "accesskey"):
        return True
    if last == "key":
        return len(parts) > 1
    return last == "signature" and ("amz" in parts or "goog" in parts)


def _closing_quote(text: str, start: int, depth_run: int) -> int:
    """Where the JSON string opened by a quote after `depth_run` backslashes ends (-1: cut off).

    A string nested n times in JSON strings opens with 2**n - 1 backslashes before its quote; a
    quote inside it has more, and exactly those runs ≡ depth_run (mod 2**(n+1)) close it."""
    modulus = 2 * (depth_run + 1)
    for m in _QUOTE_RUN_RE.finditer(text, start):
        if len(m.group(1)) % modulus == depth_run:
            return m.start()
    return -1


def _value_span(text: str, pos: int, name: str, quoted_name: bool) -> tuple[int, int] | None:
    """The span of the secret value starting at `pos` (after a secret name), or None to keep it."""
    if not quoted_name:
        scheme = _SCHEME_RE.match(text, pos)
        pos = scheme.end() if scheme else pos
    quote_open = _OPEN_QUOTE_RE.match(text, pos)
    if quote_open:
        start = quote_open.end()
        single = quote_open.group(2) == "'"
        end = text.find("'", start) if single else _closing_quote(text, start, len(quote_open.group(1)))
        end = len(text) if end < 0 else end
        if end == start or DONE_RE.fullmatch(text, start, end):
            return None
        return start, end
    if quoted_name and text.startswith(_JSON_SCALAR_START, pos):
        return None  # JSON numbers, literals and nested objects stay (usage counts, schemas)
    bare = _BARE_VALUE_RE.match(text, pos)
    if bare is None or DONE_RE.fullmatch(bare.group(0)):  # (a `[redacted …]` marker is no bare value)
        return None
    value = bare.group(0)
    lowered = value.lower()
    if (
        text.startswith(("(", "["), bare.end())  # a call or subscript: code, not a literal
        or lowered in _CODE_WORDS
        or _ENV_REFERENCE_RE.fullmatch(value)
        or lowered == name.lower()
        or lowered.endswith("." + name.lower())  # `api_key=api_key`, `token = self.token`
    ):
        return None
    return bare.start(), bare.end()


_WORD_STARTS_RE = re.compile("(?=(?:" + "|".join(_NAME_WORDS) + "))")


_WORD_PLACES = LiteralPlaces(_NAME_WORDS)


def _word_hits(text: str, data: bytes | None) -> list[int]:
    """Sorted positions of the name words in `text`, any ASCII case: one regex scan of the
    lower-cased text for a short one, a Hyperscan scan of its UTF-8 `data` for a long one (see
    `SHORT_TEXT`). (A name is ASCII, so a word found only through a non-ASCII letter's lower case,
    as the Kelvin sign's `k`, could never start one: both ways find the same names.)"""
    if len(text) <= SHORT_TEXT:
        lowered = text.lower()
        if len(lowered) != len(text):  # a character whose lower case is longer (İ): positions differ
            lowered = text.translate(_ASCII_LOWER)  # names are ASCII
        return [m.start() for m in _WORD_STARTS_RE.finditer(lowered)]
    return _WORD_PLACES.places(text, text.encode("utf-8", "surrogatepass") if data is None else data)


def scrub_named_values(text: str, data: bytes | None = None) -> str:
    """`text` with the values of secret-named keys, assignments and flags redacted.

    Only the places where a name word occurs are looked at (`data` = `text` in UTF-8, if the
    caller has it): from each, back to the start of its name (and its quotes), then `_NAMED_RE`."""
    out: list[str] = []
    done = scanned = 0
    for hit in _word_hits(text, data):
        if hit < scanned:
            continue  # inside a name already looked at, or a value already redacted
        start = hit
        while start > 0 and text[start - 1] in _NAME_CHARS:
            start -= 1
        end = _NAME_RUN_RE.match(text, hit).end()
        if not is_secret_name(text[start:end]):  # most hits: max_tokens, input_tokens, keyboard…
            scanned = end
            continue
        m = None
        if start > 0 and text[start - 1] in "\"'":
            quoted = start - 1
            while quoted > 0 and text[quoted - 1] == "\\":
                quoted -= 1
            while m is None and quoted < start:  # the longest quote prefix that closes the same way
                m = _NAMED_RE.match(text, quoted)
                quoted += 1
        m = m or _NAMED_RE.match(text, start)
        if m is None:  # no separator after the name, or glued to what precedes it
            scanned = end
            continue
        scanned = m.end()
        span = _secret_span(text, m)
        if span is not None and span[0] >= done:
            out += [text[done : span[0]], _redacted(text[span[0] : span[1]])]
            done = scanned = span[1]
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _secret_span(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    """The span of the value after a `_NAMED_RE` match of a secret name, if there is one to redact."""
    name, quote_prefix, sep = m.group("name"), m.group("q"), m.group("sep")
    separator = sep.strip()
    if not separator:  # blanks separate only a `--flag VALUE`
        if quote_prefix or not name.startswith("-") or text.startswith("-", m.end()):
            return None
    elif separator == ":" and not quote_prefix and sep[-1] == ":" and "-" not in name:
        return None  # `name:value` without a blank is a prefixed id (`tiktoken:cl100k_base`, `secrets:read`)
    return _value_span(text, m.end(), name, bool(quote_prefix))


def mask_secret_args(argv: Sequence[str]) -> list[str]:
    """argv with the values of secret flags (`--password V`, `--token=V`) and secret `NAME=V`
    arguments (environment prefixes) redacted."""
    out = list(argv)
    i = 0
    while i < len(out):
        name, eq, value = out[i].partition("=")
        if _SECRET_ARG_RE.fullmatch(name) and is_secret_name(name):
            if eq and value and not DONE_RE.fullmatch(value):
                out[i] = f"{name}={_redacted(value)}"
            elif not eq and name.startswith("-") and i + 1 < len(out) and not out[i + 1].startswith("--"):
                if not DONE_RE.fullmatch(out[i + 1]):
                    out[i + 1] = _redacted(out[i + 1])
                i += 1
        i += 1
    return out


def join_argv(argv: Sequence[str]) -> str:
    """`shlex.join`, except that `[redacted hash:…]` markers stay unquoted (as `scrub` leaves them)."""
    return " ".join(
        "".join(
            part if MARKER_RE.fullmatch(part) else shlex.quote(part)
            for part in MARKER_SPLIT_RE.split(arg)
            if part
        )
        if "[redacted " in arg
        else shlex.quote(arg)
        for arg in argv
    )
