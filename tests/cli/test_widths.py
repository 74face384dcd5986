"""Issue 25, point 4: tables and text at 80 columns. As seen: `inspect-session` wrapped mid-word
(`api.anthropic.co` / `m`) even at 100 columns; `query-session` cut headers (`estimated_cost_us`)
and printed `1.785e-05`; `bundle query` squeezed columns to 5 characters; `doctor` split its
copy-paste URL over two lines. Every output is checked at 80 and 160 columns (and 100 where it was
seen)."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from assembler.doctor import Finding
from assembler.doctor_cli import print_finding
from assembler.query import QueryResult
from assembler.tables import print_rows, value_text
from tests.cli.conftest import execute, recorded_id, run, session_db

WIDTHS = ("80", "100", "160")


def fits(out: str, width: int) -> None:
    assert all(len(line.rstrip()) <= width for line in out.splitlines()), out


@pytest.mark.parametrize("width", WIDTHS)
def test_inspect_session_folds_whole_words(home, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", width)
    out = run("inspect-session", recorded_id(home))
    fits(out, int(width))
    words = out.split()
    assert "api.anthropic.com" in words and "api.openai.com" in words
    assert not any(line.rstrip().endswith(("api.anthropic.co", "api.openai.co")) for line in out.splitlines())


@pytest.mark.parametrize("width", WIDTHS)
def test_query_session_keeps_headers_whole_and_numbers_plain(home, monkeypatch, width):
    execute(session_db(home), "UPDATE model_calls SET estimated_cost_usd = 1.785e-05 WHERE id = 1")
    monkeypatch.setenv("COLUMNS", width)
    sql = "SELECT id, provider, model, input_tokens, output_tokens, estimated_cost_usd, stop_reason FROM model_calls"
    out = run("query-session", sql, recorded_id(home))
    fits(out, int(width))
    assert "estimated_cost_usd" in out.split() and "0.00001785" in out.split() and "e-05" not in out
    assert "stop_reason" in out.split()
    wide = run("query-session", "SELECT * FROM model_calls", recorded_id(home))
    fits(wide, int(width))
    assert re.search(
        r"^estimated_cost_usd +0\.00001785 *$", wide, re.M
    )  # too wide for a table: one block per row


def test_numbers_print_as_numbers():
    assert [value_text(v) for v in (1.785e-05, 0.5, 3, None, 1e21, 2.0)] == [
        "0.00001785", "0.5", "3", "NULL", "1000000000000000000000", "2.0"]  # fmt: skip


@pytest.mark.parametrize("width", (80, 160))
def test_bundle_query_columns_are_never_squeezed(width):
    """The bundle's wide tables (timestamps, paths, messages) print as `print_rows` does: a table
    whose columns are whole, or one block per row."""
    columns = ["id", "timestamp", "logger", "level", "message", "source_path", "line", "session_id"]
    rows = [(1, "2026-11-20T10:00:00.123456Z", "demo.agent", "WARNING", "retrying the upload after a timeout",
             "/var/log/agent/run-2026-11-20.log", 42, "20261120-100000-abcd")]  # fmt: skip
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_rows(console, columns, rows)
    out = console.export_text()
    fits(out, width)
    for value in ("2026-11-20T10:00:00.123456Z", "/var/log/agent/run-2026-11-20.log", "20261120-100000-abcd"):
        assert value in out  # never cut
    for name in columns:
        assert name in out.split()
    assert QueryResult(columns, rows, False).columns == columns


@pytest.mark.parametrize("width", (80, 160))
def test_doctor_never_breaks_a_url(width):
    url = "https://raw.githubusercontent.com/pydantic/genai-prices/main/prices/data.json"
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_finding(console, Finding("prices", "warn", "the price table is 200 days old",
                                   f"capsem update-prices --from {url} installs the newest"))  # fmt: skip
    out = console.export_text()
    assert any(url in line for line in out.splitlines()), out


@pytest.mark.parametrize("width", (80, 160))
def test_a_long_host_and_path_is_shortened_at_a_slash_not_cut_mid_word(width):
    """Issue 35, point 7: the run summary's errors showed `…plugins.git/info/r` / `efs HTTP 404`."""
    from assembler.tables import Column, fit_table

    where = "GET github.com/anthropics/claude-plugins-official.git/info/refs HTTP 404"
    cols = [Column("what", "left", 10, wrap=True), Column("error", "left", 10, wrap=True)]
    table = fit_table(cols, [[where, "Not Found: the repository has no such ref, or it is private"]], width)
    console = Console(width=width, record=True)
    console.print(table)
    out = console.export_text()
    fits(out, width)
    words = out.split()
    assert "github.com/…/info/refs" in words and "404" in words and "HTTP" in words
    assert not any(w.startswith(("efs", "refs")) or w.endswith("/r") for w in words)


def test_small_counts_give_way_before_a_command_wraps():
    """Issue 35, point 7: at 160 columns list-sessions wrapped `claude -p 'list files'` while it
    showed the `mcp` and `fs` counts; those go first, so a short command stays on one line."""
    from assembler.tables import Column, fit_table

    columns = [Column("ID", "left", 10), Column("tokens", "right", 5), Column("mcp", "right", 1),
               Column("fs", "right", 1), Column("Command", "left", 8, wrap=True)]  # fmt: skip
    rows = [["20261128-123711-97b2*", "24,141", "0", "0", "claude -p 'list files'"]]
    console = Console(width=60, record=True)
    console.print(fit_table(columns, rows, 60))
    out = console.export_text()
    assert "claude -p 'list files'" in out and "tokens" in out
    assert "mcp" in out.split() and "fs" not in out.split()  # only as much as it takes
    console = Console(width=50, record=True)
    console.print(fit_table(columns, rows, 50))
    assert "tokens" in console.export_text() and "mcp" not in console.export_text().split()
