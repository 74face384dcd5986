"""Regular expressions with possessive quantifiers, on every Python 3.11.

Python before 3.11.5 mis-matches possessive repeats of groups that hold repeats (gh-106052:
Debian 12's python3.11 is 3.11.2). There a pattern is compiled without its possessive
quantifiers: the same matches for patterns written, as capsem's framing patterns are, so that
each run is one character class and each string one unrolled loop; only a failed match
backtracks more.
"""

from __future__ import annotations

import re
import sys
from typing import AnyStr

POSSESSIVE = sys.version_info >= (3, 11, 5)
_PLAIN = (("]++", "]"), ("*+", "*"), ("++", "+"))


def compile_possessive(pattern: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """`re.compile(pattern, flags)`, its possessive quantifiers dropped where Python mis-matches them."""
    if not POSSESSIVE:
        for old, new in _PLAIN:
            if isinstance(pattern, bytes):
                pattern = pattern.replace(old.encode(), new.encode())
            else:
                pattern = pattern.replace(old, new)
    return re.compile(pattern, flags)
