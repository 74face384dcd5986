"""The most a call to a model can cost for a number of tokens: what a budget reserves.

`rates()` finds a model in the price table (the one `price_call` uses) once per provider and
model (cached: a budget check costs a dictionary lookup); `worst_cost()` prices input tokens at
the most expensive class the call could be billed at (uncached input, cache writes, Anthropic's
1-hour cache writes at twice the input price, cache reads, audio) and output tokens at the output
price (reasoning is billed as output), at the tier the input reaches, under the dearest of the
model's conditional prices (time-of-day discounts and dated changes alike), plus any per-request
fee. Server-side tool fees (web search per thousand searches) are not in the table and not
counted.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from pricing import current_table, provider_price_id

if TYPE_CHECKING:
    from genai_prices.types import ModelPrice


@dataclass(frozen=True, slots=True)
class Rates:
    """A model's prices as the table has them."""

    model_id: str
    context_window: int | None
    prices: tuple[ModelPrice, ...]
    one_hour_writes: bool
    """Anthropic bills 1-hour cache writes at twice the input price (not in the table)."""


def rates(provider: str, model: str | None) -> Rates | None:
    """The model's prices, None when the table has none (unknown provider or model)."""
    if not model or len(model) > 200:
        return None
    return _rates(provider, model, current_table().source)


@functools.lru_cache(maxsize=4096)
def _rates(provider: str, model: str, source: str) -> Rates | None:
    provider_id = provider_price_id(provider)
    if provider_id is None:
        return None
    try:
        _, info = current_table().snapshot.find_provider_model(model, None, provider_id, None)
    except LookupError:
        return None
    prices = (info.prices,) if not isinstance(info.prices, list) else tuple(c.prices for c in info.prices)
    return Rates(info.id, info.context_window, prices, provider_id == "anthropic")


def worst_cost(rates: Rates, input_tokens: int, output_tokens: int) -> float:
    """The most `input_tokens` in and `output_tokens` out can cost, in USD."""
    from genai_prices.types import calc_mtok_price

    n = input_tokens
    worst = Decimal(0)
    for p in rates.prices:
        classes = [calc_mtok_price(m, n, n) for m in
                   (p.input_mtok, p.cache_write_mtok, p.cache_read_mtok, p.input_audio_mtok)]  # fmt: skip
        if rates.one_hour_writes:
            classes.append(calc_mtok_price(p.input_mtok, n, n) * 2)
        out = max(
            calc_mtok_price(p.output_mtok, output_tokens, n),
            calc_mtok_price(p.output_audio_mtok, output_tokens, n),
        )
        fee = (p.requests_kcount or Decimal(0)) / 1000
        worst = max(worst, max(classes) + out + fee)
    return float(worst)


def warm() -> None:
    """Load the price table and genai-prices now (off the event loop), not at the first check."""
    current_table()
    from genai_prices.types import calc_mtok_price  # noqa: F401
