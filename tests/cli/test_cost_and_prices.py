"""cost-report and update-prices on recorded sessions."""

from __future__ import annotations

import functools
import http.server
import json
import re
import threading
from decimal import Decimal

import pytest

from assembler.reports import CostRow, group, svg_timeline
from pricing import default_prices_path, price_call, reset_table, user_prices_path
from tests.cli.conftest import clone_session, days_ago, execute, recorded_id, run

# --- cost-report ---------------------------------------------------------------------------------


def test_cost_report_table_json_and_html(home, tmp_path):
    report = json.loads(run("cost-report", "--by", "provider", "--json"))
    assert {r["key"] for r in report["rows"]} == {"anthropic", "openai"}
    assert all(r["cost"] > 0 and r["calls"] == 2 and r["sessions"] == 1 for r in report["rows"])
    assert report["totals"]["calls"] == 4 and report["totals"]["unpriced_calls"] == 0
    out = run("cost-report", "--by", "model")
    assert "anthropic/claude-sonnet-4-5" in out and "openai/gpt-4.1" in out and "total" in out
    assert f"${report['totals']['cost']:.4f}" in out
    page = tmp_path / "cost.html"
    assert "wrote" in run("cost-report", "--html", str(page))
    text = page.read_text()
    assert text.count("<html") == 1 and "<svg" in text and "claude-sonnet-4-5" in text
    assert "http://" not in text and "https://" not in text and "<script" not in text and "<link" not in text
    assert json.loads(run("cost-report", "--since", "2999-01-01", "--json"))["rows"] == []
    assert "No model calls" in run("cost-report", "--since", "2999-01-01")


def test_cost_report_over_days_sessions_and_live(home, tmp_path):
    old = clone_session(home, days_ago(10), suffix="0001")
    older = clone_session(home, days_ago(12), status="vacuumed", suffix="0002")
    clone_session(home, days_ago(40), suffix="0003")
    live = clone_session(home, days_ago(-0.01), status="running", suffix="0004")  # zeros in main.db
    execute(home / "main.db", f"DELETE FROM ai_usage WHERE session_id = '{older}' AND provider = 'openai'")
    (home / "sessions" / older).rename(home / "sessions" / "gone")  # culled: rollup rows still count
    per_session = json.loads(run("cost-report", "--by", "session", "--json"))
    by_id = {r["key"]: r for r in per_session["rows"]}
    assert (
        by_id[live]["calls"] == 4
        and by_id[live]["cost"] > 0
        and per_session["totals"]["live_sessions"] == [live]
    )
    assert by_id[older]["calls"] == 2 and by_id[old]["calls"] == 4
    assert per_session["totals"]["sessions"] == 5
    since = days_ago(13).date().isoformat()
    until = days_ago(9).date().isoformat()
    days = json.loads(run("cost-report", "--by", "day", "--since", since, "--until", until, "--json"))
    assert [r["key"] for r in days["rows"]] == [
        days_ago(12).date().isoformat(),
        days_ago(10).date().isoformat(),
    ]
    assert days["totals"]["calls"] == 6
    assert "1 running session read live" in run("cost-report")
    page = tmp_path / "r.html"
    run("cost-report", "--html", str(page), "--since", days_ago(45).date().isoformat())
    text = page.read_text()
    assert text.count("<svg") == 2 and "Cost over time" in text and "Cost by model" in text
    assert days_ago(40).date().isoformat() in text and recorded_id(home) in text
    assert not re.search(r"https?://", text)


def test_cost_report_user_errors(home, tmp_path, capsem_home):
    assert "Invalid value for '--since': 'yesterday' is not a day" in run(
        "cost-report", "--since", "yesterday", code=2
    )
    assert "is after --until" in run("cost-report", "--since", "2026-02-01", "--until", "2026-01-01", code=2)
    out = run("cost-report", "--html", str(tmp_path / "no" / "dir" / "r.html"), code=1)
    assert "cannot write" in out and str(tmp_path / "no" / "dir") in out
    (capsem_home / "main.db").unlink()
    assert "no main.db" in run("cost-report", code=1)


def test_cost_grouping_and_timeline_are_pure():
    from assembler.reports import Usage, UsageRow

    def u(calls, inp, out, cost, cache_read=0):
        return Usage(calls, inp, out, cost, cache_read_tokens=cache_read, input_cost=cost)

    usage = [UsageRow("s1", "2026-01-01", "openai", "gpt-4.1", u(2, 10, 5, 0.5, cache_read=4)),
             UsageRow("s1", "2026-01-01", "anthropic", "claude", u(1, 10, 5, 1.5)),
             UsageRow("s2", "2026-01-04", "openai", "gpt-4.1", u(1, 1, 1, 0.25))]  # fmt: skip
    assert group(usage, "provider") == [
        CostRow("anthropic", 1, u(1, 10, 5, 1.5)),
        CostRow("openai", 2, u(3, 11, 6, 0.75, cache_read=4)),
    ]
    assert group(usage, "provider")[1].usage.uncached_input == 7
    assert [r.key for r in group(usage, "day")] == ["2026-01-01", "2026-01-04"]
    assert [r.key for r in group(usage, "week")] == ["2026-W01"]  # Thursday 1 January starts ISO week 1
    assert [r.key for r in group(usage, "month")] == ["2026-01"]
    svg = svg_timeline(group(usage, "day"), "t")
    assert svg.count("<rect") == 4  # the days in between are drawn as zero
    assert "2026-01-01 … 2026-01-04" in svg


def test_relative_days():
    from datetime import date

    from assembler.reports import parse_day

    today = date(2026, 11, 23)
    assert parse_day("7d", today) == "2026-11-16" and parse_day("2w", today) == "2026-11-09"
    assert parse_day("today", today) == "2026-11-23" and parse_day("2026-01-05") == "2026-01-05"
    with pytest.raises(ValueError, match="'yesterday' is not a day: use YYYY-MM-DD, Nd"):
        parse_day("yesterday", today)


# --- update-prices -------------------------------------------------------------------------------


def edited_data(input_mtok: float = 4, drop: str = "groq") -> str:
    """The default table with claude-sonnet-4-5's input price changed and one provider removed."""
    data = [p for p in json.loads(default_prices_path().read_text()) if p["id"] != drop]
    (anthropic,) = [p for p in data if p["id"] == "anthropic"]
    (model,) = [m for m in anthropic["models"] if m["id"] == "claude-sonnet-4-5"]
    model["prices"]["input_mtok"]["base"] = input_mtok
    return json.dumps(data)


@pytest.fixture(autouse=True)
def _fresh_price_table():
    reset_table()
    yield
    reset_table()


def _sonnet_input_price() -> Decimal:
    """USD per million input tokens (below the 200k-token tier)."""
    priced = price_call(
        provider="anthropic", model="claude-sonnet-4-5", input_tokens=100_000, output_tokens=0
    )
    assert priced is not None
    return priced.total_usd * 10


def test_update_prices_validates_then_swaps(capsem_home, tmp_path):
    assert _sonnet_input_price() == 3
    bad = tmp_path / "bad.json"
    for text in ('{"not": "a price table"}', '[{"id": 1}]', "not json", "[]"):
        bad.write_text(text)
        out = run("update-prices", "--from", str(bad), code=1)
        assert str(bad) in out and ("not a genai-prices data file" in out or "no providers" in out), out
        assert not user_prices_path().exists()
    assert len(out) < 2000  # a short message, not thousands of pydantic errors

    good = tmp_path / "data.json"
    good.write_text(edited_data(4))
    out = run("update-prices", "--from", str(good), "--dry-run")
    assert "anthropic: 0 added, 0 removed, 1 changed" in out
    assert "~ claude-sonnet-4-5: input $3 ($6 from 200,000 tokens) -> $4 ($6 from 200,000 tokens)" in out
    assert "groq: 0 added, " in out and "  - llama-3.3-70b-versatile" in out and "nothing installed" in out
    assert not user_prices_path().exists()

    out = run("update-prices", "--from", str(good))
    assert f"installed: {user_prices_path()}" in out
    assert user_prices_path().read_text() == good.read_text()
    assert _sonnet_input_price() == 4  # later pricing uses the new table
    assert (
        price_call(provider="groq", model="llama-3.3-70b-versatile", input_tokens=1, output_tokens=1) is None
    )

    # an invalid file later leaves the installed table byte for byte
    bad.write_text('[{"id": "x"}]')
    run("update-prices", "--from", str(bad), code=1)
    assert user_prices_path().read_text() == good.read_text()
    reset_table()
    assert _sonnet_input_price() == 4

    # without --from: back to the default table, config/genai-prices.json (offline)
    out = run("update-prices")
    assert re.search(r"groq: [1-9]\d* added, 0 removed, 0 changed", out) and "using the default table" in out
    assert "new:     config/genai-prices.json (genai-prices data of 2026-08-21, sha256 " in out
    assert not user_prices_path().exists() and _sonnet_input_price() == 3
    assert price_call(provider="anthropic", model="claude-sonnet-5", input_tokens=1, output_tokens=1)
    assert "already using the default table" in run("update-prices")


def test_update_prices_replaces_an_unreadable_table(capsem_home, tmp_path):
    capsem_home.mkdir(parents=True, exist_ok=True)
    user_prices_path().write_text("garbage")
    good = tmp_path / "data.json"
    good.write_text(edited_data(5))
    out = run("update-prices", "--from", str(good))
    assert "unreadable" in out and "replaced as a whole" in out
    assert _sonnet_input_price() == 5


def test_update_prices_from_a_url(capsem_home, tmp_path):
    (tmp_path / "data.json").write_text(edited_data(7))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert "installed" in run("update-prices", "--from", f"{url}/data.json", "--json")
        assert _sonnet_input_price() == 7
        out = run("update-prices", "--from", f"{url}/missing.json", code=1)
        assert "cannot download" in out and "404" in out
    finally:
        server.shutdown()
        server.server_close()
    assert "no price file at" in run("update-prices", "--from", str(tmp_path / "nope.json"), code=1)
