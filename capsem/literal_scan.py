"""Skipping the scrubber's passes that cannot match, at gigabytes a second (Hyperscan).

The scrubber runs on every string capsem stores, and most of its passes can be skipped: a
pattern runs only when a literal that each of its matches contains is in the text, a gitleaks
rule only when one of its keywords is. Asking that of several hundred literals one by one, or
with a Python-driven automaton, costs more than the patterns themselves on a 2 MiB body; one
Hyperscan scan of the UTF-8 bytes answers for all of them (`LiteralSet`).

A keyword can be common (`s.` for Vault tokens, `ext_` for Authress keys: every Anthropic stream
holds `text_delta`), so a rule whose keyword occurs is asked once more before Python's `re` runs it
over the whole text: the same regex compiled by Hyperscan in prefilter mode, which may answer yes
when the regex would not match but never no when it would (`RegexPrefilter`, compiled on first use:
~16 ms a rule, and only the rules the traffic calls for).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import hyperscan

from capsem import build_cache, native

logger = logging.getLogger(__name__)

DENSE = 64
"""Places of `LiteralPlaces`' words past which the compiled path reads the rest of a text: one
Python call per Hyperscan match costs more, on a text dense with them, than a second read in C."""
SHORT_TEXT = 2048
"""Below this length one Python regex scan finds a few words cheapest; above it, Hyperscan does
(`LiteralPlaces`; Python's `re` tries every alternative at every position)."""


def compiled(
    expressions: Sequence[bytes], flags: Sequence[int], *, literal: bool = False, keep: bool = False
) -> hyperscan.Database:
    """A block-mode database of `expressions` (ids 0..n-1, `flags` each). With `keep` (only for
    capsem's own fixed words and shipped rules, never for values seen in traffic: a database of
    learned credentials must not reach disk), it is loaded from the build cache
    (`capsem.build_cache`, keyed by all of them and Hyperscan's version) when an earlier process
    compiled it, else compiled and kept; a kept database that does not load (another CPU's, a
    damaged file) is compiled again. Raises `hyperscan.error` as `compile` does."""
    key = repr((hyperscan.__version__, literal, list(flags), list(expressions))).encode()
    kept = build_cache.read("hyperscan", key) if keep else None
    if kept is not None:
        try:
            return hyperscan.loadb(kept, hyperscan.HS_MODE_BLOCK)
        except hyperscan.error as exc:
            logger.debug("capsem: a kept Hyperscan database does not load (%s); compiling it", exc)
    db = hyperscan.Database()
    db.compile(expressions=list(expressions), ids=list(range(len(expressions))), elements=len(expressions),
               flags=list(flags), literal=literal)  # fmt: skip
    if keep:
        build_cache.write("hyperscan", key, hyperscan.dumpb(db))
    return db


class _Scanner:
    """A compiled Hyperscan database and one scratch space per thread (a scan must not share it)."""

    def __init__(self) -> None:
        self._db: hyperscan.Database | None = None
        self._local = threading.local()

    def _scan(self, data: bytes, on_match: Callable[..., object]) -> None:
        """Scan `data` (a database is compiled), `on_match(id, start, end, flags, context)` per match."""
        assert self._db is not None
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(self._db)
        self._db.scan(data, match_event_handler=on_match, scratch=scratch)

    def _hits(self, data: bytes) -> set[int]:
        if self._db is None:
            return set()
        hits: set[int] = set()
        self._scan(data, lambda i, _s, _e, _f, _c: hits.add(i))
        return hits


class LiteralSet(_Scanner):
    """A fixed set of literals, each case-sensitive or not; `found(data)` says which occur."""

    def __init__(self, literals: Sequence[tuple[str, bool]], *, keep: bool = False) -> None:
        """`literals`: (literal, caseless) pairs; `found` answers with their indexes. `keep`: the
        compiled set may be kept for the next process (`compiled`: never for traffic's values)."""
        super().__init__()
        self.literals = tuple(literals)
        if self.literals:
            single = hyperscan.HS_FLAG_SINGLEMATCH
            self._db = compiled(
                [lit.encode("utf-8", "surrogatepass") for lit, _ in self.literals],
                [single | (hyperscan.HS_FLAG_CASELESS if caseless else 0) for _, caseless in self.literals],
                literal=True,
                keep=keep,
            )

    def found(self, data: bytes) -> set[int]:
        """The indexes of the literals that occur in `data` (UTF-8)."""
        return self._hits(data) if data else set()


class LiteralPlaces(_Scanner):
    """Where case-less ASCII literals occur: `places(text, data)` gives their start positions.
    Made of capsem's own fixed words: its database is kept for the next process (`compiled`)."""

    def __init__(self, literals: Sequence[str]) -> None:
        super().__init__()
        self._literals = tuple(literals)
        self._lengths = [len(lit) for lit in literals]
        self._db = compiled(
            [lit.encode("ascii") for lit in literals],
            [hyperscan.HS_FLAG_CASELESS] * len(literals),
            literal=True,
            keep=True,
        )

    def places(self, text: str, data: bytes) -> list[int]:
        """Sorted positions in `text` (a str) where a literal starts; `data` is `text` in UTF-8.

        Hyperscan gives byte offsets; an ASCII literal starts on a character boundary, so where
        `text` is not all ASCII each offset becomes a position by decoding the bytes before it
        (each byte once). Past `DENSE` places (a Claude Code request, code) the compiled path
        (`native.word_places`) reads the whole text instead: the same places, without a Python
        call per place."""
        lengths = self._lengths
        starts: list[int] = []
        word_places = native.word_places
        if word_places is None:
            add = starts.append  # one call per place: no tuple, no lookup of the method
            self._scan(data, lambda i, _s, e, _f, _c: add(e - lengths[i]))
        else:

            def add_until_dense(i: int, _s: int, e: int, _f: int, _c: object) -> bool:
                starts.append(e - lengths[i])
                return len(starts) >= DENSE  # true: Hyperscan stops

            try:
                self._scan(data, add_until_dense)
            except hyperscan.ScanTerminated:
                return word_places(text, self._literals)
        starts.sort()
        return _positions(text, data, starts)


def _positions(text: str, data: bytes, offsets: list[int]) -> list[int]:
    """Sorted byte offsets of `data` (`text` in UTF-8, each on a character boundary) as positions
    in `text`: the same where `text` is all ASCII, else by decoding the bytes before each (once)."""
    if len(data) == len(text) or not offsets:
        return offsets
    out, done, position = [], 0, 0
    for offset in offsets:
        position += len(data[done:offset].decode("utf-8", "surrogatepass"))
        done = offset
        out.append(position)
    return out


class PatternEnds(_Scanner):
    """Where matches of a few ASCII regexes end (`ends(text, data)`): Hyperscan's end offsets,
    one per match end, for patterns whose every end is on a character boundary. Made of capsem's
    own fixed patterns: its database is kept for the next process (`compiled`)."""

    def __init__(self, patterns: Sequence[tuple[str, bool]]) -> None:
        """`patterns`: (regex, caseless) pairs."""
        super().__init__()
        self._db = compiled(
            [pattern.encode("ascii") for pattern, _ in patterns],
            [hyperscan.HS_FLAG_CASELESS if caseless else 0 for _, caseless in patterns],
            keep=True,
        )

    def ends(self, text: str, data: bytes) -> list[int]:
        found: list[int] = []
        self._scan(data, lambda _i, _s, e, _f, _c: found.append(e))
        return _positions(text, data, sorted(set(found)))


_PY_SPACE = r"\s\x1c-\x1f"
"""What Python's `\\s` matches in an ASCII text, in a class: Hyperscan's `\\s` and the four
separators `\\x1c`-`\\x1f` (`str.isspace`)."""


def ascii_prefilter_regex(pattern: str) -> str:
    """A Python `re` pattern as Hyperscan reads it the same way on ASCII text (for a
    `RegexPrefilter` asked only of ASCII texts): named groups become plain groups and `\\s`
    takes in `\\x1c`-`\\x1f`, which Python's `\\s` matches and Hyperscan's does not (`\\w`,
    `\\d` and `\\b` agree on ASCII). Raises ValueError for `\\S` inside a class (no prefilter then)."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            pair = pattern[i : i + 2]
            if pair == "\\s":
                out.append(_PY_SPACE if in_class else f"[{_PY_SPACE}]")
            elif pair == "\\S":
                if in_class:
                    raise ValueError(f"\\S in a class: {pattern!r}")
                out.append(f"[^{_PY_SPACE}]")
            else:
                out.append(pair)
            i += 2
            continue
        if in_class:
            in_class = not (ch == "]" and out[-1] not in ("[", "[^"))
        elif ch == "[":
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^")
                i += 2
                continue
        elif pattern.startswith("(?P<", i):
            out.append("(?:")
            i = pattern.index(">", i) + 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


class RegexPrefilter(_Scanner):
    """Whether a regex could match: Hyperscan's prefilter mode (a superset of the matches)."""

    _FLAGS = hyperscan.HS_FLAG_PREFILTER | hyperscan.HS_FLAG_SINGLEMATCH | hyperscan.HS_FLAG_ALLOWEMPTY

    def __init__(self, pattern: str, translate: Callable[[str], str] = str, *, keep: bool = False) -> None:
        """`translate` turns `pattern` into the regex to compile, when it is first needed; `keep`:
        the compiled prefilter may be kept for the next process (`compiled`)."""
        super().__init__()
        self.pattern = pattern
        self._keep = keep
        self._translate = translate
        self._ready = False
        self._lock = threading.Lock()

    def _compile(self) -> None:
        with self._lock:
            if self._ready:
                return
            try:
                self._db = compiled([self._translate(self.pattern).encode()], [self._FLAGS], keep=self._keep)
            except (hyperscan.error, ValueError) as exc:  # no prefilter: Python's regex answers alone
                logger.debug("no Hyperscan prefilter for %r: %s", self.pattern, exc)
            self._ready = True

    def maybe(self, data: bytes) -> bool:
        """False only when the regex cannot match `data` (UTF-8)."""
        if not self._ready:
            self._compile()
        return self._db is None or bool(self._hits(data))
