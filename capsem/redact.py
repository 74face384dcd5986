"""Keeping secrets off disk: header hashing, query redaction and secret scrubbing.

Rules (DESIGN.md contract): a short allowlist of harmless headers is stored verbatim; every
other header value becomes `hash:` + 12 hex chars of its SHA-256. Sensitive query parameters
(the configured ones, secret-named ones, cloud signatures) are hashed the same way. Every text
that reaches a disk goes through `Scrubber.scrub` (command lines through `Scrubber.scrub_command`),
which replaces with `[redacted hash:…]`:

- the values of secret-named keys (`is_secret_name`: `*password*`, `*secret*`, `*token*`,
  `passphrase`, `*_key`, `auth`, `authorization`, `credential(s)`, cloud signature parameters) in
  every form: JSON string values at any escaping depth (`"k": "v"`, `\\"k\\": \\"v\\"`, …) whole,
  escaped quotes included; `k=v` / `k: v` (env, ini, YAML, queries in URLs); `--k v` and `--k=v`;
- well-known credential shapes (`sk-ant-…`, `sk-…`, `AIza…`, GitHub, GitLab, Slack, AWS, npm,
  PyPI, Hugging Face and Stripe keys, JWTs, bearer tokens), private-key PEM blocks (also with
  escaped newlines, or cut off), webhook URLs (also as a bare path), URL passwords
  (`postgres://u:PASSWORD@h`) and Azure SAS signatures;
- any secret value seen in a credential header or query parameter of this session (learned).

Only string values of JSON keys are redacted, never numbers, so usage counts (`"input_tokens": 12`)
survive, and names that only look alike are left alone (`max_tokens`, `token_count`, `cache_key`,
`token_type`, `password_file`). The scrubber runs on every stored string: each pass runs only
when a literal that every one of its matches contains occurs in the text.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shlex
import threading
from collections.abc import Iterable, Sequence
from urllib.parse import parse_qsl, quote

import ahocorasick

HASH_PREFIX = "hash:"

# (literals one of which every match contains, pattern): the literals are checked with `in` first,
# so a text without any of them costs one fast substring scan per literal, not a regex pass. A
# pattern with a group named `s` has only that group redacted (the rest says what it was).
_PATTERNS: list[tuple[tuple[str, ...], str]] = [
    (("sk-ant-",), r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    (("sk-",), r"\bsk-(?:proj-|svcacct-|admin-|or-v1-)?[A-Za-z0-9_\-]{16,}"),
    (("AIza",), r"\bAIza[0-9A-Za-z_\-]{20,}"),
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    (("github_pat_",), r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    (("xoxb-", "xoxa-", "xoxp-", "xoxr-", "xoxs-"), r"\bxox[baprs]-[A-Za-z0-9\-]{10,}"),
    (("ya29.",), r"\bya29\.[0-9A-Za-z_\-]{20,}"),
    (("AKIA", "ASIA"), r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    (("eyJ",), r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    (("Bearer ",), r"(?<=Bearer )[A-Za-z0-9._~+/\-]{12,}=*"),
    (("glpat-",), r"\bglpat-[A-Za-z0-9_\-]{20,}"),  # GitLab
    (("npm_",), r"\bnpm_[A-Za-z0-9]{36}\b"),
    (("pypi-AgE",), r"\bpypi-AgE[A-Za-z0-9_\-]{40,}"),
    (("hf_",), r"\bhf_[A-Za-z0-9]{30,}"),  # Hugging Face
    (("_live_",), r"\b[sr]k_live_[A-Za-z0-9]{16,}"),  # Stripe
    # the password of a URL (`postgres://app:PASSWORD@db/app`, `https://x-access-token:TOKEN@github.com`)
    (("://",), r"://[^\s/:@\"'\\]*:(?!\[redacted )(?P<s>[^\s/@\"'\\]+)@"),
    # the body of a private key, up to its END line or, cut off by a preview limit, its last base64
    (
        ("PRIVATE KEY",),
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?!\[redacted )"
        r"(?P<s>(?s:.+?)(?=-----END [A-Z0-9 ]*PRIVATE KEY)|[A-Za-z0-9+/=\s\\:,.\-]+)",
    ),
    # webhook URLs, also as a bare request path (net_events.path holds no host)
    (
        ("services/T", "workflows/T", "triggers/T"),
        r"(?:services|workflows|triggers)/(?P<s>T[A-Z0-9]{6,}/[\w/\-]+)",
    ),
    (("/api/webhooks/",), r"/api/webhooks/(?P<s>[0-9]{6,}/[\w\-]{16,})"),  # Discord and look-alikes
    (("/webhookb2/",), r"/webhookb2/(?P<s>[\w@/\-]+)"),  # Microsoft Teams
    (("/hooks/catch/",), r"/hooks/catch/(?P<s>[0-9]+/[A-Za-z0-9]+)"),  # Zapier
    (("sig=",), r"(?<=[?&;])sig=(?!\[redacted )(?P<s>[^&\s\"'\\#<>]+)"),  # an Azure SAS signature
]
_COMPILED = [(literals, re.compile(pattern)) for literals, pattern in _PATTERNS]
_LITERALS = sorted({lit for literals, _ in _PATTERNS for lit in literals}, key=len, reverse=True)
_LITERALS_RE = re.compile("|".join(re.escape(lit) for lit in _LITERALS))
"""Every pattern's literals in one scan: a text without any costs one C-level search, not 30."""
_TRIGGERED: dict[str, tuple[int, ...]] = {
    found: tuple(i for i, (literals, _) in enumerate(_COMPILED) if any(lit in found for lit in literals))
    for found in _LITERALS
}
"""Literal found -> the patterns to run (also those whose literal is part of it: `sk-` in `sk-ant-`)."""


_SHORT_TEXT = 2048
"""Below this length one regex scan for all literals is cheapest; above it, an Aho-Corasick
automaton is (Python's `re` tries every alternative at every position)."""


def _automaton(words: Iterable[str]) -> ahocorasick.Automaton:
    automaton = ahocorasick.Automaton()
    for word in words:
        automaton.add_word(word, word)
    automaton.make_automaton()
    return automaton


_LITERALS_AC = _automaton(_LITERALS)


def _patterns_for(text: str) -> list[re.Pattern[str]]:
    """The patterns whose literals occur in `text`, in their list order."""
    if len(text) > _SHORT_TEXT:
        hits: Iterable[str] = {found for _, found in _LITERALS_AC.iter(text)}
    else:
        hits = _LITERALS_RE.findall(text)
    if not hits:
        return []
    wanted = sorted({i for found in set(hits) for i in _TRIGGERED[found]})
    return [_COMPILED[i][1] for i in wanted]


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
_MARKER_RE = re.compile(r"\[redacted hash:[0-9a-f]{12}\]")
_DONE_RE = re.compile(r"\[redacted hash:[0-9a-f]{12}\]|hash:[0-9a-f]{12}")  # what this module already hid
_MARKER_SPLIT_RE = re.compile(r"(\[redacted hash:[0-9a-f]{12}\])")
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
_CREDENTIAL_HEADER_RE = re.compile(r"(?i)auth|token|secret|key|cookie|session|credential|password")
# query parameters hashed whatever the configuration says (cloud request signatures)
_ALWAYS_HASHED_QUERY = frozenset({"sig", "x-amz-signature", "x-goog-signature"})
_MAX_LEARNED = 512


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


def hash_value(value: str | bytes) -> str:
    """`hash:` + the first 12 hex chars of the SHA-256 of `value`."""
    data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    return HASH_PREFIX + hashlib.sha256(data).hexdigest()[:12]


def _redacted(secret: str) -> str:
    return f"[redacted {hash_value(secret)}]"


def _redact_match(m: re.Match[str]) -> str:
    """The match with its secret (group `s` if the pattern has one, else all of it) redacted."""
    if "s" not in m.re.groupindex or m.start("s") < 0:
        return _redacted(m.group(0))
    start, end = m.start("s") - m.start(), m.end("s") - m.start()
    whole = m.group(0)
    return whole[:start] + _redacted(whole[start:end]) + whole[end:]


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
        if end == start or _DONE_RE.fullmatch(text, start, end):
            return None
        return start, end
    if quoted_name and text.startswith(_JSON_SCALAR_START, pos):
        return None  # JSON numbers, literals and nested objects stay (usage counts, schemas)
    bare = _BARE_VALUE_RE.match(text, pos)
    if bare is None or _DONE_RE.fullmatch(bare.group(0)):  # (a `[redacted …]` marker is no bare value)
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


_WORDS_AC = _automaton(_NAME_WORDS)


def _word_hits(lowered: str) -> list[int]:
    """Sorted positions of the name words in the lower-cased text: one regex scan for a short
    text, the Aho-Corasick automaton for a long one (see `_SHORT_TEXT`)."""
    if len(lowered) <= _SHORT_TEXT:
        return [m.start() for m in _WORD_STARTS_RE.finditer(lowered)]
    return sorted(end - len(word) + 1 for end, word in _WORDS_AC.iter(lowered))


def scrub_named_values(text: str, lowered: str | None = None) -> str:
    """`text` with the values of secret-named keys, assignments and flags redacted.

    Only the places where a name word occurs are looked at (`lowered` = `text.lower()`, if the
    caller has it): from each, back to the start of its name (and its quotes), then `_NAMED_RE`."""
    lowered = text.lower() if lowered is None else lowered
    if len(lowered) != len(text):  # a character whose lower case is longer (İ): positions differ
        lowered = text.translate(_ASCII_LOWER)  # names are ASCII
    out: list[str] = []
    done = scanned = 0
    for hit in _word_hits(lowered):
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
            if eq and value and not _DONE_RE.fullmatch(value):
                out[i] = f"{name}={_redacted(value)}"
            elif not eq and name.startswith("-") and i + 1 < len(out) and not out[i + 1].startswith("--"):
                if not _DONE_RE.fullmatch(out[i + 1]):
                    out[i + 1] = _redacted(out[i + 1])
                i += 1
        i += 1
    return out


def _join_argv(argv: Sequence[str]) -> str:
    """`shlex.join`, except that `[redacted hash:…]` markers stay unquoted (as `scrub` leaves them)."""
    return " ".join(
        "".join(
            part if _MARKER_RE.fullmatch(part) else shlex.quote(part)
            for part in _MARKER_SPLIT_RE.split(arg)
            if part
        )
        if "[redacted " in arg
        else shlex.quote(arg)
        for arg in argv
    )


class Scrubber:
    """Replaces secrets in text; learns the literal values of this session's credentials."""

    def __init__(self) -> None:
        self._learned: set[str] = set()
        self._learned_re: re.Pattern[str] | None = None
        self._learned_list: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self.generation = 0
        """Bumped whenever a new secret is learned (a cache of scrubbed texts is stale then)."""

    def learn(self, secret: str) -> None:
        """Remember a credential value so that any later occurrence of it is scrubbed."""
        secret = secret.strip()
        if secret.lower().startswith(("bearer ", "basic ")):
            secret = secret.split(None, 1)[1] if " " in secret else ""
        if len(secret) < 8 or secret in self._learned:
            return
        with self._lock:
            if len(self._learned) >= _MAX_LEARNED:
                return
            self._learned.add(secret)
            ordered = sorted(self._learned, key=len, reverse=True)
            self._learned_re = re.compile("|".join(re.escape(s) for s in ordered))
            self._learned_list = tuple(ordered)
            self.generation += 1

    def scrub(self, text: str | None) -> str | None:
        """`text` with every known secret replaced by `[redacted hash:…]` (idempotent)."""
        if not text:
            return text
        text = scrub_named_values(text, text.lower())  # first, so that a value is redacted whole
        learned = self._learned_re
        if learned is not None and any(s in text for s in self._learned_list):
            text = learned.sub(lambda m: _redacted(m.group(0)), text)
        for pattern in _patterns_for(text):
            text = pattern.sub(_redact_match, text)
        return text

    def scrub_command(self, command: str | Sequence[str] | None) -> str | None:
        """A command line (argv, or one string in shell syntax) as text to store: secret flag
        values and secret `NAME=VALUE` prefixes redacted, then everything `scrub` catches."""
        if command is None:
            return None
        if isinstance(command, str):
            try:
                argv = shlex.split(command)
            except ValueError:  # unbalanced quotes: text rules only
                return self.scrub(command)
            masked = mask_secret_args(argv)
            return self.scrub(command if masked == argv else _join_argv(masked))
        return self.scrub(_join_argv(mask_secret_args(command)))


def is_credential_header(name: str) -> bool:
    return bool(_CREDENTIAL_HEADER_RE.search(name))


def headers_json(headers: Iterable[tuple[str, str]], allowlist: frozenset[str], scrubber: Scrubber) -> str:
    """Headers as a JSON object: allowlisted values verbatim, others hashed.

    Names are lower-cased; a repeated header becomes a list. Credential-looking headers teach
    the scrubber their value so it never appears elsewhere either.
    """
    out: dict[str, str | list[str]] = {}
    for raw_name, value in headers:
        name = raw_name.lower()
        if name in allowlist:
            stored = scrubber.scrub(value) or ""
        else:
            if is_credential_header(name):
                scrubber.learn(value)
                if name == "cookie":
                    for part in value.split(";"):
                        scrubber.learn(part.partition("=")[2])
            stored = hash_value(value)
        previous = out.get(name)
        if previous is None:
            out[name] = stored
        elif isinstance(previous, list):
            previous.append(stored)
        else:
            out[name] = [previous, stored]
    return json.dumps(out, ensure_ascii=False)


def is_sensitive_query_param(name: str, sensitive: frozenset[str]) -> bool:
    """Whether a query parameter's value is hashed: configured, secret-named or a cloud signature."""
    lowered = name.lower()
    return lowered in sensitive or lowered in _ALWAYS_HASHED_QUERY or is_secret_name(name)


def redact_query(query: str, sensitive: frozenset[str], scrubber: Scrubber) -> str:
    """The query string with sensitive parameter values replaced by `hash:…` (order kept).

    `sensitive` holds the configured (lower-cased) names; secret-named parameters and cloud
    signatures (`X-Amz-Signature`, `X-Amz-Security-Token`, `X-Goog-Credential`, `sig`…) count too."""
    if not query:
        return query
    parts = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        if value and is_sensitive_query_param(key, sensitive):
            scrubber.learn(value)
            value = hash_value(value)
        else:
            value = scrubber.scrub(value) or ""
        parts.append(f"{quote(key, safe='')}={quote(value, safe=':[]')}")
    return "&".join(parts)
