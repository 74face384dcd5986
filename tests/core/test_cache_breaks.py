"""Each cause of a cache break, its extra cost worked out by hand, and what is no break."""

from __future__ import annotations

import pytest

from capsem.cache_breaks import CallFacts, Part, Rates, compaction, find_break

# claude-sonnet-4-5: $3 input, $0.30 cache read, $3.75 cache write (5 min) per million tokens
SONNET = Rates(input=3e-6, cache_read=0.3e-6, cache_write=3.75e-6)
TOOLS = Part("t1", "tool definition Bash", 4_000, '{"name": "Bash"}')
SYSTEM = Part("s1", "system", 6_000, "You are Claude Code.")
FIRST = Part("m1", "message 1 (user)", 2_000, "fix the test", history=True)
ANSWER = Part("m2", "message 2 (assistant)", 1_000, "Running pytest.", history=True)


def call(call_id: int, *parts: Part, model: str = "claude-sonnet-4-5", at: float = 0.0, read: int = 0,
         write: int = 0, write_1h: int = 0, total: int | None = None) -> CallFacts:  # fmt: skip
    tokens = total if total is not None else sum(p.tokens for p in parts)
    return CallFacts(call_id, model, at, at + 2.0, tokens, read, write, write_1h, parts)


EARLIER = call(1, TOOLS, SYSTEM, FIRST, read=0, write=12_000)  # 12,000 tokens cached after it


def test_no_break_while_the_cache_read_stays_full():
    later = call(2, TOOLS, SYSTEM, FIRST, ANSWER, at=30, read=12_000, write=1_000)
    assert find_break(EARLIER, later, SONNET) is None
    changed_outside = call(
        2, TOOLS, SYSTEM, FIRST, Part("m2x", "message 2", 1_000), at=30, read=12_000, write=1_000
    )
    assert find_break(EARLIER, changed_outside, SONNET) is None  # a change past the cached prefix


def test_a_changed_tool_definition_breaks_the_cache_and_costs_the_rewrite():
    bash = Part("t1b", "tool definition Bash", 4_050, '{"name": "Bash", "timeout": 5}')
    later = call(2, bash, SYSTEM, FIRST, ANSWER, at=30, read=0, write=13_050)
    found = find_break(EARLIER, later, SONNET)
    assert found is not None and found.cause == "changed" and found.item_index == 0
    assert (found.item, found.before, found.after) == ("tool definition Bash", '{"name": "Bash"}',
                                                       '{"name": "Bash", "timeout": 5}')  # fmt: skip
    # 12,000 tokens that were cached were written again: 12,000 × ($3.75 − $0.30) / 1M = $0.0414
    assert found.extra_cost_usd == pytest.approx(0.0414)
    assert (found.cached_tokens, found.read_tokens) == (12_000, 0)


def test_a_changed_system_prompt_is_found_after_the_unchanged_tools():
    system = Part("s2", "system", 6_000, "You are Claude Code. Today is Tuesday.")
    later = call(2, TOOLS, system, FIRST, at=30, read=4_000, write=8_000)
    found = find_break(EARLIER, later, SONNET)
    assert found.cause == "changed" and found.item == "system" and found.item_index == 1
    # 8,000 lost, all written again: 8,000 × 3.45e-6 = $0.0276
    assert found.extra_cost_usd == pytest.approx(0.0276)


def test_an_expired_cache_and_the_one_hour_ttl():
    later = call(2, TOOLS, SYSTEM, FIRST, at=2 + 301, read=0, write=0, total=12_000)
    found = find_break(EARLIER, later, SONNET)
    # nothing written again: 12,000 tokens at the input rate instead of the read rate = $0.0324
    assert found.cause == "expired" and found.extra_cost_usd == pytest.approx(0.0324)
    hour = call(1, TOOLS, SYSTEM, FIRST, write=12_000, write_1h=12_000)
    assert find_break(hour, later, SONNET).cause == "unknown"  # 5 minutes is not an hour
    assert (
        find_break(hour, call(2, TOOLS, SYSTEM, FIRST, at=2 + 3601, total=12_000), SONNET).cause == "expired"
    )


def test_another_model_and_an_unknown_cause():
    haiku = call(2, TOOLS, SYSTEM, FIRST, model="claude-haiku-4-5", at=30, read=0, write=12_000)
    assert find_break(EARLIER, haiku, SONNET).cause == "model"
    same = call(2, TOOLS, SYSTEM, FIRST, ANSWER, at=30, read=6_000, write=7_000)
    found = find_break(EARLIER, same, None)
    assert found.cause == "unknown" and found.extra_cost_usd is None  # unpriced: no guess


def test_a_compaction_is_told_apart():
    long = call(1, TOOLS, SYSTEM, *[Part(f"h{i}", f"message {i}", 5_000, history=True) for i in range(20)])
    summary = call(
        2, TOOLS, SYSTEM, Part("sum", "message 1 (user)", 3_000, "Summary of the work so far", history=True)
    )
    assert compaction(long, summary) == (100_000, 3_000)
    assert compaction(EARLIER, call(2, TOOLS, SYSTEM, FIRST, ANSWER)) is None
