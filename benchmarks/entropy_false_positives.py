"""`python -m benchmarks.entropy_false_positives [DIR…]`: how often the random-token rule redacts
what is no secret, in redactions per 100 KB of real code and prose.

The rule (`capsem.random_tokens`, used by `capsem.secret_names`) redacts a random-looking token
after a word that says a credential follows (`token`, `key`, `secret`, `password`…), whatever its
shape. Its false positives are measured on text that holds (nearly) no live credential: by
default the project's own sources and docs and its installed packages' sources
(`.venv/lib/python3.11/site-packages`: every .py, .md, .txt, .json, .yaml). Every redaction
counts as a false positive, test fixtures' fake keys included (so the rate is an upper bound).
The rate is stated in docs/RELIABILITY.md; `tests/core/test_random_tokens.py` keeps it below
1 per 100 KB on a corpus that is always present (the standard library and the project).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from capsem.secret_names import random_token_spans

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = (".py", ".md", ".txt", ".json", ".yaml", ".yml")
PROJECT = ("addons", "assembler", "benchmarks", "capsem", "pricing", "tests", "docs", "config")
MAX_FILE = 4 * 2**20
"""Larger files (data dumps) are skipped: they are no code or prose."""


@dataclass
class Rate:
    """Redactions found in a corpus, per 100 KB."""

    files: int = 0
    size: int = 0
    redactions: int = 0
    examples: list[tuple[str, str]] = field(default_factory=list)

    @property
    def per_100kb(self) -> float:
        return self.redactions / (self.size / 100_000) if self.size else 0.0


def files_under(roots: Iterable[Path]) -> Iterator[Path]:
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and path.stat().st_size <= MAX_FILE:
                yield path


def measure(paths: Iterable[Path], examples: int = 20) -> Rate:
    """The rule's redactions in every file of `paths` (UTF-8, undecodable bytes replaced)."""
    rate = Rate()
    for path in paths:
        text = path.read_text("utf-8", errors="replace")
        rate.files += 1
        rate.size += len(text.encode("utf-8", "surrogatepass"))
        for start, end in random_token_spans(text):
            rate.redactions += 1
            if len(rate.examples) < examples:
                rate.examples.append((str(path), text[max(0, start - 40) : end]))
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "dirs", nargs="*", type=Path, help="corpus folders (default: the project and site-packages)"
    )
    args = parser.parse_args(argv)
    corpora = {str(d): [d] for d in args.dirs} or {
        "project": [ROOT / name for name in PROJECT],
        "site-packages": [
            ROOT / ".venv" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
        ],
    }
    for name, roots in corpora.items():
        rate = measure(files_under(roots))
        print(f"{name}: {rate.files} files, {rate.size / 1e6:.1f} MB, {rate.redactions} redactions, "
              f"{rate.per_100kb:.3f} per 100 KB")  # fmt: skip
        for where, excerpt in rate.examples:
            print(f"  {where}: …{excerpt!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
