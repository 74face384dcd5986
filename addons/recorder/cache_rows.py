"""A model call's cache break and compaction rows, decided against the earlier call of its
conversation by the rules of `capsem/cache_breaks.py` (recorder side).

Each call leaves its `CallFacts` (model, times, cache read and write, its items in the provider's
prefix order with their estimated tokens) in `Conversations.facts`; the next call of the
conversation is compared with them."""

from __future__ import annotations

from addons.conversations import Conversations
from addons.items import Item
from addons.records import ResponseSummary
from capsem.cache_breaks import CallFacts, Part, Rates, compaction, find_break
from capsem.store.rows import CacheBreakRow, CompactionRow, ModelCall, Row, new_event_id
from pricing.estimate import count_tokens

EXCERPT = 120
"""Characters of an item kept as the excerpt of a break (scrubbed with every stored text)."""
_HISTORY = frozenset({"message", "tool_call", "tool_result"})
_ANTHROPIC_ORDER = {"tool_definition": 0, "system": 1}
"""Anthropic caches tools, then system, then messages, whatever order the request lists them in."""


def _label(entry: Item, index: int) -> str:
    if entry.kind == "tool_definition":
        return f"tool definition {entry.tool_name or '?'}"
    if entry.kind == "system":
        return "system"
    who = entry.tool_name or entry.role or "?"
    return f"{entry.kind.replace('_', ' ')} {index} ({who})"


def call_facts(row: ModelCall, started: float, ended: float, inputs: list[Item], summary: ResponseSummary,
               conversations: Conversations) -> CallFacts:  # fmt: skip
    """What the next call of the conversation is compared with."""
    order = list(enumerate(inputs))
    if row.provider == "anthropic":
        order.sort(key=lambda pair: (_ANTHROPIC_ORDER.get(pair[1].kind, 2), pair[0]))
    parts = []
    for index, entry in order:
        tokens = conversations.tokens.get(entry.hash)
        if tokens is None:
            tokens = conversations.tokens[entry.hash] = count_tokens(entry.content)
        parts.append(Part(entry.hash, _label(entry, index), tokens, entry.content[:EXCERPT],
                          history=entry.kind in _HISTORY))  # fmt: skip
    usage = summary.usage
    return CallFacts(row.id, row.model, started, ended, usage.input_tokens or 0, usage.cache_read or 0,
                     usage.cache_write or 0, usage.cache_write_1h or 0, tuple(parts))  # fmt: skip


def cache_rows(
    earlier: CallFacts | None, facts: CallFacts, rates: tuple[float, float, float] | None
) -> list[Row]:
    """The call's cache break and compaction rows against `earlier` (none without an earlier call)."""
    if earlier is None:
        return []
    out: list[Row] = []
    found = find_break(earlier, facts, Rates(*rates) if rates else None)
    if found is not None:
        out.append(CacheBreakRow(new_event_id(), facts.call_id, earlier.call_id, found.cached_tokens,
                                 found.read_tokens, found.cause, found.item_index, found.item, found.before,
                                 found.after, found.extra_cost_usd))  # fmt: skip
    shorter = compaction(earlier, facts)
    if shorter is not None:
        out.append(CompactionRow(new_event_id(), facts.call_id, earlier.call_id, *shorter))
    return out
