"""Prices and cost: a small typed facade over genai-prices.

`price_call()` prices one model call from its normalized usage (inclusive input, inclusive
output, cache reads and writes). It never guesses: an unknown provider or model gives `None`
(stored as NULL). Which price table answered is part of the result, so every row says where
its number came from.

The table is genai-prices' bundled snapshot, or `$CAPSEM_HOME/prices.json` when
`capsem update-prices` has saved one (same JSON schema as genai-prices' `data.json`). No
network is ever used here.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import genai_prices
from genai_prices import Usage as _GPUsage
from genai_prices.data_snapshot import DataSnapshot, _bundled_snapshot
from genai_prices.types import calc_mtok_price, providers_schema

from capsem.paths import capsem_home

__all__ = ["PARTS", "PriceTable", "Priced", "load_table", "price_call", "provider_price_id"]

PARTS = ("input", "cache_write", "cache_read", "output", "reasoning")
"""Token types a cost is split into: uncached input, cache writes (1-hour ones included), cache
reads, output other than reasoning, reasoning (billed as output)."""

# Our provider names -> genai-prices provider ids. Providers missing here are never priced.
_PROVIDER_IDS: dict[str, str] = {
    "anthropic": "anthropic",
    "openai": "openai",
    "google": "google",
    "azure": "azure",
    "openrouter": "openrouter",
    "groq": "groq",
    "mistral": "mistral",
    "deepseek": "deepseek",
    "xai": "x-ai",
    "bedrock": "aws",
    "vertex": "google",
}

# Anthropic bills 1-hour cache writes at 2x the base input price (5-minute writes at 1.25x,
# which is genai-prices' cache_write price). genai-prices has no 1-hour field, so the
# difference is added here.
_ONE_HOUR_WRITE_MULTIPLIER = Decimal(2)


def provider_price_id(provider: str) -> str | None:
    """The genai-prices provider id for one of our provider names, or None if unpriced."""
    return _PROVIDER_IDS.get(provider)


@dataclass(frozen=True)
class PriceTable:
    """A loaded price snapshot and a short description of where it came from."""

    snapshot: DataSnapshot
    source: str
    """e.g. ``genai-prices 0.0.61 (bundled)`` or ``/home/u/.capsem/prices.json (sha256 1a2b3c4d5e6f)``."""


@dataclass(frozen=True)
class Priced:
    """The cost of one call."""

    total_usd: Decimal
    source: str
    model_id: str
    provider_id: str
    details: dict[str, str] = field(default_factory=dict)
    """Cost components in USD as strings (input, output, cache_write_1h_surcharge)."""
    parts: dict[str, Decimal] = field(default_factory=dict)
    """The cost split by token type (`PARTS`); the parts add up to `total_usd`."""


_lock = threading.Lock()
_table: PriceTable | None = None


def user_prices_path() -> Path:
    return capsem_home() / "prices.json"


def load_table(path: Path | None = None) -> PriceTable:
    """Load a price table: `path`, else `$CAPSEM_HOME/prices.json` if present, else bundled.

    Raises:
        ValueError: when an explicitly given file is not a valid genai-prices data file.
    """
    path = path or (user_prices_path() if user_prices_path().is_file() else None)
    if path is None:
        return PriceTable(_bundled_snapshot(), f"genai-prices {genai_prices.__version__} (bundled)")
    raw = path.read_bytes()
    try:
        providers = providers_schema.validate_json(raw)
    except Exception as exc:
        raise ValueError(f"{path} is not a genai-prices data file: {exc}") from exc
    digest = hashlib.sha256(raw).hexdigest()[:12]
    return PriceTable(DataSnapshot(providers=providers, from_auto_update=True), f"{path} (sha256 {digest})")


def current_table() -> PriceTable:
    """The table in use for this process (loaded once; `reset_table()` reloads)."""
    global _table
    with _lock:
        if _table is None:
            try:
                _table = load_table()
            except (OSError, ValueError):
                # A broken saved table must not stop capture: fall back to the bundled data.
                _table = PriceTable(_bundled_snapshot(), f"genai-prices {genai_prices.__version__} (bundled)")
        return _table


def reset_table() -> None:
    global _table
    with _lock:
        _table = None


def price_call(
    *,
    provider: str,
    model: str | None,
    input_tokens: int | None,
    output_tokens: int | None,
    cache_read: int | None = None,
    cache_write: int | None = None,
    cache_write_1h: int | None = None,
    reasoning: int | None = None,
    at: datetime | None = None,
    table: PriceTable | None = None,
) -> Priced | None:
    """Price one call from normalized usage; None when it cannot be priced exactly.

    Args:
        provider: our provider name (``anthropic``, ``openai``, ``google``...).
        model: the model name as recorded.
        input_tokens: all input tokens, cached ones included.
        output_tokens: all billed output tokens, reasoning included.
        cache_read: input tokens read from the cache.
        cache_write: input tokens written to the cache (all TTLs).
        cache_write_1h: part of `cache_write` with a 1-hour TTL.
        reasoning: part of `output_tokens` spent on reasoning (only splits the cost).
        at: when the call happened (selects dated prices); defaults to now.
        table: price table to use; defaults to the process table.

    Returns:
        The cost, or None for an unknown provider or model, or when no token count is known.
    """
    provider_id = provider_price_id(provider)
    if provider_id is None or not model or len(model) > 200:
        return None
    if input_tokens is None and output_tokens is None:
        return None
    table = table or current_table()
    usage = _GPUsage(
        input_tokens=input_tokens or 0,
        output_tokens=output_tokens or 0,
        cache_read_tokens=cache_read or None,
        cache_write_tokens=cache_write or None,
    )
    try:
        calc = table.snapshot.calc(usage, model, provider_id, None, at)
    except LookupError:
        return None
    total = calc.total_price
    details = {"input": str(calc.input_price), "output": str(calc.output_price)}
    mp, all_input = calc.model_price, input_tokens or 0
    cache_write_cost = calc_mtok_price(mp.cache_write_mtok, cache_write or 0, all_input)
    if cache_write_1h and provider_id == "anthropic":
        base = calc_mtok_price(mp.input_mtok, cache_write_1h, all_input)
        five_minute = calc_mtok_price(mp.cache_write_mtok, cache_write_1h, all_input)
        surcharge = base * _ONE_HOUR_WRITE_MULTIPLIER - five_minute
        if surcharge > 0:
            total += surcharge
            cache_write_cost += surcharge
            details["cache_write_1h_surcharge"] = str(surcharge)
    cache_read_cost = calc_mtok_price(mp.cache_read_mtok, cache_read or 0, all_input)
    reasoning_cost = min(calc_mtok_price(mp.output_mtok, reasoning or 0, all_input), calc.output_price)
    parts = {"cache_write": cache_write_cost, "cache_read": cache_read_cost, "reasoning": reasoning_cost,
             "output": calc.output_price - reasoning_cost}  # fmt: skip
    parts["input"] = total - sum(parts.values())  # uncached input (and any per-request fee)
    return Priced(total, table.source, calc.model.id, calc.provider.id, details,
                  {name: parts[name] for name in PARTS})  # fmt: skip
