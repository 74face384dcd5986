"""Secret-named values: what a key, variable, flag or parameter name says it holds.

`is_secret_name` decides from the name alone, by meaning: `pass`, `passwd`, `pwd`, `secret`,
`token`, `credential`, `auth`, `private key`, `api key` as a word or a suffix (`db_password`,
`DB_PASS`, `MYSQL_PWD`, `SSHPASS`, `-storepass`, `secretAccessKey` hold secrets; `max_tokens`,
`cache_key`, `password_file`, `PUBLIC_KEY`, `KEY_ID`, `TOKEN_URL`, `bypass`, `author` only look
alike). `scrub_named_values` redacts the values after such names in any text: JSON string values
at any escaping depth (`"k": "v"`, `\\"k\\": \\"v\\"`, …) whole, escaped quotes included;
`k=v` / `k: v` (env, ini, YAML, queries in URLs, connection strings); `--k v` and `--k=v`; and the
places `capsem.credential_places` knows (XML elements, name/value pairs, `setx`, netrc, CSV
columns), each value to the end its syntax gives it (`capsem.secret_values`); after a word that
says a credential follows, a random-looking token (`capsem.random_tokens`). `mask_secret_args`
does the same for an argv. Only string values are redacted, never numbers or nested objects
(usage counts and schemas stay).
"""

from __future__ import annotations

import bisect
import functools
import re
import shlex
from collections.abc import Callable, Sequence

from capsem import native
from capsem.credential_places import (
    ASSIGNING,
    LOOK_BACK,
    blank_assignment,
    csv_column_spans,
    paired_value_span,
    xml_element_span,
)
from capsem.literal_scan import SHORT_TEXT, LiteralPlaces, PatternEnds
from capsem.markers import MARKER_RE, outside_markers
from capsem.markers import redacted as _redacted
from capsem.random_tokens import LONG_TOKEN_RE, looks_random
from capsem.secret_values import DONE_RE, value_span

# --- secret-named keys ------------------------------------------------------------------------
# Every secret name contains one of these words (lower-cased); `is_secret_name` decides.
_NAME_WORDS = ("pass", "pwd", "secret", "token", "credential", "auth", "key", "signature")
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
                      "dict", "index", "i18n", "translation", "message", "parameter", "option", "setting",
                      "property", "attribute", "column", "field", "label", "tag", "metadata"}),
    "token": frozenset({"eos", "bos", "pad", "unk", "sep", "cls", "mask", "stop", "special", "start", "end"}),
}  # fmt: skip
# a last part that says how the secret is written down, not what it is
_ENCODING_LAST = frozenset({"data", "value", "b64", "base64", "hex", "pem", "raw", "str", "string", "text"})
_SECRET_SUBSTRINGS = ("passw", "passphrase", "secret", "credential", "authorization")
_SECRET_ARG_RE = re.compile(r"-{0,2}[A-Za-z_][\w.\-]*")
# English words (and programs) that end in `pass` but hold none: `bypass`, `compass`, `askpass`…
_NOT_A_PASS = frozenset({"bypass", "compass", "encompass", "overpass", "underpass", "trespass", "surpass",
                         "impass", "multipass", "onepass", "twopass", "firstpass", "secondpass", "singlepass",
                         "askpass", "sudoaskpass", "subpass", "renderpass", "mainpass", "lowpass", "highpass",
                         "bandpass", "allpass", "notpass", "nopass"})  # fmt: skip
# the last words that make a name a context for a random-looking token after it, even when the
# name alone holds no secret (`key`, `token`: "the key is 8Kq…", "token 8Kq…")
_CONTEXT_LAST = frozenset({"key", "keys", "token", "tokens", "secret", "secrets", "password", "passwords",
                           "pass", "passwd", "pwd", "passphrase", "credential", "credentials", "auth",
                           "apikey"})  # fmt: skip
_CONTEXT_GAP_RE = re.compile(
    r"""(?:\\*["'])?[ \t]*(?:(?::=|[:=]|->|=>|(?:is|was)(?=[ \t]))[ \t]*)?(?:\\*["'`(])?""", re.IGNORECASE
)
"""What may stand between a context word and its token: `key: `, `token = "`, `secret is `."""
_BLANKS_THEN_WORD_RE = re.compile(r"[ \t]+(?![ \t:=])")
_BETWEEN_RE = re.compile(r"""(?:\s+-[\w\-]+)*[\s"'\\]+|\s+[^\s"'\\]+[\s"'\\]+""")
"""Between a word that assigns and the name: flags, or one word (`login u`), and blanks or quotes."""
_PROSE_AFTER_RE = re.compile(r"[ \t]+(?!(?:is|was|IS|Is|Was)\b)[A-Za-z]{1,19}\b(?![\w.\-/+~=])")
"""Blanks and a plain word after a name: no value follows, unless a command assigns it (`setx`)."""
_PAIR_BEFORE = frozenset("\"' \t:=\\")


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
    if last in ("apikey", "privatekey", "secretkey", "accesskey") or last.endswith(("auth", "pwd")):
        return (
            last != "oldpwd"
        )  # `DB_PWD`, `MYSQL_PWD`, `REDISCLI_AUTH` (`PWD` holding a path: see secret_values)
    if last.endswith("pass") and last not in _NOT_A_PASS:
        return True  # `DB_PASS`, `SSHPASS`, `-storepass`
    if last == "key":
        return len(parts) > 1
    return last == "signature" and ("amz" in parts or "goog" in parts)


_WORD_STARTS_RE = re.compile("(?=(?:" + "|".join(_NAME_WORDS) + "))")
_WORD_PLACES = LiteralPlaces(_NAME_WORDS)
_ASSIGNING_RE = re.compile("|".join(f"(?i:{p})" if caseless else p for p, caseless in ASSIGNING))
_ASSIGNING_ENDS = PatternEnds(ASSIGNING)


def _places(text: str, data: bytes | None, starts: re.Pattern[str], places: LiteralPlaces) -> list[int]:
    """Sorted positions of some ASCII words in `text`, any case: one regex scan of the
    lower-cased text for a short one, a Hyperscan scan of its UTF-8 `data` for a long one (see
    `SHORT_TEXT`). (The words are ASCII, so one found only through a non-ASCII letter's lower case,
    as the Kelvin sign's `k`, could never start a name: both ways find the same names.)"""
    if len(text) <= SHORT_TEXT:
        lowered = text.lower()
        if len(lowered) != len(text):  # a character whose lower case is longer (İ): positions differ
            lowered = text.translate(_ASCII_LOWER)  # names are ASCII
        return [m.start() for m in starts.finditer(lowered)]
    return places.places(text, text.encode("utf-8", "surrogatepass") if data is None else data)


def _word_hits(text: str, data: bytes | None) -> list[int]:
    """Sorted positions of the name words in `text`."""
    return _places(text, data, _WORD_STARTS_RE, _WORD_PLACES)


class _Assigning:
    """Where the commands that assign a value after blanks end in a text (`setx`, `set -gx`,
    `aws configure set`, netrc's `login`…), found once per text (Hyperscan for a long one) and
    only when a name followed by a blank asks."""

    def __init__(self, text: str, data: bytes | None) -> None:
        self._text, self._data = text, data
        self._ends: list[int] | None = None

    def ends_if_known(self) -> list[int] | None:
        """The ends, if a name asked for them already (the compiled path hands a name back otherwise)."""
        return self._ends

    def near(self, name_start: int) -> bool:
        """Whether the closest such command before `name_start` ends right before it (flags
        between allowed), or one word before (netrc's `login u`, nmcli's `connect SSID`)."""
        if self._ends is None:
            text = self._text
            if len(text) <= SHORT_TEXT:
                self._ends = [m.end() for m in _ASSIGNING_RE.finditer(text)]
            else:
                data = text.encode("utf-8", "surrogatepass") if self._data is None else self._data
                self._ends = _ASSIGNING_ENDS.ends(text, data)
        i = bisect.bisect_right(self._ends, name_start) - 1
        if i < 0 or self._ends[i] < name_start - LOOK_BACK:
            return False
        return _BETWEEN_RE.fullmatch(self._text, self._ends[i], name_start) is not None


def scrub_named_values(text: str, data: bytes | None = None) -> str:
    """`text` with the values of secret-named keys, assignments, flags and elements redacted, the
    columns of CSV files that name a secret one, and random-looking tokens after a word that says
    a credential follows (`the key is 8Kq…`).

    Only the places where a name word occurs are looked at (`data` = `text` in UTF-8, if the
    caller has it): from each, back to the start of its name (and its quotes), then `_NAMED_RE`.
    On a long text the compiled path (`capsem.native.named_next`) moves past the names this loop
    would only move past (most of them: `max_tokens`, prose), handing
    the others to it."""
    spans: list[tuple[int, int]] = []
    scanned = 0
    assigning = _Assigning(text, data)
    hits = _word_hits(text, data)
    next_name = _native_names(text, hits, assigning) if native.named_next and len(text) > SHORT_TEXT else None
    next_name = next_name or _names(text, hits)
    while (place := next_name(scanned)) is not None:
        start, end = place
        name = text[start:end]
        secret = is_secret_name(name)
        context = secret or _is_context(name)
        _remember_verdict(name, 2 if secret else 1 if context else 0)
        if not context:
            scanned = end  # most hits: max_tokens, input_tokens, keyboard…
            continue
        if name[0] != "-" and _PROSE_AFTER_RE.match(text, end) and not assigning.near(start):
            found, scanned = None, end  # a name, then a plain word: prose (decided here, cheaply)
        else:
            found, scanned = _named_value(text, start, end, assigning) if secret else (None, end)
            if found is None:
                found = _random_token_after(text, end)
        if found is not None:
            spans.append(found)
            scanned = max(scanned, found[1])
        elif secret and text.find(",", max(0, start - 60), end + 60) >= 0:
            columns, after = csv_column_spans(text, start, is_secret_name)
            spans += columns
            scanned = max(scanned, after)
    if not spans:
        return text
    out: list[str] = []
    done = 0
    for span_start, span_end in outside_markers(text, spans):
        if span_start >= done:
            out += [text[done:span_start], _redacted(text[span_start:span_end])]
            done = span_end
    return "".join(out) + text[done:]


NextName = Callable[[int], "tuple[int, int] | None"]
"""Given where the scan is, the (start, end) of the name around the next name word at or after it."""


def _names(text: str, hits: list[int]) -> NextName:
    """The names around the name words of `text` (at `hits`), in order (the reference for
    `_native_names`)."""

    def next_name(scanned: int) -> tuple[int, int] | None:
        i = bisect.bisect_left(hits, scanned)  # a hit before is inside a name or value looked at
        if i == len(hits):
            return None
        hit = start = hits[i]
        while start > 0 and text[start - 1] in _NAME_CHARS:
            start -= 1
        return start, _NAME_RUN_RE.match(text, hit).end()  # type: ignore[union-attr]

    return next_name


_VERDICTS: dict[str, int] = {}
"""What `scrub_named_values` made of each name it met: 0 nothing, 1 a word that announces a token,
2 a secret name (read by the compiled path, which skips names it knows need nothing)."""


def _remember_verdict(name: str, verdict: int) -> None:
    if len(_VERDICTS) >= 65536:  # names come from traffic: keep the table bounded
        _VERDICTS.clear()
    _VERDICTS[name] = verdict


def _native_names(text: str, hits: list[int], assigning: _Assigning) -> NextName:
    """`_names`, less the names that `scrub_named_values` would only move past (`named_next`)."""
    named_next = native.named_next
    assert named_next is not None

    def next_name(scanned: int) -> tuple[int, int] | None:
        found = named_next(text, hits, scanned, _VERDICTS, assigning.ends_if_known(), LOOK_BACK)
        return None if found is None else (found[1], found[2])

    return next_name


def _named_value(
    text: str, start: int, end: int, assigning: _Assigning
) -> tuple[tuple[int, int] | None, int]:
    """(the span of the value that the secret name `text[start:end]` announces, or None; where the
    scan goes on)."""
    before = text[start - 1] if start else ""
    if before == "<":
        element = xml_element_span(text, start, end)
        if element is not None:
            return element, element[1]
    if before in _PAIR_BEFORE:
        paired = paired_value_span(text, start, end)
        if paired is not None:
            return paired, paired[1]
    if (
        _BLANKS_THEN_WORD_RE.match(text, end)
        and text[start] != "-"
        and not _blank_assigned(text, start, assigning)
    ):
        return None, end  # a name, then a word: prose (the common case, decided here cheaply)
    m = None
    if before in ('"', "'"):
        quoted = start - 1
        while quoted > 0 and text[quoted - 1] == "\\":
            quoted -= 1
        while m is None and quoted < start:  # the longest quote prefix that closes the same way
            m = _NAMED_RE.match(text, quoted)
            quoted += 1
    m = m or _NAMED_RE.match(text, start)
    if m is None:  # no separator after the name, or glued to what precedes it
        return None, end
    return _secret_span(text, m, assigning), m.end()


def _blank_assigned(text: str, name_start: int, assigning: _Assigning) -> bool:
    return assigning.near(name_start) and blank_assignment(text, name_start)


def _secret_span(text: str, m: re.Match[str], assigning: _Assigning) -> tuple[int, int] | None:
    """The span of the value after a `_NAMED_RE` match of a secret name, if there is one to redact."""
    name, quote_prefix, sep = m.group("name"), m.group("q"), m.group("sep")
    separator = sep.strip()
    if not separator:  # blanks separate a `--flag VALUE`, and a name after `setx`, netrc's `login`…
        if name.startswith("-"):
            if quote_prefix or text.startswith("-", m.end()):
                return None
        elif quote_prefix or not _blank_assigned(text, m.start("name"), assigning):
            return None
    elif separator == ":" and not quote_prefix and sep[-1] == ":" and "-" not in name:
        return None  # `name:value` without a blank is a prefixed id (`tiktoken:cl100k_base`, `secrets:read`)
    in_query = m.start("name") > 0 and text[m.start("name") - 1] in "?&"
    return value_span(text, m.end(), name, bool(quote_prefix), in_query)


@functools.lru_cache(maxsize=4096)
def _is_context(name: str) -> bool:
    """Whether a random-looking token after `name` is a credential: a secret name (`DB_PASS`), or
    one of the words alone (`key`, `token`; not `public_key`, `cache_key`)."""
    return is_secret_name(name) or name.lower().strip("-_.") in _CONTEXT_LAST


def _random_token_after(text: str, pos: int) -> tuple[int, int] | None:
    """The random-looking token (`capsem.random_tokens`) right after `pos` (the end of a word that
    says a credential follows), past blanks, a quote, `:`, `=`, `is` or `was`, if there is one."""
    gap = _CONTEXT_GAP_RE.match(text, pos)
    token = LONG_TOKEN_RE.match(text, gap.end()) if gap is not None else None
    if token is not None and looks_random(token.group(0)):
        return token.span()
    return None


def random_token_spans(text: str) -> list[tuple[int, int]]:
    """Where the random-token rule alone redacts in `text`: the tokens after every word that says
    a credential follows, whether or not another pass would redact them too (what
    `benchmarks/entropy_false_positives.py` counts on real code and prose)."""
    spans = []
    for hit in _word_hits(text, None):
        start = hit
        while start > 0 and text[start - 1] in _NAME_CHARS:
            start -= 1
        end = _NAME_RUN_RE.match(text, hit).end()
        if _is_context(text[start:end]):
            found = _random_token_after(text, end)
            if found is not None and (not spans or found != spans[-1]):
                spans.append(found)
    return spans


def mask_secret_args(argv: Sequence[str]) -> list[str]:
    """argv with the values of secret flags (`--password V`, `--token=V`) and secret `NAME=V`
    arguments (environment prefixes) redacted."""
    out = list(argv)
    i = 0
    while i < len(out):
        if _shell_script_at(out, i):  # `sh -c 'DB_PASS=x cmd'`: a command line of its own
            out[i] = _masked_script(out[i])
            i += 1
            continue
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


_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "busybox"})


def _shell_script_at(argv: Sequence[str], i: int) -> bool:
    """Whether argv[i] is the script a shell runs (`bash -c SCRIPT`, `sh -lc SCRIPT`)."""
    if i < 2 or not argv[i - 1].startswith("-") or argv[i - 1].startswith("--") or "c" not in argv[i - 1]:
        return False
    return any(word.rsplit("/", 1)[-1] in _SHELLS for word in argv[: i - 1])


def _masked_script(script: str) -> str:
    """A shell script's secret flags and assignments masked as a command line's are (kept as
    written when nothing is masked or it does not parse: the text rules still read it)."""
    try:
        words = shlex.split(script)
    except ValueError:
        return script
    masked = mask_secret_args(words)
    return script if masked == words else join_argv(masked)


def join_argv(argv: Sequence[str]) -> str:
    """`shlex.join`, except that `[redacted hash:…]` markers are not quoted apart: a word is quoted
    as a whole, as it was (`sh -c 'DB_PASS=[redacted hash:…] make'`), a lone marker not at all."""
    return " ".join(_quoted(arg) for arg in argv)


def _quoted(arg: str) -> str:
    if "[redacted " not in arg:
        return shlex.quote(arg)
    markers: list[str] = []

    def hold(match: re.Match[str]) -> str:
        markers.append(match[0])
        return f"CAPSEMMARKER{len(markers) - 1}X"

    quoted = shlex.quote(MARKER_RE.sub(hold, arg))
    return re.sub(r"CAPSEMMARKER(\d+)X", lambda m: markers[int(m[1])], quoted)
