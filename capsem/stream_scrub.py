"""Secrets split across the deltas of a streamed answer, removed from every delta that carries part.

A streamed answer arrives in pieces of a few characters (`"text_delta","text":"sk-ant-ap"`, then
`"03-…"`): the assembled text is scrubbed like any other (`text_content`), but the stored body keeps
the deltas, where no pattern sees the whole key, and joining them gives it back. So the string
values of a stream's delta fields are joined per field name, in order (a channel: Anthropic's
`text`, `thinking` and `partial_json`, OpenAI's `content`, `arguments` and `delta`, Gemini's
`text`, Ollama's `response`…), the joined text is scrubbed, and each secret found is cut out of
every delta it spans: the first keeps the marker in its place, the others lose their part. The
rest of the body (its framing, the other fields) is scrubbed as any text, with the deltas' values
blanked (`scrub_stream`; at most `BLANK_KEEP` blanks a value): a delta's text is read once, whole,
not also as a piece of escaped JSON cut off where the delta ends. Deltas without secrets are left
byte for byte, as is every byte that is no secret's.

Where a redaction lies is read back from the scrubbed text: every marker holds the keyed hash of
what it replaced, so each one is placed exactly (`marker_spans`). The scrubber reads a joined text
as ASCII (`capsem.redact.Scrubber.secret_spans`), so the marker is made here, of the secret as
it was.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Collection

from capsem import native
from capsem.markers import MARKER_SPLIT_RE, hash_value, redacted

_DELTA_KEYS = ("text", "thinking", "partial_json", "delta", "content", "arguments", "reasoning_content",
               "reasoning", "refusal", "response")  # fmt: skip
_DELTA_RE = re.compile(
    rf'"(?P<key>{"|".join(_DELTA_KEYS)})"'
    r'[ \t]*:[ \t]*"(?P<value>[^"\\]*(?:\\.[^"\\]*)*)"'
)
"""A delta field and its JSON string value (the loop unrolled: ~8x faster in `re` than one
alternation per character). `capsem.native.delta_channels` reads the same fields, several times faster."""
BLANK_KEEP = 64
"""The blanks a delta's value leaves in the body the framing is read in (a value of fewer leaves
as many as it had). A flood's deltas of a KiB each were ~90 % of that text in blanks, read by every
pass; nothing in them is a secret's. Kept: a rule may ask for a long run between two parts it
finds in the framing (gitleaks' `private-key`: 64 characters or more between its `BEGIN` and
`END` lines); shorter runs can only bring parts closer, and a framing the scrubber changes is read
again with every value's blanks in full (`scrub_stream`)."""
_MAX_CANDIDATES = 4096
"""Places tried for the end of one redacted span before giving up on placing it."""
_PROBE = 64


def marker_spans(original: str, scrubbed: str) -> list[tuple[int, int]] | None:
    """The spans of `original` that `scrubbed` replaced by markers, or None when they cannot be
    placed (then the caller treats the whole text as a secret's)."""
    parts = MARKER_SPLIT_RE.split(scrubbed)  # text, marker, text, marker, …, text
    if not original.startswith(parts[0]):
        return None
    pos, spans = len(parts[0]), []
    for marker, after in zip(parts[1::2], parts[2::2], strict=True):
        if original.startswith(marker, pos):  # a marker that was there before
            pos += len(marker)
        else:
            want = marker[len("[redacted ") : -1]
            end = _end_of(original, pos, after, want)
            if end is None:
                return None
            spans.append((pos, end))
            pos = end
        if not original.startswith(after, pos):
            return None
        pos += len(after)
    return spans if pos == len(original) else None


def _end_of(original: str, start: int, after: str, want: str) -> int | None:
    """Where the secret that starts at `start` ends: the text after it follows, and its keyed hash
    is the marker's. (Places are found by the first characters of that text, then compared whole:
    `str.find` reads a long text it looks for whole before it starts.)"""
    probe = after[:_PROBE]
    end, tried = (original.find(probe, start + 1) if after else start + 1), 0
    while 0 <= end <= len(original) and tried < _MAX_CANDIDATES:
        if original.startswith(after, end):
            tried += 1
            if hash_value(original[start:end]) == want:
                return end
        end = original.find(probe, end + 1) if after else end + 1
    return None


def _decoded(raw: str) -> str | None:
    if "\\" not in raw:
        return raw
    try:
        return json.loads(f'"{raw}"')
    except ValueError:
        return None


def _decoded_all(raws: list[str]) -> list[str | None]:
    """`_decoded` of each: the escaped ones in one `json.loads` (one by one if one is bad)."""
    escaped = [i for i, raw in enumerate(raws) if "\\" in raw]
    if len(escaped) < 2:
        return [_decoded(raw) for raw in raws]
    out: list[str | None] = list(raws)
    try:
        values = json.loads('["' + '","'.join(raws[i] for i in escaped) + '"]')
    except ValueError:
        values = None
    if values is None or len(values) != len(escaped):  # a bad one, or one that ends in `\`
        values = [_decoded(raws[i]) for i in escaped]
    for i, value in zip(escaped, values, strict=True):
        out[i] = value
    return out


def _joined(text: str) -> dict[str, list[str]]:
    """The non-empty decoded values of the delta fields of `text`, per key, in order."""
    if native.delta_channels is not None:
        return native.delta_channels(text)
    joined: dict[str, list[str]] = {}
    for key, _, _, value in _spans(text, _DELTA_KEYS):
        joined.setdefault(key, []).append(value)
    return joined


def _places(text: str, keys: Collection[str]) -> list[tuple[str, int, int]]:
    """(key, start, end) of each delta field of `text` whose key is in `keys` and whose value
    `_joined` lists, in order: where its raw value lies (`native.delta_places`, several times
    faster)."""
    if native.delta_places is not None:
        return native.delta_places(text, keys)
    return [(key, start, end) for key, start, end, _ in _spans(text, keys)]


def _spans(text: str, keys: Collection[str]) -> list[tuple[str, int, int, str]]:
    """(key, start, end, decoded value) of each non-empty delta field of `text` whose key is in
    `keys`, in order: where its raw value lies (the reference for `_places` and `_joined`)."""
    matches = [m for m in _DELTA_RE.finditer(text) if m.group("key") in keys]
    values = _decoded_all([m.group("value") for m in matches])
    return [(m.group("key"), *m.span("value"), value)
            for m, value in zip(matches, values, strict=True) if value]  # fmt: skip


Spans = list[tuple[int, int]]


def scrub_stream(
    text: str, scrub: Callable[[str], str | None], spans_of: Callable[[str], Spans | None]
) -> str:
    """A streamed body scrubbed: its framing and other fields as any text is (`scrub`), with the
    values of its delta fields blanked out, then each channel's deltas joined and cut free of their
    secrets (`scrub_deltas`, `spans_of`): a delta's text is read once, as what it says, not also
    as escaped JSON. Should the first scrub redact over a delta's value, the whole body is scrubbed
    instead, then its channels."""
    blank, joined = _split(text)
    scrubbed = scrub(blank) or blank
    if not joined:
        return scrubbed
    if scrubbed == blank:
        return scrub_deltas(text, spans_of, joined)
    places = _places(text, _DELTA_KEYS)  # read again with the values' blanks in full: spans are the text's
    blank = _blanked(text, places, keep=None)
    scrubbed = scrub(blank) or blank
    if scrubbed != blank:
        spans = marker_spans(blank, scrubbed)
        if spans is None or _overlap(spans, places):
            return scrub_deltas(scrub(text) or text, spans_of)
        text = _redacted_at(text, spans)  # the deltas' values unchanged: `joined` still holds
    return scrub_deltas(text, spans_of, joined)


def _split(text: str) -> tuple[str, dict[str, list[str]]]:
    """(`text` with the values of its delta fields blanked, at most `BLANK_KEEP` blanks each,
    `_joined(text)`): in one walk (`native.delta_split`)."""
    if native.delta_split is not None:
        return native.delta_split(text)
    joined = _joined(text)
    return (_blanked(text, _places(text, _DELTA_KEYS)) if joined else text), joined


def _blanked(text: str, places: list[tuple[str, int, int]], keep: int | None = BLANK_KEEP) -> str:
    """`text` with each of `places` (key, start, end) turned to blanks, at most `keep` of them
    (None: as many as it had)."""
    out, done = [], 0
    for _, start, end in places:
        out += [text[done:start], " " * (end - start if keep is None else min(end - start, keep))]
        done = end
    return "".join(out) + text[done:]


def _overlap(spans: Spans, places: list[tuple[str, int, int]]) -> bool:
    """Whether a span (sorted) reaches into one of `places` (sorted, apart)."""
    starts = [start for _, start, _ in places]
    for start, end in spans:
        i = bisect.bisect_right(starts, end - 1) - 1  # the last place starting before the span ends
        if i >= 0 and places[i][2] > start:
            return True
    return False


def _redacted_at(text: str, spans: Spans) -> str:
    """`text` with each of `spans` (sorted, apart) replaced by the marker of what it holds."""
    out, done = [], 0
    for start, end in spans:
        out += [text[done:start], redacted(text[start:end])]
        done = end
    return "".join(out) + text[done:]


def scrub_deltas(
    text: str, spans_of: Callable[[str], Spans | None], joined: dict[str, list[str]] | None = None
) -> str:
    """`text` (a streamed body) with the secrets of each channel's joined deltas cut out of the
    deltas that spell them. `spans_of(joined)` says where the secrets of a channel's joined text
    are (None: they cannot be placed, and every delta of the channel goes). `joined`: `_joined(text)`,
    when the caller has it."""
    joined = (
        _joined(text) if joined is None else joined
    )  # first the channels' texts alone: most hold no secret
    dirty: dict[str, tuple[str, Spans]] = {}  # channel -> its joined text, where its secrets are
    for key, parts in joined.items():
        whole = "".join(parts)
        spans = spans_of(whole)
        if spans is None:
            spans = [(0, len(whole))]
        if spans:
            dirty[key] = (whole, spans)
    if not dirty:
        return text
    places: dict[str, list[tuple[int, int]]] = {}
    for key, start, end in _places(text, dirty):
        places.setdefault(key, []).append((start, end))
    edits = [edit for key, raw in places.items()
             for edit in _channel_edits(list(zip(raw, joined[key], strict=True)), *dirty[key])]  # fmt: skip
    out, done = [], 0
    for start, end, replacement in sorted(edits):
        out += [text[done:start], replacement]
        done = end
    return "".join(out) + text[done:]


def _channel_edits(
    deltas: list[tuple[tuple[int, int], str]], joined: str, spans: Spans
) -> list[tuple[int, int, str]]:
    """The edits that cut the secrets of a channel (at `spans` of its `joined` deltas: each delta's
    raw span and decoded value) out of its deltas."""
    edits = []
    offset = 0
    for (raw_start, raw_end), value in deltas:
        start, end = offset, offset + len(value)
        offset = end
        kept, cut = [], start
        for s, e in spans:
            if e <= start or s >= end:
                continue
            kept.append(value[cut - start : max(s, start) - start])
            if start <= s:  # the secret starts in this delta: its marker goes here
                kept.append(f"[redacted {hash_value(joined[s:e])}]")
            cut = min(e, end)
        if cut != start or kept:
            kept.append(value[cut - start :])
            encoded = json.dumps("".join(kept), ensure_ascii=False)[1:-1]
            edits.append((raw_start, raw_end, encoded))
    return edits
