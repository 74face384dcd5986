import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal

import pytest

import pricing
from pricing import current_table, default_table, load_table, price_call, reset_table, user_prices_path
from pricing.estimate import count_tokens

DEFAULT_SOURCE = "config/genai-prices.json (genai-prices data of 2026-08-21, sha256 "


@pytest.fixture(autouse=True)
def _fresh_price_table():
    reset_table()
    yield
    reset_table()


def data_prices(provider_id: str, model_id: str, at: datetime) -> dict[str, Decimal]:
    """A model's per-Mtok prices at `at`, read from config/genai-prices.json itself (plain JSON):
    for dated prices, the last entry whose start_date has come (genai-prices' rule)."""
    data = json.loads(pricing.default_prices_path().read_text())
    (provider,) = [p for p in data if p["id"] == provider_id]
    (model,) = [m for m in provider["models"] if m["id"] == model_id]
    entries = model["prices"] if isinstance(model["prices"], list) else [{"prices": model["prices"]}]
    due = [e for e in entries if e.get("constraint", {}).get("start_date", "") <= at.date().isoformat()]
    prices = due[-1]["prices"]
    assert all(isinstance(v, int | float) for v in prices.values()), (
        "tiered prices: not what this test derives"
    )
    return {k: Decimal(str(v)) for k, v in prices.items()}


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
    assert priced.source.startswith(DEFAULT_SOURCE) and priced.source.endswith(")")


@pytest.mark.parametrize("at", [datetime(2026, 8, 25, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC)])
def test_this_years_anthropic_model_from_the_default_table(at):
    """claude-sonnet-5 (unknown to genai-prices 0.0.61's own table), with its dated prices."""
    priced = price_call(provider="anthropic", model="claude-sonnet-5-20260801", input_tokens=10_000,
                        output_tokens=500, cache_read=2_000, cache_write=3_000, at=at)  # fmt: skip
    p = data_prices("anthropic", "claude-sonnet-5", at)
    want = (5_000 * p["input_mtok"] + 2_000 * p["cache_read_mtok"] + 3_000 * p["cache_write_mtok"]
            + 500 * p["output_mtok"]) / 1_000_000  # fmt: skip
    assert priced is not None and priced.model_id == "claude-sonnet-5"
    assert priced.total_usd == want > 0
    assert priced.source.startswith(DEFAULT_SOURCE)
    assert price_call(provider="anthropic", model="claude-sonnet-5", input_tokens=1, output_tokens=1,
                      table=pricing.bundled_table()) is None  # fmt: skip


def test_this_years_gemini_model_from_the_default_table():
    at = datetime(2026, 11, 1, tzinfo=UTC)
    priced = price_call(provider="google", model="gemini-3.6-flash", input_tokens=4_000, output_tokens=1_000,
                        cache_read=1_000, at=at)  # fmt: skip
    p = data_prices("google", "gemini-3.6-flash", at)
    want = (3_000 * p["input_mtok"] + 1_000 * p["cache_read_mtok"] + 1_000 * p["output_mtok"]) / 1_000_000
    assert priced is not None and priced.model_id == "gemini-3.6-flash" and priced.total_usd == want > 0
    assert priced.source.startswith(DEFAULT_SOURCE)


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


def test_a_saved_table_wins_and_a_broken_one_falls_back_to_the_default(capsem_home):
    user_prices_path().parent.mkdir(parents=True, exist_ok=True)
    user_prices_path().write_bytes(pricing.default_prices_path().read_bytes())
    assert current_table().source.startswith(f"{user_prices_path()} (sha256 ")
    reset_table()
    user_prices_path().write_text("[{")
    with pytest.raises(ValueError, match="not a genai-prices data file"):
        load_table()
    assert current_table().source.startswith(DEFAULT_SOURCE)


def test_without_the_default_table_the_bundled_one_prices(monkeypatch):
    def missing():
        raise FileNotFoundError("config/genai-prices.json not found")

    monkeypatch.setattr(pricing, "default_prices_path", missing)
    table = default_table()
    assert table.source.startswith("genai-prices 0.0.") and table.source.endswith("(bundled)")
    assert price_call(
        provider="anthropic", model="claude-sonnet-4-5", input_tokens=1, output_tokens=1, table=table
    )


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


def test_the_price_table_loads_without_httpx_command_line_client(tmp_path):
    """genai-prices imports httpx, and httpx its command-line client (click, rich, pygments) when
    they are installed: ~0.13 s of every recorder's start. The table loads without it, httpx keeps
    its stand-in `main`, and the client can still be imported later by whoever wants it."""
    code = (
        "import sys\n"
        "from pricing import price_call\n"
        "priced = price_call(provider='anthropic', model='claude-sonnet-4-5', input_tokens=1000, output_tokens=100)\n"
        "print(priced.source)\n"
        "print(sorted(m for m in ('click', 'rich', 'pygments', 'httpx._main') if m in sys.modules))\n"
        "import httpx, httpx._main\n"
        "print(callable(httpx.main), httpx._main.__name__)\n"
    )
    env = {**os.environ, "CAPSEM_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    source, hidden, later = out.splitlines()
    assert source.startswith("config/genai-prices.json")
    assert hidden == "[]"
    assert later == "True httpx._main"
