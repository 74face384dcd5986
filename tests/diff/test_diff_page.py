"""The `/diff/A/B` page of `capsem view` in real headless Chromium (offline: every host but
127.0.0.1 unresolvable), on the sessions recorded through mitmdump (conftest.py), and the session
page's "compare with…" form. Screenshots go to test-artifacts/diff/."""

from __future__ import annotations

import json
import re
from html import unescape

import httpx
import pytest

from tests.bundle.conftest import chromium
from tests.conftest import ARTIFACTS
from tests.pages import LINES_OF, SIDEWAYS, laid_out, view_of

SHOTS = ARTIFACTS / "diff"
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"


@pytest.fixture(scope="module")
def served(recorded_runs):
    with view_of(recorded_runs.home) as url:
        yield url


def page(url: str, profile, shot: str, phone: bool = False) -> str:
    """The DOM after scripts ran, with a screenshot at desktop width (and at phone width)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    desktop = SHOTS / f"{shot}-desktop.png"
    out = chromium(
        [OFFLINE, "--window-size=1280,1400", f"--screenshot={desktop}", "--dump-dom", url], profile
    )
    assert desktop.stat().st_size > 10_000
    if phone:
        small = SHOTS / f"{shot}-phone.png"
        chromium([OFFLINE, "--window-size=390,1400", f"--screenshot={small}", url], profile)
        assert small.stat().st_size > 10_000
    return out


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_the_diff_page_shows_the_changed_prompt_and_tool(served, recorded_runs, tmp_path):
    runs = recorded_runs
    dom = page(f"{served}/diff/{runs.base}/{runs.changed}", tmp_path / "p", "changed", phone=True)
    words = text_of(dom)
    assert "4 of 4 calls changed" in words and "Changed: system prompt (4 calls), tools (4 calls)." in words
    assert dom.count('class="dline removed">-You are a terse weather assistant.') == 1
    assert dom.count('class="dline added">+You are a brief weather assistant.') == 1
    assert "-Current weather for a city" in dom and "+Today's weather for a city" in dom
    assert words.count("changed as in call #1 ↔ #1 ( above )") == 6  # system prompt and tools, calls 2-4
    for absent in ("New items sent", "Answer", "Tool calls the model made", "only in"):
        assert absent not in words  # nothing else changed
    assert f'href="/s/{runs.base}/call/1"' in dom and f'href="/s/{runs.changed}/call/1"' in dom
    assert f'href="/diff/{runs.changed}/{runs.base}"' in dom  # swap


def test_the_same_run_twice_reads_no_change(served, recorded_runs, tmp_path):
    dom = page(f"{served}/diff/{recorded_runs.base}/{recorded_runs.again}", tmp_path / "p", "same")
    words = text_of(dom)
    assert "no change but ids and timings" in words
    assert (
        "#1 – #4 ↔ #1 – #4 · 4 calls, the same but ids and timings" in words and 'class="card pair' not in dom
    )


def test_a_session_page_offers_to_compare_and_the_form_leads_to_the_diff(served, recorded_runs, tmp_path):
    runs = recorded_runs
    dom = page(f"{served}/s/{runs.changed}", tmp_path / "p", "session-compare")
    form = dom[dom.index('<form class="compare"') : dom.index("</form>", dom.index('<form class="compare"'))]
    options = re.findall(r'<option value="([^"]+)">([^<]*)</option>', form)
    assert [o[0] for o in options] == [runs.again, runs.base]  # the one before first
    assert "(the one before)" in options[0][1] and "4 calls" in options[0][1]
    answer = httpx.get(f"{served}/diff", params={"a": runs.changed, "b": runs.base})
    assert answer.status_code == 303 and answer.headers["location"] == f"/diff/{runs.changed}/{runs.base}"
    missing = httpx.get(f"{served}/diff/{runs.base}/no-such-session")
    assert missing.status_code == 404 and "no-such-session" in missing.text


def test_a_replay_links_to_its_original(recorded_runs, tmp_path, monkeypatch):
    """With main.db's `replay_of` (added by `capsem replay`), a replay's page offers "compare with
    the original" first; without the column (older main.db) the page is as before."""
    import shutil
    import sqlite3

    from assembler.sessiondb import main_row
    from assembler.view.app import Urls, View

    home = tmp_path / "home"
    shutil.copytree(recorded_runs.home, home)
    monkeypatch.setenv("CAPSEM_HOME", str(home))
    runs = recorded_runs
    html = View().session_page(Urls(), runs.changed)
    assert "compare with the original" not in html and "compare with…" in html
    conn = sqlite3.connect(home / "main.db")
    with conn:
        if "replay_of" not in {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}:
            conn.execute("ALTER TABLE sessions ADD COLUMN replay_of TEXT")
        conn.execute("UPDATE sessions SET replay_of = ? WHERE id = ?", (runs.base, runs.changed))
    conn.close()
    assert main_row(runs.changed)["replay_of"] == runs.base
    html = View().session_page(Urls(), runs.changed)
    assert f'<a href="/diff/{runs.base}/{runs.changed}">compare with the original</a>' in html
    options = re.findall(r'<option value="([^"]+)">([^<]*)</option>', html)
    assert options[0][0] == runs.base and options[0][1].endswith("(the original)")


@pytest.mark.parametrize("width", (1280, 390))
def test_tool_names_stay_whole_and_totals_count_errors_and_unpriced_calls(agent_runs, tmp_path, width):
    """Issue 35, item 10: the diff page cut `Agent` into `Agen` / `t` beside long arguments, said
    `errors 0 | 0` for a session with a failed tool and a request answered 404, printed `$0.002682`
    and `$0` for a call whose model has no known price."""
    from assembler.failures import failures
    from capsem.store.schema import connect

    runs = agent_runs
    with view_of(runs.home) as url, laid_out(f"{url}/diff/{runs.a}/{runs.b}", width) as page:
        page.screenshot(SHOTS / f"tools-errors-unpriced-{width}.png")
        names = page.js(LINES_OF % json.dumps("table.uses td.tname"))
        totals = dict(page.js("[...document.querySelectorAll('.diff-totals tbody tr')].map(tr => "
                              "[tr.cells[0].textContent, [...tr.cells].slice(1).map(c => c.textContent)])"))  # fmt: skip
        alone = page.js("document.querySelector('.pair.only-a').innerText")
        wide, screen = page.js(SIDEWAYS)
    assert wide <= screen  # no sideways scroll, on a phone too
    assert names == [["Agent", 1], ["Agent", 1]]  # A's call and B's, each on one line
    counted = []
    for session in (runs.a, runs.b):
        conn = connect(runs.home / "sessions" / session / "session.db", readonly=True)
        counted.append(len(failures(conn)))  # what the run summary and inspect-session count
        conn.close()
    assert counted[0] == 2 and counted[1] == 0  # the failed tool result and the 404
    assert totals["errors"] == [str(counted[0]), str(counted[1]), "-2"]
    assert totals["unpriced calls"] == ["1", "0", "-1"]
    assert all(re.fullmatch(r"\$0\.\d{4}", cost) for cost in totals["cost"][:2]), totals["cost"]
    assert re.search(r"tokens in, \d+ out · unpriced$", alone), alone
