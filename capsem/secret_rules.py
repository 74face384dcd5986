"""Credential shapes as data: the public gitleaks rule set, plus rules from the configuration.

capsem keeps no hand list of key prefixes beyond the few its own passes need. The shapes of
2026's keys (SendGrid `SG.…`, Groq `gsk_`, `xai-`, Vault `hvs.`, Notion `ntn_`, Databricks `dapi`,
…: over 200 of them) come from gitleaks' maintained `config/gitleaks.toml`, vendored unchanged in
`config/gitleaks.toml`; `redaction.rules` adds rules of the same form, `redaction.disabled_rules`
switches rules off by id (`generic-api-key` by default: capsem's secret-named-value pass does that
job without redacting every high-entropy id next to the word "key").

A rule is used as gitleaks uses it: it runs only when one of its keywords occurs in the text
(lower-cased), its secret is its `secretGroup` (else its first non-empty group, else the whole
match), a secret below the rule's Shannon `entropy` or allowed by the rule's or the global
allowlist (regexes on the secret, match or line; stopwords) is kept. Rules limited to file paths
are used on any text (an agent reads those files into prompts and tool results).

gitleaks' regexes are Go RE2; `python_regex` translates the few forms Python spells otherwise
(flags in the middle of a pattern, `\\z`, POSIX classes, nested-set look-alikes), and widens the
common end-of-secret test so that a key inside JSON (`…\\"`, `…,`, `…}`) is found too.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import math
import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capsem import build_cache
from capsem.paths import shipped_config_path

GITLEAKS, OWN = "gitleaks.toml", "secret-rules.toml"
DEFAULT_DISABLED = frozenset({"generic-api-key"})
_GO_END = r"""(?:[\x60'"\s;]|\\[nr]|$)"""
_WIDE_CLASS = r"\\,})\]&<>|"
_WIDE_END = r"""(?=[\x60'"\s;""" + _WIDE_CLASS + "]|$)"
_GO_END_LIKE_RE = re.compile(r"\(\?:\[(?P<cls>(?:\\.|[^\]\\])*)\]\|\\\\\[nr\]\|\$\)$")
"""gitleaks' end of a secret (a quote, a blank, `;`, an escaped newline, the end), widened to what
ends a value inside JSON and code: a backslash (`\\"`), `,`, `}`, `)`, `]`, `&`, `<`, `>`, `|`."""
_POSIX = {"alnum": "A-Za-z0-9", "alpha": "A-Za-z", "digit": "0-9", "lower": "a-z", "upper": "A-Z",
          "xdigit": "0-9A-Fa-f", "space": r"\s", "word": r"\w", "punct": r"!-/:-@\[-`{-~"}  # fmt: skip


class RuleError(ValueError):
    """A rule that cannot be used: its id and why."""


@dataclass(frozen=True)
class Allow:
    """One allowlist: what makes a found secret not a secret."""

    patterns: tuple[str, ...] = ()
    """Regexes as written (RE2), translated and compiled when first needed (`compiled`)."""
    target: str = "secret"
    """What the regexes test: `secret`, `match` or `line`."""
    stopwords: tuple[str, ...] = ()
    """Lower-cased; a secret containing one is kept."""
    require_all: bool = False
    """gitleaks' `condition = "AND"`: every given test must hold (else any one)."""


@dataclass(frozen=True)
class Rule:
    """A credential shape: where it runs (keywords) and what it redacts."""

    id: str
    pattern: str
    """Its regex as written (RE2); translated and compiled when the rule first runs (`regex`)."""
    keywords: tuple[str, ...] = ()
    """Lower-cased; the rule runs only on a text holding one (none: on every text)."""
    secret_group: int = 0
    entropy: float = 0.0
    allows: tuple[Allow, ...] = field(default=(), repr=False)

    @property
    def regex(self) -> re.Pattern[str]:
        return compiled(self.pattern)


def python_regex(go: str) -> str:
    """A Go RE2 pattern as a Python `re` pattern with the same meaning (see module doc)."""
    if go.endswith(_GO_END):
        go = go[: -len(_GO_END)] + _WIDE_END
    else:
        end = _GO_END_LIKE_RE.search(go)
        if end is not None:  # an end of its own (`[\x60'"\s;/]`): widened the same way
            go = go[: end.start()] + f"(?=[{end.group('cls')}{_WIDE_CLASS}]|$)"
    out: list[str] = []
    stack: list[int] = [0]  # per open group: scoped-flag groups opened in it that must close with it
    i, n, in_class = 0, len(go), False
    while i < n:
        ch = go[i]
        if ch == "\\" and i + 1 < n:
            nxt = go[i + 1]
            out.append(r"\Z" if nxt == "z" else go[i : i + 2])
            i += 2
            continue
        if in_class:
            posix = re.match(r"\[:(\w+):\]", go[i:])
            if posix and posix.group(1) in _POSIX:
                out.append(_POSIX[posix.group(1)])
                i += posix.end()
                continue
            if ch == "]" and not (out and out[-1] in ("[", "[^")):
                in_class = False
            elif ch == "[" or (ch in "-&~|" and i + 1 < n and go[i + 1] == ch):
                out.append("\\" + ch)  # a literal Python would read as a nested set, now or later
                i += 1
                continue
            out.append(ch)
            i += 1
            continue
        if ch == "[":
            in_class = True
            out.append("[^" if go.startswith("[^", i) else "[")
            i += 2 if go.startswith("[^", i) else 1
            if i < n and go[i] == "]":  # `[]…]`: a literal bracket first
                out.append(r"\]")
                i += 1
            continue
        flags = re.match(r"\(\?([imsU-]+)\)", go[i:])
        if flags and i > 0:  # Go applies it to the rest of the group; Python wants it scoped
            out.append(f"(?{flags.group(1).replace('U', '')}:")
            stack[-1] += 1
            i += flags.end()
            continue
        if ch == "(":
            stack.append(0)
        elif ch == ")":
            out.append(")" * stack.pop())
        elif ch == "|" and stack[-1]:  # close the scoped flags before the alternative, reopen after
            opened = _open_flags(out, stack[-1])
            out.append(")" * stack[-1] + "|" + "".join(opened))
            i += 1
            continue
        out.append(ch)
        i += 1
    out.append(")" * stack[0])
    return "".join(out)


def _open_flags(out: list[str], count: int) -> list[str]:
    """The last `count` scoped-flag openings in `out`, to reopen after an alternation."""
    found = [part for part in out if re.fullmatch(r"\(\?[ims-]+:", part)]
    return found[-count:]


def shannon_entropy(text: str) -> float:
    if not text:
        return 0.0
    counts, total = Counter(text), len(text)
    return -sum(c / total * math.log2(c / total) for c in counts.values())


@functools.cache
def compiled(pattern: str) -> re.Pattern[str]:
    """A rule's regex (RE2, as written) translated and compiled once per process, when a text
    first calls for it: most of the ~230 rules never run in a session, and every process that
    scrubs (mitmdump registering its session, the recorder, the CLI) would otherwise translate and
    compile them all at start."""
    return re.compile(python_regex(pattern), re.ASCII)


def _check(rule_id: str, pattern: str) -> None:
    try:
        compiled(pattern)
    except re.error as exc:
        raise RuleError(f"rule {rule_id!r}: its regex does not compile: {exc}") from exc


def _allow(rule_id: str, raw: dict) -> Allow:
    return Allow(
        patterns=tuple(raw.get("regexes", ())),
        target=raw.get("regexTarget", "secret"),
        stopwords=tuple(w.lower() for w in raw.get("stopwords", ())),
        require_all=str(raw.get("condition", "OR")).upper() == "AND",
    )


def rule_from(raw: dict, *, check: bool = False) -> Rule | None:
    """A rule from its gitleaks TOML form (`id`, `regex`, `keywords`, `secretGroup`, `entropy`,
    `allowlists`); None for a rule that only matches file paths. With `check`, its regexes are
    compiled now (a configured rule is refused at load, in one line)."""
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not rule_id:
        raise RuleError(f"a rule needs an id, got {rule_id!r}")
    if raw.get("regex") is None:
        return None
    rule = Rule(
        id=rule_id,
        pattern=raw["regex"],
        keywords=tuple(k.lower() for k in raw.get("keywords", ())),
        secret_group=int(raw.get("secretGroup", 0)),
        entropy=float(raw.get("entropy", 0.0)),
        allows=tuple(_allow(rule_id, a) for a in raw.get("allowlists", ())),
    )
    if check:
        for pattern in (rule.pattern, *(p for a in rule.allows for p in a.patterns)):
            _check(rule_id, pattern)
    return rule


@dataclass(frozen=True)
class RuleSet:
    """The rules in force and the allowlist every rule shares."""

    rules: tuple[Rule, ...]
    allow: Allow | None = None


def _shipped_toml(path: str) -> dict[str, Any]:
    """A shipped TOML file's data, kept in the build cache (`capsem.build_cache`, by the file's
    sha256): parsing gitleaks' 100 kB of rules costs every scrubbing process ~25 ms of CPU."""
    raw = Path(path).read_bytes()
    key = hashlib.sha256(raw).digest()
    kept = build_cache.read("toml", key)
    if kept is not None:
        try:
            data = marshal.loads(kept)
            if isinstance(data, dict):
                return data
        except (EOFError, ValueError, TypeError):
            pass
    data = tomllib.loads(raw.decode("utf-8"))
    try:
        build_cache.write("toml", key, marshal.dumps(data))
    except ValueError:  # a value marshal cannot keep (a TOML date): parsed in each process
        pass
    return data


@functools.lru_cache(maxsize=4)
def _toml_rules(path: str) -> tuple[tuple[Rule, ...], Allow | None]:
    data = _shipped_toml(path)
    rules = tuple(r for r in map(rule_from, data.get("rules", ())) if r is not None)
    allow = data.get("allowlist")
    return rules, (_allow("global allowlist", allow) if allow else None)


def load_rules(extra: Sequence[dict] = (), disabled: Iterable[str] = DEFAULT_DISABLED) -> RuleSet:
    """The shipped rules (gitleaks', then capsem's own `config/secret-rules.toml`: shapes gitleaks
    lacks) without `disabled`, then the `extra` ones (`redaction.rules`)."""
    shipped, allow = _toml_rules(str(shipped_config_path(GITLEAKS)))
    own, _ = _toml_rules(str(shipped_config_path(OWN)))
    off = frozenset(disabled)
    added = tuple(r for r in map(rule_from, extra) if r is not None)
    return RuleSet(tuple(r for r in (*shipped, *own) if r.id not in off) + added, allow)


def secret_span(rule: Rule, m: re.Match[str]) -> tuple[int, int] | None:
    """The span of the secret in a match of `rule`, or None when the match is no secret."""
    group = rule.secret_group
    if not group:
        group = next((g for g in range(1, (m.re.groups or 0) + 1) if m.group(g)), 0)
    if group > (m.re.groups or 0) or m.start(group) < 0:
        return None
    start, end = m.span(group)
    return (start, end) if end > start else None


def allowed(allow: Allow, secret: str, match: str, line: str) -> bool:
    """Whether an allowlist lets this secret be."""
    tests: list[bool] = []
    if allow.patterns:
        target = {"secret": secret, "match": match, "line": line}.get(allow.target, secret)
        tests.append(any(compiled(p).search(target) for p in allow.patterns))
    if allow.stopwords:
        lowered = secret.lower()
        tests.append(any(w in lowered for w in allow.stopwords))
    if not tests:
        return False
    return all(tests) if allow.require_all else any(tests)
