"""capsem's compiled fast path, when it is built: `frame_plain` reads ordinary SSE events (and
the text chunks of Anthropic, OpenAI Chat, OpenAI Responses and Gemini) in one native pass,
`crlf_to_lf` makes a CRLF-only piece LF, `delta_fields`, `delta_channels`, `delta_places` and `delta_split` find,
decode and blank the delta fields of a streamed body for the scrubber, `note_ends` notes where held chunks end
(fastpath.c says exactly what each reads); `named_next` skips the name words of a text that the
scrubber's name/value pass would only move past, `word_places` finds where its name words
start (what Hyperscan finds, without a Python call per place), `decoded_view` reads a text's
escapes for the scrubber and `ascii_view` its non-ASCII characters (scrubpath.c, its own module `_scrubpath`);
`chain_rows` encodes and chains a batch's rows for the ledger (ledgerpath.c, `_ledgerpath`).

`make install` builds it (`python -m capsem.native.build`, any C compiler and the Python headers);
without it, or with `CAPSEM_NATIVE=0` in the environment, they are all None and every reader
takes the pure-Python path, which is the reference: both give the same events, rows and bodies
(tests/core/test_native.py, `python -m tests.golden` with and without). `capsem doctor` says which path
is in use (`status`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

VERSION = 14
"""The fastpath.c this Python expects (its `FASTPATH_VERSION`); an older build is not used."""
SCRUB_VERSION = 10
"""The scrubpath.c this Python expects (its `SCRUBPATH_VERSION`)."""
LEDGER_VERSION = 1
"""The ledgerpath.c this Python expects (its `LEDGERPATH_VERSION`)."""

frame_plain: Callable[..., Any] | None = None
delta_fields: Callable[[str], list[tuple[str, str]]] | None = None
delta_channels: Callable[[str], dict[str, list[str]]] | None = None
delta_places: Callable[[str, Any], list[tuple[str, int, int]]] | None = None
delta_split: Callable[[str], tuple[str, dict[str, list[str]]]] | None = None
note_ends: Callable[..., None] | None = None
crlf_to_lf: Callable[[bytes], bytes | None] | None = None
named_next: Callable[..., tuple[int, int, int] | None] | None = None
decoded_view: Callable[[str], tuple[str, tuple[int, ...], tuple[int, ...]] | None] | None = None
ascii_view: Callable[[str], str] | None = None
word_places: Callable[[str, tuple[str, ...]], list[int]] | None = None
chain_rows: Callable[..., tuple[bytes, int]] | None = None
why_not: str | None = None
"""Why the pure-Python path is in use, or None when the compiled one is."""

_NOT_BUILT = "not built (`make install` builds it when a C compiler and the Python headers are there)"


def _module(name: str, version: int) -> Any:
    """The compiled module `name` when it is built from the source this Python expects, else None
    (and `why_not` says why)."""
    global why_not
    try:
        module = importlib.import_module(f"capsem.native.{name}")
    except ImportError:
        why_not = why_not or _NOT_BUILT
        return None
    if getattr(module, "VERSION", None) != version:
        why_not = why_not or "built from an older source (run `make install` again)"
        return None
    return module


if os.environ.get("CAPSEM_NATIVE", "1") == "0":
    why_not = "turned off (CAPSEM_NATIVE=0)"
else:
    if (_fastpath := _module("_fastpath", VERSION)) is not None:
        frame_plain, delta_fields = _fastpath.frame_plain, _fastpath.delta_fields
        delta_channels, note_ends = _fastpath.delta_channels, _fastpath.note_ends
        crlf_to_lf, delta_places = _fastpath.crlf_to_lf, _fastpath.delta_places
        delta_split = _fastpath.delta_split
    if (_scrubpath := _module("_scrubpath", SCRUB_VERSION)) is not None:
        named_next, word_places = _scrubpath.named_next, _scrubpath.word_places
        decoded_view, ascii_view = _scrubpath.decoded_view, _scrubpath.ascii_view
    if (_ledgerpath := _module("_ledgerpath", LEDGER_VERSION)) is not None:
        chain_rows = _ledgerpath.chain_rows


def status() -> str:
    """Which path this process uses, in words (for `capsem doctor`)."""
    if why_not is None:
        return "compiled fast path (capsem/native/fastpath.c, scrubpath.c, ledgerpath.c)"
    return f"pure Python: the compiled fast path is {why_not}"
