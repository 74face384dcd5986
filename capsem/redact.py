"""Keeping secrets off disk: header hashing, query redaction and secret scrubbing.

Rules (the project's contract): a short allowlist of harmless headers is stored verbatim; every
other header value becomes `hash:` + 12 hex chars of its keyed hash (`capsem.markers`: the same
value gives the same marker in this installation, a wordlist cannot give it back). Sensitive query
parameters (the configured ones, secret-named ones, cloud signatures) are hashed the same way.
Every text that reaches a disk goes through `Scrubber.scrub` (command lines through
`Scrubber.scrub_command`, streamed bodies through `Scrubber.scrub_stream`). Its passes read what
the text means (`capsem.escapes`: JSON's and URLs' escapes decoded, each redaction written back
over the raw escapes it covers) and replace with `[redacted hash:…]`, in this order:

1. the values in places that hold credentials (`capsem.secret_names`): after names that mean a
   secret (`pass`, `pwd`, `secret`, `token`, `credential`, `auth`, `*_key`… as a word or a suffix)
   in every syntax (JSON at any escaping depth, `k=v`, `k: v`, flags, `setx`/`ENV`/`aws configure
   set`, XML elements, name/value pairs, netrc, CSV secret columns: `capsem.credential_places`),
   each to the end its syntax gives it (`capsem.secret_values`), and random-looking tokens after
   a credential word (`capsem.random_tokens`); `.pgpass` lines;
2. any credential value seen in this session's credential headers or query parameters (learned);
3. capsem's own patterns: well-known key shapes (`sk-ant-…`, `sk-…`, `AIza…`, GitHub, GitLab,
   Slack, AWS, npm, PyPI, Hugging Face and Stripe keys, JWTs, bearer tokens), private-key PEM
   blocks (also with escaped newlines, or cut off), webhook URLs (also as a bare path), URL
   passwords (`postgres://u:PASSWORD@h`, also JSON-escaped `:\\/\\/`), Azure SAS signatures (also
   after `\\u0026`), Telegram bot tokens in paths, and passwords on command lines that no secret
   name announces (`capsem.command_passwords`: `curl -u user:PASSWORD`, `mysql -pPASSWORD`,
   `redis-cli -a`, `sqlcmd -P`, `sshpass -p`, `docker login -p`, `htpasswd -b`…);
4. cookie values in `Cookie:` / `Set-Cookie:` lines and curl's `-b`;
5. the credential shapes of the public gitleaks rule set and capsem's own rule file, plus the
   configured ones (`capsem.secret_rules`).

Only string values of JSON keys are redacted, never numbers, so usage counts (`"input_tokens": 12`)
survive, and names that only look alike are left alone (`max_tokens`, `token_count`, `cache_key`,
`token_type`, `password_file`). The scrubber runs on every stored string, so each pass runs only
when the text holds a literal or keyword that every one of its matches contains: one Hyperscan
pass over the text decides (`capsem.literal_scan`).
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote

from capsem.command_passwords import COMMAND_PATTERNS
from capsem.credential_places import pgpass_spans
from capsem.escapes import ascii_view, scrub_decoded
from capsem.literal_scan import SHORT_TEXT, LiteralPlaces, LiteralSet, RegexPrefilter, ascii_prefilter_regex
from capsem.markers import MARKER_RE, hash_value, outside_markers
from capsem.markers import redacted as _redacted
from capsem.secret_names import (
    _NAME_WORDS,
    DONE_RE,
    is_secret_name,
    join_argv,
    mask_secret_args,
    scrub_named_values,
)
from capsem.secret_rules import (
    DEFAULT_DISABLED,
    RuleSet,
    allowed,
    load_rules,
    python_regex,
    secret_span,
    shannon_entropy,
)
from capsem.stream_scrub import marker_spans, scrub_stream

if TYPE_CHECKING:
    from capsem.settings import CaptureSettings

# (literals one of which every match contains, pattern): a pattern runs only on a text holding one
# of its literals (one Hyperscan pass looks for all of them, `_Prefilter`). A pattern with a group
# named `s` has only that group redacted (the rest says what it was).
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
    (("_live_",), r"\b(?:sk|rk)_live_[A-Za-z0-9]{16,}"),  # Stripe
    # the password of a URL (`postgres://app:PASSWORD@db/app`, `https://x-access-token:TOKEN@github.com`),
    # also with JSON's escaped slashes (PHP's `postgres:\/\/app:PASSWORD@db`)
    (("://", ":\\/\\/"), r":(?:\\?/){2}[^\s/:@\"'\\]*:(?!\[redacted )(?P<s>[^\s/@\"'\\]+)@"),
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
    # an Azure SAS signature, also after Go's JSON escape of `&` (`\u0026sig=`)
    (("sig=",), r"sig=(?:(?<=[?&;]sig=)|(?<=\\u0026sig=))(?!\[redacted )(?P<s>[^&\s\"'\\#<>]+)"),
    (("/bot",), r"/bot(?P<s>[0-9]{6,12}:[A-Za-z0-9_\-]{30,})"),  # a Telegram bot token in a request path
    *COMMAND_PATTERNS,  # passwords on command lines that no secret-named flag announces
]
_LITERAL_RE = re.compile(r"(?:[A-Za-z0-9_\-]|\\\.)+")
"""The literal a pattern part starts with (word characters, `-`, an escaped dot)."""


def _split_literal(part: str) -> tuple[str, str]:
    """(the literal `part` starts with, the rest); a quantified last character stays in the rest."""
    m = _LITERAL_RE.match(part)
    if m is None:
        return "", part
    literal = m.group(0)
    if part[m.end() : m.end() + 1] in ("?", "*", "+", "{"):
        literal = literal[:-2] if literal.endswith("\\.") else literal[:-1]
    return literal, part[len(literal) :]


_CLASS_RE = re.compile(r"\[(?:\\.|[^\]\\])*\]")


def _alternatives(group: str) -> list[str] | None:
    """The alternatives of a `(?:…)` group's inside, or None if it holds groups or `|` in a class."""
    plain = _CLASS_RE.sub("", group)
    if "(" in plain or "[" in plain or "\\|" in group or plain.count("|") != group.count("|"):
        return None
    return group.split("|")


def fast_start(pattern: str) -> str:
    """`pattern` with its leading `\\b` moved after the literal that follows, as a lookbehind:
    `\\bsk-…` becomes `sk-(?<!\\wsk-)…`. Both match exactly the same, but Python's `re` tries a
    pattern that starts with `\\b` at every position of the text (~60 MiB/s), and one that starts
    with a literal only where the literal is (its fast search): 20-60x faster on a long text.
    A pattern it cannot rewrite (no literal after `\\b`) is returned as it is."""
    if not pattern.startswith("\\b"):
        return pattern
    rest = pattern[2:]
    if rest.startswith("(?:"):
        end = rest.find(")")
        alternatives = _alternatives(rest[3:end]) if end > 0 else None
        if not alternatives:
            return pattern
        fast = []
        for alternative in alternatives:
            literal, tail = _split_literal(alternative)
            if not literal:
                return pattern
            fast.append(f"{literal}(?<!\\w{literal}){tail}")
        return "(?:" + "|".join(fast) + ")" + rest[end + 1 :]
    literal, tail = _split_literal(rest)
    return f"{literal}(?<!\\w{literal}){tail}" if literal else pattern


_COMPILED = [(literals, re.compile(fast_start(pattern))) for literals, pattern in _PATTERNS]


_CREDENTIAL_HEADER_RE = re.compile(r"(?i)auth|token|secret|key|cookie|session|credential|password")
# query parameters hashed whatever the configuration says (cloud request signatures)
_ALWAYS_HASHED_QUERY = frozenset({"sig", "x-amz-signature", "x-goog-signature"})


def _secret_of(m: re.Match[str]) -> tuple[int, int]:
    """Where the match's secret is: group `s` if the pattern has one, else all of it."""
    if "s" not in m.re.groupindex or m.start("s") < 0:
        return m.span()
    return m.span("s")


class _Learned:
    """The literal credential values of this session, found however many there are (a rotating
    cookie adds one per call): one Hyperscan pass says which occur, `str.find` says where. A small
    set is recompiled when a value is learned and merged into the large one when it reaches an
    eighth of it, so learning stays cheap. Nothing is ever dropped: a full table would let a
    later credential through."""

    def __init__(self) -> None:
        self.values: set[str] = set()
        self.order: list[str] = []
        self.wide: list[str] = []
        """The values that are not ASCII."""
        self._large: list[str] = []
        self._small: list[str] = []
        self._large_set = LiteralSet([])
        self._sets: tuple[tuple[list[str], LiteralSet], ...] = ()

    def add(self, value: str) -> bool:
        if value in self.values:
            return False
        self.values.add(value)
        self.order.append(value)
        if not value.isascii():
            self.wide.append(value)
        self._small.append(value)
        if len(self._small) >= max(64, len(self._large) // 8):
            self._large += self._small
            self._small = []
            self._large_set = LiteralSet([(w, False) for w in self._large])
        small = LiteralSet([(w, False) for w in self._small])
        self._sets = tuple((words, found) for words, found in ((self._large, self._large_set), (self._small, small))
                           if words)  # fmt: skip
        return True

    def wide_spans(self, text: str) -> list[tuple[int, int]]:
        """Where the learned values that are not ASCII occur in `text` (an ASCII view has none)."""
        return [(at, at + len(word)) for word in self.wide for at in _occurrences(text, word)]

    def spans(self, text: str, data: bytes) -> list[tuple[int, int]]:
        """Where learned values occur in `text` (`data`: its UTF-8)."""
        spans = []
        for words, literals in self._sets:
            for i in literals.found(data):
                word = words[i]
                spans += [(at, at + len(word)) for at in _occurrences(text, word)]
        return spans


def _occurrences(text: str, word: str) -> Iterator[int]:
    """Where `word` starts in `text`, left to right, without overlap."""
    at = text.find(word)
    while at >= 0:
        yield at
        at = text.find(word, at + len(word))


def _disjoint(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` sorted, overlapping ones merged into one."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def _redact_spans(text: str, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return text
    out, done = [], 0
    for start, end in outside_markers(text, _disjoint(spans)):
        out += [text[done:start], _redacted(text[start:end])]
        done = end
    return "".join(out) + text[done:] if out else text


# --- cookies: `Cookie:` / `Set-Cookie:` lines in tool results, curl's `-b`/`--cookie` -----------
_COOKIE_RE = re.compile(
    r"(?:(?:(?<![\w-])|(?<=\\[nrt]))(?:set-)?cookie(?:\\*[\"'])?[ \t]*:[ \t]*(?:\\*[\"'])?"
    r"|\bcurl\b[^\n|;&]{0,400}?\s(?:-b|--cookie)(?:[ \t]+|=)(?:\\*[\"'])?)"
    r"(?P<v>[^\r\n\"'\\]+)",
    re.IGNORECASE,
)
_COOKIE_PAIR_RE = re.compile(r"(?:^|;)[ \t]*(?P<name>[^=;\s]+)[ \t]*=[ \t]*(?P<value>[^;]*)")
_COOKIE_ATTRIBUTES = frozenset({"path", "domain", "expires", "max-age", "samesite", "secure", "httponly",
                                "priority", "partitioned", "version", "comment"})  # fmt: skip


_COOKIE_PLACES = LiteralPlaces(("cookie", "curl"))


def _cookie_lines(text: str, data: bytes | None) -> Iterator[re.Match[str]]:
    """`_COOKIE_RE.finditer(text)`; given `data` (`text` in UTF-8), only where a match can start
    (`cookie`, `set-cookie`, `curl`, found by Hyperscan) is tried, not every position."""
    if data is None or len(text) <= SHORT_TEXT:
        yield from _COOKIE_RE.finditer(text)
        return
    done = 0
    for place in _COOKIE_PLACES.places(text, data):
        starts = (place - 4, place) if place >= 4 and text[place - 4 : place].lower() == "set-" else (place,)
        for start in starts:
            line = _COOKIE_RE.match(text, start) if start >= done else None
            if line is not None:
                done = line.end()
                yield line
                break


def _cookie_spans(text: str, data: bytes | None = None) -> list[tuple[int, int]]:
    """The values of the cookies in `Cookie:` / `Set-Cookie:` lines and curl's `-b` (attributes kept)."""
    spans = []
    for line in _cookie_lines(text, data):
        base = line.start("v")
        for pair in _COOKIE_PAIR_RE.finditer(line.group("v")):
            value = pair.group("value").rstrip()
            if (
                value
                and pair.group("name").lower() not in _COOKIE_ATTRIBUTES
                and not DONE_RE.fullmatch(value)
            ):
                spans.append((base + pair.start("value"), base + pair.start("value") + len(value)))
    return spans


def _rule_spans(text: str, rules: RuleSet, wanted: Iterable[int]) -> list[tuple[int, int]]:
    """Where the secrets of the `wanted` rules of `rules` are in `text` (`capsem.secret_rules`)."""
    done = [m.span() for m in MARKER_RE.finditer(text)]
    spans = []
    for i in wanted:
        rule = rules.rules[i]
        for m in rule.regex.finditer(text):
            span = secret_span(rule, m)
            if span is None or any(s < span[1] and span[0] < e for s, e in done):
                continue
            secret = text[span[0] : span[1]]
            if rule.entropy and shannon_entropy(secret) < rule.entropy:
                continue
            line_start = text.rfind("\n", 0, m.start()) + 1
            line_end = text.find("\n", m.end())
            line = text[line_start : line_end if line_end >= 0 else len(text)]
            allows = (*rule.allows, rules.allow) if rules.allow else rule.allows
            if any(allowed(a, secret, m.group(0), line) for a in allows):
                continue
            spans.append(span)
    return spans


class _Prefilter:
    """Which passes a text calls for, from one `LiteralSet` scan: the capsem patterns whose
    literals occur, the rules whose keywords occur (lower-cased), cookies, secret names."""

    def __init__(self, rules: RuleSet) -> None:
        literals: list[tuple[str, bool]] = []
        self._actions: list[tuple[str, tuple[int, ...]]] = []
        for lit in sorted({lit for literals_, _ in _PATTERNS for lit in literals_}):
            literals.append((lit, False))
            self._actions.append(
                ("pattern", tuple(i for i, (lits, _) in enumerate(_PATTERNS) if lit in lits))
            )
        by_word: dict[str, list[int]] = {}
        for i, rule in enumerate(rules.rules):
            for word in rule.keywords:
                by_word.setdefault(word, []).append(i)
        for word, ids in by_word.items():
            literals.append((word, True))
            self._actions.append(("rule", tuple(ids)))
        for word in ("cookie", "curl", *_NAME_WORDS):  # `curl -b` need not say "cookie"
            literals.append((word, True))
            self._actions.append(("cookie" if word in ("cookie", "curl") else "name", ()))
        self.always = tuple(i for i, r in enumerate(rules.rules) if not r.keywords)
        # the shipped rules' databases are kept for the next process; a user's rules are not copied
        shipped = set(default_rules().rules)
        self._set = LiteralSet(literals, keep=all(rule in shipped for rule in rules.rules))
        self.regexes = tuple(
            RegexPrefilter(rule.pattern, python_regex, keep=rule in shipped) for rule in rules.rules
        )
        """Per rule: could its regex match at all (asked only of rules whose keywords occur)."""
        self.patterns = _PATTERN_PREFILTERS
        """Per capsem pattern: the same question, asked only of ASCII texts (`ascii_prefilter_regex`)."""

    def passes(self, data: bytes) -> tuple[list[int], list[int], bool, bool]:
        """(capsem patterns to run, rules to run, cookies?, secret names?) for a text (UTF-8)."""
        patterns: set[int] = set()
        rules: set[int] = set(self.always)
        cookie = named = False
        for i in self._set.found(data):
            kind, ids = self._actions[i]
            if kind == "pattern":
                patterns.update(ids)
            elif kind == "rule":
                rules.update(ids)
            elif kind == "cookie":
                cookie = True
            else:
                named = True
        return sorted(patterns), sorted(rules), cookie, named


_PATTERN_PREFILTERS = tuple(
    RegexPrefilter(pattern, ascii_prefilter_regex, keep=True) for _, pattern in _PATTERNS
)


@functools.lru_cache(maxsize=8)
def _prefilter(rules: RuleSet) -> _Prefilter:
    return _Prefilter(rules)


def default_rules() -> RuleSet:
    """The shipped rule set: gitleaks' rules (less `DEFAULT_DISABLED`) and capsem's own."""
    return rules_for((), DEFAULT_DISABLED)


@functools.lru_cache(maxsize=8)
def _rules_cached(extra: tuple[tuple[tuple[str, Any], ...], ...], disabled: frozenset[str]) -> RuleSet:
    return load_rules([dict(rule) for rule in extra], disabled)


def rules_for(extra: Sequence[Mapping[str, Any]], disabled: Iterable[str]) -> RuleSet:
    """The shipped rules without `disabled`, plus `extra` (`redaction.rules`); built once per set."""
    frozen = tuple(
        tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in r.items())) for r in extra
    )
    return _rules_cached(frozen, frozenset(disabled))


_MAX_ROUNDS = 4
SHORT_TEXT_CHARS = 512
"""Texts up to this long are scrubbed once per generation of the scrubber (`Scrubber.scrub`):
hosts, paths, header values and sets, an agent's same few again and again."""
SHORT_TEXTS_KEPT = 4096
"""At most this many short texts' results are kept (then they are forgotten together)."""
SETTLE_RADIUS = 2048
"""How far around each marker (to whole lines) the passes run again to say a long text holds."""


def marker_windows(text: str, radius: int = SETTLE_RADIUS) -> list[tuple[int, int]]:
    """The whole lines within `radius` characters of each marker of `text`, overlapping ones merged."""
    windows: list[tuple[int, int]] = []
    for m in MARKER_RE.finditer(text):
        start = text.rfind("\n", 0, max(m.start() - radius, 0)) + 1
        end = text.find("\n", min(m.end() + radius, len(text))) + 1 or len(text)
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(end, windows[-1][1]))
        else:
            windows.append((start, end))
    return windows


def scrubber_for(capture: CaptureSettings) -> Scrubber:
    """A scrubber with the configured rules (`redaction.rules`, `redaction.disabled_rules`)."""
    return Scrubber(rules_for([r.as_gitleaks() for r in capture.secret_rules], capture.disabled_rules))


class Scrubber:
    """Replaces secrets in text; learns the literal values of this session's credentials."""

    def __init__(self, rules: RuleSet | None = None) -> None:
        self._learned = _Learned()
        self._lock = threading.Lock()
        self.rules = default_rules() if rules is None else rules
        self._prefilter = _prefilter(self.rules)
        self.generation = 0
        """Bumped whenever a new secret is learned (a cache of scrubbed texts is stale then)."""
        self._short: dict[str, tuple[int, str]] = {}
        """Short text -> (the generation it was scrubbed in, the result)."""

    def learn(self, secret: str) -> None:
        """Remember a credential value so that any later occurrence of it is scrubbed."""
        secret = secret.strip()
        if secret.lower().startswith(("bearer ", "basic ")):
            secret = secret.split(None, 1)[1] if " " in secret else ""
        if len(secret) < 8 or secret in self._learned.values:
            return
        with self._lock:
            if self._learned.add(secret):
                self.generation += 1

    def scrub(self, text: str | None) -> str | None:
        """`text` with every known secret replaced by `[redacted hash:…]` (idempotent: a marker can
        end a word that hid a key before, `AKIA…` glued to a token, so the passes run again on a
        changed text until it holds). A short text is scrubbed once per generation: a secret
        learned since makes the result it kept stale (`SHORT_TEXT_CHARS`)."""
        if not text:
            return text
        if len(text) > SHORT_TEXT_CHARS:
            return scrub_decoded(text, self._passes, _MAX_ROUNDS, self._holds)
        generation = self.generation  # read first: a secret learned meanwhile leaves this result stale
        kept = self._short.get(text)
        if kept is not None and kept[0] == generation:
            return kept[1]
        done = scrub_decoded(text, self._passes, _MAX_ROUNDS, self._holds)
        if len(self._short) >= SHORT_TEXTS_KEPT:
            self._short.clear()
        self._short[text] = (generation, done)
        return done

    def _holds(self, scrubbed: str) -> bool:
        """Whether a long text just scrubbed holds as it is: every pass, run again on the lines
        around its markers only, changes nothing there. A redaction can make a secret readable
        only beside it (a marker ends the word a key was glued to); a text whose windows are half
        of it or more, or in which one changes, gets a whole round more."""
        windows = marker_windows(scrubbed)
        if sum(end - start for start, end in windows) * 2 > len(scrubbed):
            return False
        return all(self._passes(scrubbed[start:end]) == scrubbed[start:end] for start, end in windows)

    def _passes(self, text: str) -> str:
        """Every pass once over `text` as it reads (`scrub` gives it the decoded view)."""
        data = text.encode("utf-8", "surrogatepass")
        given = text
        patterns, rules, cookie, named = self._prefilter.passes(data)
        if patterns and len(data) == len(text) and len(text) > SHORT_TEXT:  # ASCII, long: ask Hyperscan first
            patterns = [i for i in patterns if self._prefilter.patterns[i].maybe(data)]
        if named:
            text = scrub_named_values(text, data)  # first, so that a value is redacted whole
        text = _redact_spans(text, self._learned.spans(text, data))
        for i in patterns:
            text = _redact_spans(text, [_secret_of(m) for m in _COMPILED[i][1].finditer(text)])
        if cookie:
            cookie_data = data if text is given else text.encode("utf-8", "surrogatepass")
            text = _redact_spans(text, _cookie_spans(text, cookie_data))
        text = _redact_spans(text, pgpass_spans(text, data))
        wanted = [i for i in rules if self._prefilter.regexes[i].maybe(data)]
        return _redact_spans(text, _rule_spans(text, self.rules, wanted)) if wanted else text

    def scrub_stream(self, text: str | None) -> str | None:
        """A streamed body (SSE, NDJSON): its framing and other fields scrubbed, and each
        channel's deltas joined and cut free of their secrets (`capsem.stream_scrub`)."""
        return scrub_stream(text, self.scrub, self.secret_spans) if text else text

    def secret_spans(self, text: str) -> list[tuple[int, int]] | None:
        """Where `scrub` finds secrets in `text` read as ASCII (`capsem.escapes.ascii_view`: each
        non-ASCII character one that continues a value and ends a key, as in an escaped body's
        view), and this session's non-ASCII credentials where they occur; sorted, apart from the
        markers already there; None when they cannot be placed."""
        view = ascii_view(text)
        scrubbed = self.scrub(view) or view
        spans = marker_spans(view, scrubbed) if scrubbed != view else []
        if spans is None:
            return None
        if view is not text:
            spans += self._learned.wide_spans(text)
        return outside_markers(text, _disjoint(spans))

    def learned_since(self, generation: int) -> list[str]:
        """The values learned after `generation` (oldest first)."""
        return self._learned.order[generation:]

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
            return self.scrub(command if masked == argv else join_argv(masked))
        return self.scrub(join_argv(mask_secret_args(command)))


def is_credential_name(name: str) -> bool:
    """Whether an environment variable's name suggests it holds a credential (broad: its value
    is only learned when it looks like one, see `assembler.procdiag.sampler`)."""
    return bool(_CREDENTIAL_HEADER_RE.search(name))


_STREAM_TYPES = ("event-stream", "ndjson", "jsonl", "json-seq")


def is_stream_type(content_type: str | None) -> bool:
    """Whether a body of this content type is a stream of deltas (SSE, NDJSON…)."""
    lowered = (content_type or "").lower()
    return any(kind in lowered for kind in _STREAM_TYPES)


def carries_credential(header: str) -> bool:
    """Whether a header's value is a credential the scrubber should learn: `Authorization`,
    cookies, sessions and secret-named headers (`x-api-key`, `x-auth-token`), never a header that
    only mentions tokens (`anthropic-ratelimit-tokens-reset`: a timestamp that changes every answer)."""
    name = header.lower()
    return "cookie" in name or "session" in name or is_secret_name(name)


def learn_credentials(headers: Iterable[tuple[str, str]], scrubber: Scrubber) -> None:
    """Teach `scrubber` the value of every credential-looking header (cookies pair by pair)."""
    for raw_name, value in headers:
        name = raw_name.lower()
        if carries_credential(name):
            scrubber.learn(value)
            if name in ("cookie", "set-cookie"):  # each cookie's value (Set-Cookie: the first pair)
                for part in value.split(";")[: None if name == "cookie" else 1]:
                    scrubber.learn(part.partition("=")[2])


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
            learn_credentials(((name, value),), scrubber)
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
