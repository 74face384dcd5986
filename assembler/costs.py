"""Tokens and cost by token type, as ccusage shows them: input, cache write, cache read, output
and reasoning.

session.db keeps inclusive totals (`input_tokens` counts cache reads and writes, `output_tokens`
counts reasoning) with the breakdown in `usage_details`, and the cost split by token type in
`cost_details.parts` (`pricing.price_call`). `Usage` is that breakdown for one call or a sum of
calls; `call_usage` reads it from a model_calls row, `why` says what made a call expensive.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from pricing import PARTS

PART_LABELS = {"input": "input", "cache_write": "cache write", "cache_read": "cache read", "output": "output",
               "reasoning": "reasoning"}  # fmt: skip


@dataclass(frozen=True)
class Usage:
    """Calls, tokens and cost, with the token breakdown and the cost by token type.

    `input_tokens` and `output_tokens` are inclusive (cache reads and writes are part of the
    input, reasoning part of the output), as in session.db; `uncached_input` is what ccusage
    calls input."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    reasoning_tokens: int = 0
    input_cost: float = 0.0
    cache_write_cost: float = 0.0
    cache_read_cost: float = 0.0
    output_cost: float = 0.0
    reasoning_cost: float = 0.0
    cache_break_cost: float = 0.0
    """What prompt-cache breaks cost over reading from the cache (part of `cost`, not beside it)."""

    @property
    def uncached_input(self) -> int:
        return max(0, self.input_tokens - self.cache_read_tokens - self.cache_write_tokens)

    def cost_by_type(self) -> dict[str, float]:
        """The cost split by token type (`pricing.PARTS`); the parts add up to `cost`."""
        return {part: getattr(self, f"{part}_cost") for part in PARTS}

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(Usage)))

    def to_json(self) -> dict:
        return {"calls": self.calls, "input_tokens": self.input_tokens, "uncached_input_tokens": self.uncached_input,
                "cache_write_tokens": self.cache_write_tokens, "cache_read_tokens": self.cache_read_tokens,
                "output_tokens": self.output_tokens, "reasoning_tokens": self.reasoning_tokens, "cost": self.cost,
                "cost_by_type": self.cost_by_type(), "lost_to_cache_breaks": self.cache_break_cost}  # fmt: skip


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def call_usage(row: Mapping[str, Any]) -> Usage:
    """The breakdown of one call, from a row of `capsem.rollup.CALL_USAGE_SQL`."""
    return Usage(
        1, row["input_tokens"] or 0, row["output_tokens"] or 0, row["estimated_cost_usd"] or 0.0,
        _int(row["cache_write"]), _int(row["cache_read"]), _int(row["reasoning"]), row["input_cost"] or 0.0,
        row["cache_write_cost"], row["cache_read_cost"], row["output_cost"], row["reasoning_cost"],
    )  # fmt: skip


def tokens_of(usage: Usage, part: str) -> int:
    """The tokens behind one part of the cost."""
    if part == "input":
        return usage.uncached_input
    if part == "output":
        return max(0, usage.output_tokens - usage.reasoning_tokens)
    return getattr(usage, f"{part}_tokens")


def split_line(usage: Usage, money: str = "{:.4f}") -> str:
    """`input $0.0120 (12%) · cache write $0.0750 (70%) · ...`: the non-zero parts of the cost."""
    parts = [(k, v) for k, v in usage.cost_by_type().items() if abs(v) >= 5e-7]
    if not parts or usage.cost <= 0:
        return ""
    return " · ".join(f"{PART_LABELS[k]} ${money.format(v)} ({100 * v / usage.cost:.0f}%)" for k, v in parts)


def why(usage: Usage) -> str:
    """What made a call cost what it did: its largest parts with their tokens, e.g.
    `cache write 20,000 tok $0.0750 (85%), output 310 tok $0.0047 (5%)`."""
    if usage.cost <= 0:
        return "no cost recorded" if usage.calls else ""
    parts = sorted(usage.cost_by_type().items(), key=lambda kv: -kv[1])
    shown = [kv for kv in parts[:2] if kv[1] > 0 and (kv is parts[0] or kv[1] >= 0.1 * usage.cost)]
    return ", ".join(
        f"{PART_LABELS[k]} {tokens_of(usage, k):,} tok ${v:.4f} ({100 * v / usage.cost:.0f}%)"
        for k, v in shown
    )
