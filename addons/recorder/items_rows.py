"""The rows of a model call's conversation: its new items (`model_items`), its whole input list
(`model_item_lists`) and where its input tokens went (`input_breakdown`).

Not pure: each call updates the session's `Conversations` (which items are stored, each
conversation's last list, token counts and rates), and a new turn draws a random `turn_id`.
Called by `addons/recorder/build.py: model_call`, whose `CallInput` and row it completes.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from addons.conversations import Conversations, new_turn
from addons.items import Item, output_items, surface_hash
from addons.recorder import breakdown
from addons.recorder.cache_rows import cache_rows, call_facts
from addons.records import ResponseSummary
from capsem.store.rows import InputPart, ItemList, ModelCall, ModelItem, Row, new_event_id
from pricing.estimate import count_tokens

if TYPE_CHECKING:
    from addons.recorder.build import CallInput


# Long on purpose: the conversation's previous list decides shared prefix, turn and parent
# together; split, that state would be passed between pieces.
def item_rows(
    call: CallInput, row: ModelCall, summary: ResponseSummary, conversations: Conversations
) -> tuple[list[Row], list[Item]]:
    """The items of a model call: the inputs new since the previous call of its conversation and
    the outputs (`model_items`), its whole input list (`model_item_lists`), the call's item columns
    set on `row`; and the items whose content the session has not stored yet (they go into the
    call's content frame with its bodies, addons/recorder/bodies.py)."""
    inputs = list(call.items)
    hashes = [i.hash for i in inputs]
    previous = conversations.previous(inputs, call.previous_response_id)
    seen = set(previous.hashes) if previous else set()
    shared = 0
    if previous is not None and call.previous_response_id is None:
        for a, b in zip(previous.hashes, hashes, strict=False):
            if a != b:
                break
            shared += 1
    elif previous is not None:
        shared = len(previous.hashes)  # a continuation: the earlier list, then this request's items
    outputs = output_items(summary)
    fresh_inputs = [i.hash not in seen for i in inputs]
    parent = None
    if previous is None:
        spawn = conversations.spawned_by(inputs)
        parent = spawn.tool_call_id if spawn else None
        row.turn_id = spawn.turn_id if spawn else uuid.uuid4().hex[:16]
    else:
        parent = previous.parent
        row.turn_id = (
            uuid.uuid4().hex[:16] if new_turn(inputs, fresh_inputs) and parent is None else previous.turn_id
        )
    row.parent_tool_call_id = parent
    rows: list[Row] = []
    fresh_items = []
    for entry in (*inputs, *outputs):
        if entry.hash not in conversations.stored:
            conversations.stored.add(entry.hash)
            fresh_items.append(entry)
    new = 0
    for direction, entries in (("input", inputs), ("output", outputs)):
        for index, entry in enumerate(entries):
            fresh = direction == "output" or entry.hash not in seen
            if not fresh:
                continue
            new += direction == "input"
            rows.append(ModelItem(
                event_id=new_event_id(), model_call_id=row.id, timestamp=row.timestamp, provider=row.provider,
                model=row.model, path=row.path, trace_id=row.trace_id, turn_id=row.turn_id, kind=entry.kind,
                direction=direction,
                item_index=index, role=entry.role, call_id=entry.call_id, tool_name=entry.tool_name,
                content_hash=entry.hash, new=1,
            ))  # fmt: skip
    continuation = call.previous_response_id is not None and previous is not None
    own = hashes if continuation else hashes[shared:]
    rows.append(ItemList(row.id, previous.call_id if previous and shared else None, shared if previous else 0,
                         b"".join(bytes.fromhex(h[:32]) for h in own)))  # fmt: skip
    system = next((i for i in inputs if i.kind == "system"), None)
    row.system_hash, row.tools_hash = (
        (system.hash if system else None),
        surface_hash(inputs, "tool_definition"),
    )
    row.items_count, row.items_new = len(inputs), new
    conversations.remember(row.id, inputs, summary.message_id, row.turn_id, parent)
    rows += input_parts(row, [(i, i.hash not in seen) for i in inputs], summary, conversations)
    rows += cache_breaks(row, call, inputs, summary, conversations, previous.call_id if previous else None)
    return rows, fresh_items


def cache_breaks(row: ModelCall, call: CallInput, inputs: list[Item], summary: ResponseSummary,
                 conversations: Conversations, earlier: int | None) -> list[Row]:  # fmt: skip
    """The call's cache break and compaction against the earlier call of its conversation."""
    facts = call_facts(row, call.started, call.ended, inputs, summary, conversations)
    key = (row.provider, row.model)
    if key not in conversations.rates:
        conversations.rates[key] = breakdown.rates(row.provider, row.model)
    earlier_facts = conversations.facts.get(earlier) if earlier is not None else None
    rows = cache_rows(earlier_facts, facts, conversations.rates[key])
    conversations.facts[row.id] = facts
    while len(conversations.facts) > 64:  # the recent calls a later one may continue
        conversations.facts.pop(next(iter(conversations.facts)))
    return rows


def input_parts(
    row: ModelCall, items: list[tuple[Item, bool]], summary: ResponseSummary, conversations: Conversations
) -> list[Row]:
    """Where the call's input tokens went, when the provider reported them (addons/recorder/breakdown.py)."""
    usage = summary.usage
    if not items or not usage.input_tokens or "input_tokens" in usage.estimated:
        return []

    def count(entry: Item) -> int:
        n = conversations.tokens.get(entry.hash)
        if n is None:
            n = conversations.tokens[entry.hash] = count_tokens(entry.content)
        return n

    key = (row.provider, row.model)
    if key not in conversations.rates:
        conversations.rates[key] = breakdown.rates(row.provider, row.model)
    tokens = breakdown.scale(breakdown.estimate(items, count), usage.input_tokens)
    parts = breakdown.split(tokens, usage.cache_read or 0, usage.cache_write or 0, conversations.rates[key])
    return [
        InputPart(new_event_id(), row.id, p.name, p.tokens, p.cache_read, p.cache_write, p.cost_usd)
        for p in parts
        if p.tokens
    ]
