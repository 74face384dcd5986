"""Prices and cost: a small typed facade over genai-prices.

`price_call()` prices one model call from its normalized usage (inclusive input, inclusive
output, cache reads and writes). It never guesses: an unknown provider or model gives `None`
(stored as NULL). Which price table answered is part of the result, so every row says where
its number came from.

The table is `$CAPSEM_HOME/prices.json` when `capsem update-prices` has saved one, else the
default `config/genai-prices.json` (genai-prices' own price data, newer than the table bundled
with the genai-prices package, dated in `config/genai-prices.md`), else, if that file is
missing or broken, the package's bundled table. All are genai-prices' `data.json` schema. No
network is ever used here.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from capsem.paths import capsem_home, shipped_config_path

if TYPE_CHECKING:
    from genai_prices.data_snapshot import DataSnapshot

# genai-prices (with httpx and pydantic) is imported where a price is needed, not with this module:
# the recorder process would otherwise take 0.2 s longer to start (its warm-up thread loads prices)

__all__ = [
    "PARTS",
    "PriceTable",
    "Priced",
    "bundled_table",
    "current_table",
    "default_table",
    "load_table",
    "price_call",
    "provider_price_id",
    "reset_table",
    "user_prices_path",
]

logger = logging.getLogger(__name__)

DEFAULT_TABLE = "genai-prices.json"
"""The default table's name under `config/` (its note, with the table's date, is `genai-prices.md`)."""

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
    """e.g. ``config/genai-prices.json (genai-prices data of 2026-08-21, sha256 1a2b3c4d5e6f)``,
    ``/home/u/.capsem/prices.json (sha256 1a2b3c4d5e6f)`` or ``genai-prices 0.0.61 (bundled)``."""


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


def default_prices_path() -> Path:
    """`config/genai-prices.json` of the checkout or of the installed wheel (FileNotFoundError if absent)."""
    return shipped_config_path(DEFAULT_TABLE)


def _table_date(path: Path) -> str | None:
    """The date in the title of the note next to a shipped table (`genai-prices.md`), if any."""
    try:
        with path.with_suffix(".md").open(encoding="utf-8") as note:
            title = note.readline()
    except OSError:
        return None
    found = re.search(r"\d{4}-\d{2}-\d{2}", title)
    return found.group(0) if found else None


def _import_genai_prices() -> None:
    """Import genai-prices, without httpx's command-line client. genai-prices imports httpx (for
    its price updates, which capsem never runs), and httpx imports its command-line client (click,
    rich, pygments: ~0.13 s of CPU, a tenth of the recorder's start) whenever those are installed.
    A `None` in `sys.modules` makes that import fail, and httpx then defines its own stand-in
    `main`, as where they are not installed; the entry is removed again once genai-prices is in."""
    if "genai_prices" in sys.modules:
        return
    hidden = "httpx" not in sys.modules and "httpx._main" not in sys.modules
    if hidden:
        sys.modules["httpx._main"] = None  # type: ignore[assignment]
    try:
        import genai_prices  # noqa: F401
    finally:
        if hidden and sys.modules.get("httpx._main", False) is None:
            del sys.modules["httpx._main"]


def _parse(path: Path) -> tuple[DataSnapshot, str]:
    """A genai-prices `data.json` file's snapshot and the first 12 hex of its sha256.

    Raises:
        OSError: the file cannot be read.
        ValueError: the file is not a valid genai-prices data file.
    """
    _import_genai_prices()
    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import providers_schema

    raw = path.read_bytes()
    try:
        providers = providers_schema.validate_json(raw)
    except Exception as exc:
        raise ValueError(f"{path} is not a genai-prices data file: {exc}") from exc
    return DataSnapshot(providers=providers, from_auto_update=True), hashlib.sha256(raw).hexdigest()[:12]


def bundled_table() -> PriceTable:
    """The table bundled inside the installed genai-prices package (older than the default)."""
    _import_genai_prices()
    import genai_prices
    from genai_prices.data_snapshot import _bundled_snapshot

    return PriceTable(_bundled_snapshot(), f"genai-prices {genai_prices.__version__} (bundled)")


def default_table() -> PriceTable:
    """`config/genai-prices.json`, or the bundled table when that file is missing or broken."""
    try:
        path = default_prices_path()
        snapshot, digest = _parse(path)
    except (OSError, ValueError) as exc:
        logger.warning(
            "capsem: the default price table is unusable (%s); using genai-prices' bundled table", exc
        )
        return bundled_table()
    date = _table_date(path)
    of = f" of {date}" if date else ""
    return PriceTable(snapshot, f"config/{DEFAULT_TABLE} (genai-prices data{of}, sha256 {digest})")


def load_table(path: Path | None = None) -> PriceTable:
    """Load a price table: `path`, else `$CAPSEM_HOME/prices.json` if present, else the default.

    Raises:
        OSError: `path` or the saved table cannot be read.
        ValueError: `path` or the saved table is not a valid genai-prices data file.
    """
    path = path or (user_prices_path() if user_prices_path().is_file() else None)
    if path is None:
        return default_table()
    snapshot, digest = _parse(path)
    return PriceTable(snapshot, f"{path} (sha256 {digest})")


def current_table() -> PriceTable:
    """The table in use for this process (loaded once; `reset_table()` reloads)."""
    global _table
    with _lock:
        if _table is None:
            try:
                _table = load_table()
            except (OSError, ValueError) as exc:
                # A broken saved table must not stop capture: fall back to the default table.
                logger.warning(
                    "capsem: %s is unusable (%s); using the default price table", user_prices_path(), exc
                )
                _table = default_table()
        return _table


def reset_table() -> None:
    global _table
    with _lock:
        _table = None


# Long: its docstring documents every usage field; the body is one price calculation in order.
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
    from genai_prices import Usage as _GPUsage
    from genai_prices.types import calc_mtok_price

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
