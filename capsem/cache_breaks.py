"""Why a call read less from the provider's prompt cache than its conversation had cached.

A cache break is a call that reads fewer tokens from the cache (Anthropic
`cache_read_input_tokens`, OpenAI `cached_tokens`, Gemini `cachedContentTokenCount`) than the
earlier call of its conversation left cached (what that call read plus what it wrote). It is the
most common surprise on an agent's bill, so each one is explained by its cause:

- `model`: the call went to another model (each model has its own cache);
- `expired`: more time passed since the earlier call than the cache lives (5 minutes; an hour when
  the earlier call wrote with the 1-hour TTL);
- `changed`: an item inside the cached prefix differs — the first one in the provider's prefix
  order (Anthropic: tool definitions, then system, then messages; the others: request order),
  named with a short excerpt of it before and after;
- `unknown`: none of these.

A change outside the cached prefix, or one the provider ignores (the cache read stays full), is no
break. `extra_cost_usd` is what the call paid over what it would have paid had the lost prefix
been read from the cache, at the call's own rates: the lost tokens it wrote to the cache again at
the cache-write rate, the rest at the input rate, less the cache-read rate either way.

A compaction (the agent summarized its history: the call's history is much shorter than the
earlier call's) is told apart by `compaction()`.

Pure functions over `CallFacts`: the recorder fills them from what it already knows of each call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Cause = Literal["changed", "expired", "model", "unknown"]
TTL_S, TTL_1H_S = 300.0, 3600.0
TOLERANCE = 0.02
"""A cache read within this fraction of what was cached is full (providers cache in blocks)."""
COMPACTION_RATIO = 0.5
"""A history shorter than this fraction of the earlier call's is a compaction."""


@dataclass(frozen=True)
class Part:
    """One item of a request in the provider's prefix order, with its estimated tokens."""

    hash: str
    label: str
    """What a person calls it: `system`, `tool definition Bash`, `message 3 (user)`."""
    tokens: int
    excerpt: str = ""
    """A short, scrubbed excerpt of its content."""
    history: bool = False
    """A message, tool call or tool result (not the system prompt or a tool definition)."""


@dataclass(frozen=True)
class CallFacts:
    """What a cache break is decided on, for one model call."""

    call_id: int
    model: str | None
    started: float
    ended: float
    input_tokens: int
    """All the call's input, cached included."""
    cache_read: int
    cache_write: int
    cache_write_1h: int = 0
    parts: tuple[Part, ...] = field(default=())


@dataclass(frozen=True)
class Rates:
    """USD per token."""

    input: float
    cache_read: float
    cache_write: float


@dataclass(frozen=True)
class CacheBreak:
    call_id: int
    earlier_call_id: int
    cached_tokens: int
    """What the earlier call left cached (it read plus it wrote)."""
    read_tokens: int
    cause: Cause
    item_index: int | None = None
    """With `changed`: the index (prefix order) of the first item that differs."""
    item: str | None = None
    before: str | None = None
    after: str | None = None
    extra_cost_usd: float | None = None


def cached_after(call: CallFacts) -> int:
    return call.cache_read + call.cache_write


def find_break(earlier: CallFacts, call: CallFacts, rates: Rates | None) -> CacheBreak | None:
    """The cache break of `call` against the earlier call of its conversation, or None."""
    cached = cached_after(earlier)
    if cached <= 0 or call.cache_read >= cached * (1 - TOLERANCE):
        return None
    lost = min(cached, call.input_tokens) - call.cache_read
    if lost <= 0:
        return None
    extra = None
    if rates is not None:
        rewritten = min(lost, call.cache_write)
        extra = rewritten * (rates.cache_write - rates.cache_read) + (lost - rewritten) * (
            rates.input - rates.cache_read
        )
    base = {"call_id": call.call_id, "earlier_call_id": earlier.call_id, "cached_tokens": cached,
            "read_tokens": call.cache_read, "extra_cost_usd": extra}  # fmt: skip
    if (earlier.model or "") != (call.model or ""):
        return CacheBreak(cause="model", **base)
    ttl = TTL_1H_S if earlier.cache_write_1h else TTL_S
    if call.started - earlier.ended > ttl:
        return CacheBreak(cause="expired", **base)
    changed = first_change(earlier, call, cached)
    if changed is not None:
        index, before, after = changed
        return CacheBreak(cause="changed", item_index=index, item=(after or before).label,
                          before=before.excerpt if before else None, after=after.excerpt if after else None,
                          **base)  # fmt: skip
    return CacheBreak(cause="unknown", **base)


def first_change(
    earlier: CallFacts, call: CallFacts, cached: int
) -> tuple[int, Part | None, Part | None] | None:
    """The first item, in prefix order, where `call` differs from `earlier` inside the `cached`
    tokens of the earlier call's prefix (the items' estimates scaled to its reported input)."""
    estimated = sum(p.tokens for p in earlier.parts) or 1
    scale = earlier.input_tokens / estimated if earlier.input_tokens else 1.0
    position = 0.0
    for index, before in enumerate(earlier.parts):
        if position >= cached:
            return None
        after = call.parts[index] if index < len(call.parts) else None
        if after is None or after.hash != before.hash:
            return index, before, after
        position += before.tokens * scale
    return None


def compaction(earlier: CallFacts, call: CallFacts) -> tuple[int, int] | None:
    """(history tokens before, after) when `call` summarized `earlier`'s history, else None."""
    before = sum(p.tokens for p in earlier.parts if p.history)
    after = sum(p.tokens for p in call.parts if p.history)
    if before and after < before * COMPACTION_RATIO:
        return before, after
    return None
