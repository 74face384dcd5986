from decimal import Decimal

import pytest

from pricing import load_table, price_call
from pricing.estimate import count_tokens


def test_anthropic_cache_reads_writes_and_one_hour_writes():
    priced = price_call(
        provider="anthropic",
        model="claude-sonnet-4-5-20250929",
        input_tokens=10_000,
        output_tokens=100,
        cache_read=2_000,
        cache_write=3_000,
        cache_write_1h=1_000,
    )
    # 5000 uncached x $3 + 2000 reads x $0.30 + 3000 writes x $3.75 + 100 out x $15 (per MTok)
    # + 1000 one-hour writes x ($6 - $3.75)
    assert priced is not None
    assert priced.total_usd == Decimal("0.015") + Decimal("0.0006") + Decimal("0.01125") + Decimal(
        "0.0015"
    ) + Decimal("0.00225")
    assert priced.model_id == "claude-sonnet-4-5"
    assert priced.source.startswith("genai-prices ") and priced.source.endswith("(bundled)")


def test_openai_inclusive_input_and_reasoning_in_output():
    priced = price_call(
        provider="openai", model="gpt-4.1-2025-04-14", input_tokens=1_000, output_tokens=500, cache_read=400
    )
    assert priced.total_usd == Decimal(600 * 2 + 400 * 0.5 + 500 * 8) / Decimal(1_000_000)


@pytest.mark.parametrize(
    ("provider", "model"),
    [("openai", "gpt-5-private-fork"), ("unknown", "gpt-4o"), ("anthropic", None), ("anthropic", "x" * 8000)],
)
def test_never_guesses(provider, model):
    assert price_call(provider=provider, model=model, input_tokens=10, output_tokens=10) is None


def test_no_tokens_no_price():
    assert price_call(provider="openai", model="gpt-4o", input_tokens=None, output_tokens=None) is None


def test_saved_table_is_validated(tmp_path):
    bad = tmp_path / "prices.json"
    bad.write_text('{"not": "prices"}')
    with pytest.raises(ValueError, match="not a genai-prices data file"):
        load_table(bad)


def test_token_estimate_is_offline_and_sane():
    assert count_tokens("") == 0
    assert 2 <= count_tokens("hello world") <= 3
    assert count_tokens("ünïcode 🎉 " * 100) > 100


def test_cost_split_by_token_type_adds_up():
    priced = price_call(provider="anthropic", model="claude-sonnet-4-5", input_tokens=20_017, output_tokens=300,
                        cache_write=20_000, reasoning=100)  # fmt: skip
    parts = priced.parts
    assert list(parts) == ["input", "cache_write", "cache_read", "output", "reasoning"]
    # 17 uncached x $3, 20,000 writes x $3.75, 200 output x $15, 100 reasoning x $15 (per MTok)
    assert parts["input"] == Decimal(17 * 3) / 1_000_000
    assert parts["cache_write"] == Decimal(20_000) * Decimal("3.75") / 1_000_000
    assert parts["cache_read"] == 0
    assert (
        parts["output"] == Decimal(200 * 15) / 1_000_000
        and parts["reasoning"] == Decimal(100 * 15) / 1_000_000
    )
    assert sum(parts.values()) == priced.total_usd
    one_hour = price_call(provider="anthropic", model="claude-sonnet-4-5", input_tokens=1_000, output_tokens=0,
                          cache_write=1_000, cache_write_1h=1_000)  # fmt: skip
    assert one_hour.parts["cache_write"] == Decimal(1_000 * 6) / 1_000_000 == one_hour.total_usd
