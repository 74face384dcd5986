"""Two machines (two CAPSEM_HOMEs) recording through real mitmdump, pushing to one real
PostgreSQL: the team's numbers are the sum of each machine's own, every row arrives once however
often it is pushed or PostgreSQL goes away, and `share: metadata` keeps every prompt home."""

from __future__ import annotations

import json

import psycopg

from capsem.store.schema import connect
from tests.e2e.test_budget_reservations import wait_until
from tests.pages import laid_out
from tests.team.helpers import Machine, call, capsem, team_view

PLANTED = "zebra-quartz-1193 is the secret plan"


def text_columns_holding(url: str, needle: str) -> list[str]:
    """Every text (or text array) column of every table of the team schema that holds `needle`."""
    found = []
    with psycopg.connect(url) as pg:
        columns = pg.execute("SELECT table_name, column_name FROM information_schema.columns WHERE "
                             "table_schema = 'capsem' AND data_type IN ('text', 'ARRAY', 'character varying')"
                             ).fetchall()  # fmt: skip
        assert len(columns) > 40  # the whole schema is searched
        for table, column in columns:
            hit = pg.execute(f'SELECT 1 FROM capsem.{table} WHERE "{column}"::text LIKE %s LIMIT 1',
                             (f"%{needle}%",)).fetchone()  # fmt: skip
            if hit:
                found.append(f"{table}.{column}")
    return found


def team_calls(url: str) -> list[tuple]:
    with psycopg.connect(url) as pg:
        return pg.execute(
            "SELECT machine, session_id, id FROM capsem.model_calls ORDER BY 1, 2, 3"
        ).fetchall()


def test_two_machines_team_report_is_the_sum_of_their_own_and_no_prompt_leaves(team_url, emu, tmp_path):
    a, b = Machine(tmp_path / "a", "laptop-a", emu), Machine(tmp_path / "b", "laptop-b", emu)
    capsem(a.home, "team", "init")
    assert "up to date" in capsem(b.home, "team", "init").stdout  # a second init changes nothing
    for machine, n in ((a, 2), (b, 3)):
        proxy, http = machine.session(f"20261128-100000-000{n}")
        with http:
            for i in range(n):
                call(http, f"{PLANTED} ({machine.name} {i})")
        assert proxy.stop() == 0
        machine.wait_pushed()
    local = [m.cost_report()["totals"] for m in (a, b)]
    team = json.loads(capsem(a.home, "cost-report", "--team", "--json").stdout)
    assert team["totals"]["calls"] == local[0]["calls"] + local[1]["calls"] == 5
    for key in ("cost", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        assert abs(team["totals"][key] - (local[0][key] + local[1][key])) < 1e-9, key
    assert team["totals"]["cost"] > 0
    by_machine = json.loads(capsem(b.home, "cost-report", "--team", "--by", "machine", "--json").stdout)
    assert {r["key"]: r["calls"] for r in by_machine["rows"]} == {"laptop-a": 2, "laptop-b": 3}
    by_user = json.loads(capsem(b.home, "cost-report", "--team", "--by", "user", "--json").stdout)
    assert {r["key"] for r in by_user["rows"]} == {"laptop-a-user", "laptop-b-user"}

    # the planted prompt is in each machine's own record, and nowhere in the team's database
    db = connect(next((a.home / "sessions").glob("*/session.db")), readonly=True)
    assert db.execute(
        "SELECT COUNT(*) FROM item_contents WHERE content LIKE ?", (f"%{PLANTED}%",)
    ).fetchone()[0]
    db.close()
    assert text_columns_holding(team_url, "zebra-quartz") == []
    assert text_columns_holding(team_url, "laptop-b-user") == ["sessions.user"]  # the search does find text

    # the team page, in headless Chromium: b's session opens locally, a's from what it pushed
    with team_view(b.home) as base, laid_out(base + "/team", 1280) as page:
        links = page.js("[...document.querySelectorAll('#costliest a')].map(a => a.getAttribute('href'))")
        assert sorted(links) == ["/s/20261128-100000-0003", "/team/laptop-a/20261128-100000-0002"]
        assert page.js("document.querySelector('.cards').textContent").count("$") >= 2
        page.call("Page.navigate", url=base + next(link for link in links if link.startswith("/team")))
        wait_until(lambda: "Only its metadata was shared" in page.js("document.body ? document.body.textContent : ''"),
                   "the page of a's session")  # fmt: skip
        assert page.js("document.querySelectorAll('tbody tr').length") == 2  # a's two calls

    # pushing everything again counts nothing twice
    before = team_calls(team_url)
    capsem(a.home, "team", "push", "--all")
    assert team_calls(team_url) == before and len(before) == 5
    again = json.loads(capsem(a.home, "cost-report", "--team", "--json").stdout)
    assert again["totals"] == team["totals"]


def test_postgres_stopped_mid_session_every_row_arrives_once(team_url, postgres, emu, tmp_path):
    a = Machine(tmp_path / "a", "laptop-a", emu, "  share: full\n")
    capsem(a.home, "team", "init")
    proxy, http = a.session("20261128-110000-00aa")
    with http:
        call(http, "before the outage")
        postgres.stop()
        for i in range(3):
            call(http, f"during the outage {i}")  # the agent is answered as before
        wait_until(lambda: a.outbox()["sessions"][0]["error"], "the pusher meets the outage")
        postgres.start()
        call(http, "after the outage")
    assert proxy.stop() == 0
    a.wait_pushed()
    db = connect(a.home / "sessions" / "20261128-110000-00aa" / "session.db", readonly=True)
    local = [r[0] for r in db.execute("SELECT id FROM model_calls ORDER BY id")]
    db.close()
    assert len(local) == 5 and [r[2] for r in team_calls(team_url)] == local
    capsem(a.home, "team", "push", "20261128-110000-00aa")
    assert [r[2] for r in team_calls(team_url)] == local
    with psycopg.connect(team_url) as pg:
        assert pg.execute("SELECT status, total_model_calls FROM capsem.sessions").fetchall() == [
            ("stopped", len(local))
        ]

    # a session vacuumed (gzipped) before it reached the team is pushed from its .gz
    capsem(a.home, "vacuum")
    folder = a.home / "sessions" / "20261128-110000-00aa"
    assert (folder / "session.db.gz").is_file() and not (folder / "session.db").exists()
    with psycopg.connect(team_url) as pg:
        bodies = pg.execute("SELECT COUNT(*) FROM capsem.content").fetchone()[0]
        pg.execute("DELETE FROM capsem.model_calls")
        pg.execute("DELETE FROM capsem.content")
    capsem(a.home, "team", "push", "20261128-110000-00aa")
    assert [r[2] for r in team_calls(team_url)] == local
    with psycopg.connect(team_url) as pg:
        assert pg.execute("SELECT COUNT(*) FROM capsem.content").fetchone()[0] == bodies > 0


def test_redacted_shares_the_scrubbed_conversation_and_no_body(team_url, emu, tmp_path):
    """`share: redacted`: each call's conversation items arrive as session.db keeps them (a secret in
    the prompt scrubbed), and neither request nor response body leaves the machine."""
    secret = "sk-ant-api03-" + "R3dact3dTeamKey0" * 5 + "AA"
    a = Machine(tmp_path / "a", "laptop-a", emu, "  share: redacted\n")
    capsem(a.home, "team", "init")
    proxy, http = a.session("20261128-120000-00bb")
    with http:
        call(http, f"{PLANTED}, and my key is {secret}")
    assert proxy.stop() == 0
    a.wait_pushed()
    with psycopg.connect(team_url) as pg:
        kinds = {k for (k,) in pg.execute("SELECT DISTINCT kind FROM capsem.content").fetchall()}
        (share,) = pg.execute("SELECT share FROM capsem.sessions").fetchone()
    assert kinds == {"item"} and share == "redacted"
    assert text_columns_holding(team_url, "zebra-quartz") == ["content.body"]
    assert text_columns_holding(team_url, "R3dact3dTeamKey0") == []
