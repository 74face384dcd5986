"""cost-report and update-prices on a recorded session."""

from __future__ import annotations

import json
import re

from assembler.cli import cli
from pricing import price_call, reset_table, user_prices_path
from tests.cli.conftest import run

SMALL_TABLE = """[{"id": "anthropic", "name": "Anthropic", "api_pattern": "https://api\\\\.anthropic\\\\.com",
  "models": [{"id": "claude-sonnet-4-5", "match": {"starts_with": "claude-sonnet-4-5"},
              "prices": {"input_mtok": 4, "output_mtok": 20}}]}]"""


def test_cost_report_table_json_and_html(home, tmp_path):
    rows = json.loads(run("cost-report", "--by", "provider", "--json"))
    assert {r["key"] for r in rows} == {"anthropic", "openai"}
    assert all(r["cost"] > 0 and r["calls"] == 2 for r in rows)
    out = run("cost-report", "--by", "model")
    assert "anthropic/claude-sonnet-4-5" in out and "openai/gpt-4.1" in out and "total" in out
    page = tmp_path / "cost.html"
    run("cost-report", "--html", str(page))
    text = page.read_text()
    assert "<svg" in text and "claude-sonnet-4-5" in text and not re.search(r"(src|href)=\"https?://", text)
    assert json.loads(run("cost-report", "--since", "2999-01-01", "--json")) == []


def test_update_prices_validates_then_swaps(home, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a price table"}')
    assert "not a genai-prices data file" in run("update-prices", "--from", str(bad), code=1)
    assert not user_prices_path().exists()
    good = tmp_path / "data.json"
    good.write_text(SMALL_TABLE)
    out = run("update-prices", "--from", str(good), "--dry-run")
    assert "changed: anthropic/claude-sonnet-4-5" in out and "nothing installed" in out
    assert not user_prices_path().exists()
    run("update-prices", "--from", str(good))
    assert user_prices_path().read_text() == SMALL_TABLE
    reset_table()
    priced = price_call(
        provider="anthropic", model="claude-sonnet-4-5", input_tokens=1_000_000, output_tokens=0
    )
    assert priced is not None and priced.total_usd == 4 and str(user_prices_path()) in priced.source
    assert price_call(provider="openai", model="gpt-4.1", input_tokens=1, output_tokens=1) is None
    reset_table()


def test_help_has_examples():
    for command in ("cost-report", "update-prices"):
        assert "Example" in run(command, "--help")
    assert cli.name == "cli"
