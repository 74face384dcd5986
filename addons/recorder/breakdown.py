"""Where a call's input tokens went: system prompt, tool definitions, history, new input, tool results.

The provider reports one input count; this splits it by source. Each input item (addons/items.py)
is counted offline with the tokenizer (`pricing.estimate`, counted once per distinct item), the
counts are summed per part, and the parts are scaled so that they add up exactly to the provider's
`input_tokens` (largest remainders; the split is an estimate and says so, the total is not).
Cached tokens are given to the parts in prompt order (a cache covers the start of the prompt):
cache reads first, then cache writes, the rest uncached; each part is priced with the call's own
rates for the three.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from addons.items import Item
from addons.mcp.wire import mcp_tool_name

PARTS = ("tool_definitions", "mcp_tool_definitions", "system", "history", "tool_results", "new_input")
"""In prompt order (tools and system come first; the newest messages last)."""


@dataclass(frozen=True, slots=True)
class Part:
    name: str
    tokens: int
    cache_read: int
    cache_write: int
    cost_usd: float | None


def part_of(item: Item, new: bool) -> str:
    if item.kind == "tool_definition":
        return (
            "mcp_tool_definitions" if item.tool_name and mcp_tool_name(item.tool_name) else "tool_definitions"
        )
    if item.kind == "system":
        return "system"
    if not new or item.kind == "tool_call" or item.role in ("assistant", "model"):
        return "history"  # what the previous calls sent, and the model's own earlier answers
    return "tool_results" if item.kind == "tool_result" else "new_input"


def estimate(items: Iterable[tuple[Item, bool]], count: Callable[[Item], int]) -> dict[str, int]:
    """Tokenizer counts per part of `(item, is_new)` pairs."""
    out = dict.fromkeys(PARTS, 0)
    for entry, new in items:
        out[part_of(entry, new)] += count(entry)
    return out


def scale(estimates: dict[str, int], total: int) -> dict[str, int]:
    """`estimates` scaled to add up to `total` exactly (largest remainders, ties in prompt order)."""
    whole = sum(estimates.values())
    if whole <= 0 or total <= 0:
        return dict.fromkeys(estimates, 0)
    shares = {k: v * total / whole for k, v in estimates.items()}
    out = {k: int(v) for k, v in shares.items()}
    left = total - sum(out.values())
    for name in sorted(shares, key=lambda k: (out[k] - shares[k], PARTS.index(k)))[:left]:
        out[name] += 1
    return out


def split(tokens: dict[str, int], cache_read: int, cache_write: int,
          rates: tuple[float, float, float] | None) -> list[Part]:  # fmt: skip
    """Parts with their cached tokens (given in prompt order) and their cost at `rates`
    (USD per token: uncached input, cache read, cache write; None: unpriced)."""
    read, write = cache_read, cache_write
    out = []
    for name in PARTS:
        n = tokens.get(name, 0)
        r = min(n, read)
        w = min(n - r, write)
        read, write = read - r, write - w
        cost = None if rates is None else (n - r - w) * rates[0] + r * rates[1] + w * rates[2]
        out.append(Part(name, n, r, w, cost))
    return out


def rates(provider: str, model: str | None, at: object = None) -> tuple[float, float, float] | None:
    """USD per input token of `model`: uncached, read from the cache, written to the cache (None: unpriced)."""
    from pricing import price_call  # genai-prices loads lazily (the recorder warms it up)

    # a small probe: a million input tokens is priced at a long-context tier (Sonnet 4.5: twice the rate)
    probe = 1_000

    def per_token(**usage: int) -> float | None:
        priced = price_call(
            provider=provider, model=model, input_tokens=probe, output_tokens=0, at=at, **usage
        )  # type: ignore[arg-type]
        return float(priced.total_usd) / probe if priced else None

    base = per_token()
    if base is None:
        return None
    read = per_token(cache_read=probe)
    write = per_token(cache_write=probe)
    return base, base if read is None else read, base if write is None else write
