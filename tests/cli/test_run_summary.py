"""What a user sees after `capsem run`: errors with their text, cache tokens and why a call cost
what it did, files changed and the final answer (issue 18, points 2 and 3 and the end-of-run
summary); the same numbers in list-sessions and cost-report (table, JSON, HTML).

One real run: the real anthropic SDK through a real mitmdump, the emulator upstream playing three
calls that each send ~20,000 input tokens (the first writes them to the cache, the next two read
them), one overloaded call, and a file written.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

from assembler.summary import render_session, session_summary
from tests.cli.conftest import execute, run
from tests.conftest import environ

AGENT = """
import pathlib, sys, anthropic
client = anthropic.Anthropic(api_key="sk-ant-api03-CACHESECRET00000000000000", max_retries=0)
msgs = [{"role": "user", "content": "summarize the repository"}]
for control in ("cache_write=20000", "cache_read=20000", "cache_read=20000"):
    answer = client.messages.create(model="claude-sonnet-4-5", max_tokens=300, messages=msgs,
                                    extra_headers={"x-emulator": f"scenario=text; input_tokens=17; {control}"})
try:
    client.messages.create(model="claude-sonnet-4-5", max_tokens=300, messages=msgs,
                           extra_headers={"x-emulator": "scenario=error; status=529"})
except anthropic.APIStatusError as exc:
    print("agent saw", exc.status_code)
pathlib.Path("summary.md").write_text(answer.content[0].text)
sys.exit(2)
"""


@pytest.fixture(scope="module")
def cached_run(tmp_path_factory, emulator) -> tuple[Path, str, str]:
    """(CAPSEM_HOME, session id, the run's output at 80 columns)."""
    home = tmp_path_factory.mktemp("cache-home")
    work = tmp_path_factory.mktemp("cache-work")
    script = work / "agent.py"
    script.write_text(AGENT)
    (work / "ws").mkdir()
    with environ(CAPSEM_HOME=str(home), COLUMNS="80"):
        upstream = (
            f"--mode upstream:{emulator.proxy_url} --set ssl_verify_upstream_trusted_ca={emulator.ca_path}"
        )
        out = run("run", "--workspace", str(work / "ws"), "--mitmdump-args", upstream, "--", sys.executable,
                  str(script), code=2)  # fmt: skip
    (db,) = home.glob("sessions/*/session.db")
    return home, db.parent.name, out


@pytest.fixture
def home(cached_run, capsem_home):
    import shutil

    shutil.copytree(cached_run[0], capsem_home)
    return capsem_home


def words(text: str) -> str:
    return " ".join(text.split())


def test_the_run_summary_shows_cache_costs_errors_files_and_the_answer(cached_run):
    _, sid, out = cached_run
    assert all(len(line) <= 80 for line in out.splitlines() if not line.startswith("database  ")), out
    text = words(out)
    assert f"capsem session {sid} (stopped, exit 2," in text
    assert re.search(r"4 model calls, 4 HTTP flows, 1 file changed, cost \$0\.08\d\d · 1 error", text)
    assert "tokens: input 51 · cache write 20,000 · cache read 40,000 · output" in text
    assert re.search(r"cost by token type: input \$0\.0002 \(0%\) · cache write \$0\.0750 \(8\d%\) · "
                     r"cache read \$0\.0120 \(1\d%\) · output \$0\.00", text)  # fmt: skip
    # each call: uncached input, cache write, cache read; the failed one costs nothing and is not "unpriced"
    assert "1 claude-sonnet-4-5 17 20,000 0" in text and "2 claude-sonnet-4-5 17 0 20,000" in text
    assert "unpriced" not in text and "overloaded_error" in text
    top = text.split("Most expensive calls ", 1)[1]
    assert re.match(r"# cost why ─+ 1 \$0\.075\d cache write 20,000 tok \$0\.0750 \(99%\) "
                    r"2 \$0\.006\d cache read 20,000 tok \$0\.0060 \(9\d%\)", top), top  # fmt: skip
    assert "#4 anthropic/claude-sonnet-4-5 HTTP 529 overloaded_error: Overloaded" in text
    assert "Files changed (1): created summary.md" in text
    assert "Final answer (#3 claude-sonnet-4-5):" in text


def test_the_summary_at_200_columns_has_every_column(cached_run, monkeypatch):
    home, sid, _ = cached_run
    monkeypatch.setenv("CAPSEM_HOME", str(home))
    from rich.console import Console

    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_session(session_summary(sid), 200))
    wide = console.export_text()
    assert all(len(line) <= 200 for line in wide.splitlines())
    header = next(line for line in wide.splitlines() if line.startswith("#  model"))
    assert header.split() == [
        "#",
        "model",
        "via",
        "input",
        "write",
        "read",
        "out",
        "cost",
        "stop",
        "ttft",
        "trace",
    ]


def test_list_sessions_and_cost_report_show_cache_tokens_and_the_split(home, tmp_path, monkeypatch):
    (row,) = json.loads(run("list-sessions", "--json"))
    assert (row["total_cache_write_tokens"], row["total_cache_read_tokens"], row["exit_code"]) == (
        20000,
        40000,
        2,
    )
    monkeypatch.setenv("COLUMNS", "240")  # wide enough for every count beside the whole command
    listed = words(run("list-sessions"))
    assert re.search(
        r"stopped 2 \$0\.08\d\d 51 20,000 40,000 \d+ 4 0 0 1 1 ws python ", listed
    )  # 1 error, project ws
    report = json.loads(run("cost-report", "--json"))
    (model,) = report["rows"]
    assert (model["key"], model["calls"], model["uncached_input_tokens"]) == (
        "anthropic/claude-sonnet-4-5",
        4,
        51,
    )
    assert (model["cache_write_tokens"], model["cache_read_tokens"]) == (20000, 40000)
    split = model["cost_by_type"]
    assert split["cache_write"] == pytest.approx(0.075) and split["cache_read"] == pytest.approx(0.012)
    assert sum(split.values()) == pytest.approx(model["cost"])
    assert report["totals"]["unpriced_calls"] == 0  # the failed call had no tokens: not unpriced
    for width in (80, 200):
        monkeypatch.setenv("COLUMNS", str(width))
        table = run("cost-report", "--by", "week")
        assert all(len(line) <= width for line in table.splitlines()), table
        assert re.search(r"cache write \$0\.0750 \(8\d%\)", words(table)) and "-W" in table
    assert "cache" in run("cost-report")  # at 200: the cache columns are there
    page = tmp_path / "cost.html"
    run("cost-report", "--html", str(page))
    html = page.read_text()
    assert (
        "Cost by token type" in html
        and "<th>cache write</th>" in html
        and "20,000" in html
        and "40,000" in html
    )


def test_the_demo_leaves_nothing_in_tmp_and_reads_plainly(capsem_home, tmp_path, monkeypatch):
    """No /tmp/capsem-demo-* with a CA private key, no /tmp/capsem-emulator-ca-* (issue 18, point 7)."""
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("COLUMNS", "80")
    out = run("demo")
    assert [
        p.name for p in scratch.iterdir() if p.name != "data-gym-cache"
    ] == []  # (tiktoken's shared cache)
    assert (capsem_home / "mitmproxy" / "mitmproxy-ca.pem").is_file()  # the CA stays in CAPSEM_HOME
    (session,) = json.loads(run("list-sessions", "--json"))
    assert (capsem_home / "sessions" / session["id"] / "mitmdump.log").is_file()
    assert '{"city": "Paris"}' in out and "18°C and cloudy in Paris" in out
    assert "4 model calls, 4 HTTP flows, 2 tool calls" in words(out)
    # issue 25, point 8: the final answer says where it comes from (no test strings that read like a bug)
    assert "no model was called and nothing was spent" in words(out) and "ünïcode" not in out
    assert all(len(line) <= 80 for line in out.splitlines() if not line.startswith("database  ")), out


def test_an_estimated_token_count_is_marked_and_the_mark_explained(home, cached_run):
    from assembler.summary import ESTIMATED_NOTE

    sid = cached_run[1]
    sql = "UPDATE model_calls SET usage_details = json_set(usage_details, '$.estimated', json('true')) WHERE id = 1"
    execute(home / "sessions" / sid / "session.db", sql)
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_session(session_summary(sid), 80))
    out = console.export_text()
    row = next(line for line in out.splitlines() if line.startswith("1 "))
    assert "~" in row and ESTIMATED_NOTE in " ".join(out.split())
