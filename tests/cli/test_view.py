"""`capsem view` pages in-process (Starlette's TestClient) over the session recorded through real
mitmdump (tests/cli/conftest.py) and sessions derived from it: bad input gets a clear page, a
running session's pages are live, long sessions are paginated, and `capsem search` finds a word
planted in a tool result of an older, gzipped session."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
import time

import pytest
from starlette.testclient import TestClient

from assembler.view import queries
from assembler.view.app import create_app
from assembler.view.charts import money
from capsem.store.bodies import read_body
from capsem.store.schema import connect, open_main_db
from tests.addons.recorder.test_bodies import call
from tests.cli.conftest import clone_session, days_ago, execute, recorded_id, run, session_db
from tests.conftest import rows
from tests.recording import RecorderHarness

PLANTED = "zebracorn"


@pytest.fixture
def client(home):
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c


def assert_clear(response, status: int, *words: str) -> None:
    assert response.status_code == status, response.text[:500]
    assert "Traceback" not in response.text and 'class="problem"' in response.text
    for word in words:
        assert word in response.text, word


def test_pages_of_a_recorded_session(home, client):
    sid = recorded_id(home)
    calls = rows(session_db(home), "SELECT id, estimated_cost_usd FROM model_calls ORDER BY id")
    listing = client.get("/")
    assert listing.status_code == 200 and f"/s/{sid}" in listing.text
    page = client.get(f"/s/{sid}")
    assert page.status_code == 200 and money(sum(c["estimated_cost_usd"] for c in calls)) in page.text
    assert "data-live" not in page.text  # a stopped session's page does not poll
    for c in calls:
        one = client.get(f"/s/{sid}/call/{c['id']}")
        assert one.status_code == 200 and money(c["estimated_cost_usd"]) in one.text
    raw = client.get(f"/s/{sid}/call/{calls[0]['id']}/request")
    conn = connect(session_db(home), readonly=True)
    assert raw.content == read_body(conn, calls[0]["id"], "request")[0]
    conn.close()
    assert "attachment" in raw.headers["content-disposition"]
    assert_clear(client.get("/s/20991231-000000-dead"), 404, "No such session", "20991231-000000-dead")
    assert_clear(client.get(f"/s/{sid}/call/9999"), 404, "no model call 9999")
    assert_clear(client.get(f"/s/{sid}/call/1/other"), 404)
    assert_clear(client.get("/s/../etc"), 404)
    assert_clear(client.get("/nowhere"), 404)
    assert client.get(f"/s/{sid}?page=abc").status_code == 200
    assert client.get("/", headers={"host": "attacker.example"}).status_code == 400  # DNS rebinding


def test_bad_databases_get_a_clear_page(home, client):
    corrupt = clone_session(home, days_ago(1), suffix="0001")
    (home / "sessions" / corrupt / "session.db").write_bytes(b"not a database at all" * 100)
    assert_clear(client.get(f"/s/{corrupt}"), 422, "cannot be read")
    half = clone_session(home, days_ago(2), suffix="0002")
    db = home / "sessions" / half / "session.db"
    db.unlink()
    execute(db, "CREATE TABLE session_meta (key TEXT PRIMARY KEY, value TEXT)")
    assert_clear(client.get(f"/s/{half}"), 422, "no model_calls table")
    empty = clone_session(home, days_ago(3), empty=True, suffix="0003")
    assert "No model call recorded yet" in client.get(f"/s/{empty}").text
    gz = clone_session(home, days_ago(4), suffix="0004")
    bad_gz = home / "sessions" / gz / "session.db.gz"
    (home / "sessions" / gz / "session.db").rename(bad_gz)
    assert_clear(client.get(f"/s/{gz}"), 422, "cannot decompress")
    assert client.get("/").status_code == 200  # the list still shows, whatever the sessions hold


def test_a_running_session_is_live(home, client):
    sid = clone_session(home, days_ago(0), status="running", suffix="0005")
    page = client.get(f"/s/{sid}")
    assert page.status_code == 200 and f'data-live="/s/{sid}/state.json"' in page.text
    before = client.get(f"/s/{sid}/state.json").json()
    assert before["status"] == "running"
    execute(home / "sessions" / sid / "session.db",
            "INSERT INTO fs_events (timestamp, action, path) VALUES ('2026-01-01T00:00:00Z', 'added', 'x.md')")  # fmt: skip
    after = client.get(f"/s/{sid}/state.json").json()
    assert after != before and after["fs_events"] == before["fs_events"] + 1
    assert "data-live" in client.get(f"/s/{sid}/call/1").text
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    execute(home / "main.db", f"UPDATE sessions SET pid = {int(gone.stdout)} WHERE id = '{sid}'")
    page = client.get(f"/s/{sid}").text  # its process is gone: crashed, not live
    assert "st-crashed" in page and "data-live" not in page


def test_a_session_being_started_reloads_until_it_exists(home, client):
    from capsem.ids import new_session_id

    page = client.get(f"/s/{new_session_id()}")
    assert (
        page.status_code == 404
        and 'http-equiv="refresh"' in page.text
        and "Waiting for the session" in page.text
    )


def test_long_sessions_are_paginated(home, client, monkeypatch):
    monkeypatch.setattr(queries.session, "PAGE_SIZE", 2)
    sid = recorded_id(home)
    n = len(rows(session_db(home), "SELECT id FROM model_calls"))
    first, second = client.get(f"/s/{sid}").text, client.get(f"/s/{sid}?page=2").text
    assert f"page 1 of {-(-n // 2)}" in first and 'href="/s/' + sid + '?page=2"' in first
    assert 'id="c1"' in first and 'id="c3"' not in first and 'id="c3"' in second and 'id="c1"' not in second


def record_planted(home, created) -> str:
    """An older session recorded by the recorder: a tool result carries the planted word; gzipped."""
    sid = created.strftime("%Y%m%d-%H%M%S-") + "0b0b"
    folder = home / "sessions" / sid
    folder.mkdir(parents=True)
    rec = RecorderHarness(folder)
    answer = json.dumps({"id": "m1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                         "content": [{"type": "tool_use", "id": "toolu_1", "name": "grep", "input": {"q": "x"}}],
                         "stop_reason": "tool_use", "usage": {"input_tokens": 9, "output_tokens": 3}}).encode()  # fmt: skip
    messages = [{"role": "user", "content": "find it"}]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages}
    call(rec, 0, json.dumps(body).encode(), answer, time.time())
    use = {"type": "tool_use", "id": "toolu_1", "name": "grep", "input": {"q": "x"}}
    messages += [{"role": "assistant", "content": [use]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                               "content": f"found a {PLANTED} in line 3"}]}]  # fmt: skip
    call(rec, 1, json.dumps(body).encode(), answer, time.time() + 1)
    rec.shutdown()
    with open(folder / "session.db", "rb") as src, gzip.open(folder / "session.db.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    for name in ("session.db", "session.db-wal", "session.db-shm"):
        (folder / name).unlink(missing_ok=True)
    main = open_main_db(home / "main.db")
    main.execute("INSERT INTO sessions (id, status, created_at, stopped_at) VALUES (?, 'vacuumed', ?, ?)",
                 (sid, created.isoformat(), created.isoformat()))  # fmt: skip
    main.close()
    return sid


def test_search_finds_a_word_in_a_tool_result_of_an_older_gzipped_session(home, client, monkeypatch):
    sid = record_planted(home, days_ago(30))
    monkeypatch.setenv("COLUMNS", "80")
    out = run("search", PLANTED)
    assert sid in out and "#2" in out and "tool result" in out and max(len(x) for x in out.splitlines()) <= 80
    (hit,) = json.loads(run("search", PLANTED, "--json"))
    assert (hit["session_id"], hit["call_id"], hit["kind"]) == (sid, 2, "tool result")
    assert f"«{PLANTED}»" in hit["snippet"]
    page = client.get("/search", params={"q": PLANTED})
    assert f'href="/s/{sid}/call/2"' in page.text and f"<mark>{PLANTED}</mark>" in page.text
    # incremental: an unchanged session is not read again; a removed one leaves the index
    index = home / "search.db"
    stamp = rows(index, "SELECT * FROM indexed ORDER BY session_id")
    run("search", "anything")
    assert rows(index, "SELECT * FROM indexed ORDER BY session_id") == stamp
    shutil.rmtree(home / "sessions" / sid)
    assert json.loads(run("search", PLANTED, "--json")) == []
    assert "no match" in run("search", "--", "\"'*)(")


def test_view_command_refuses_bad_input(home):
    assert "served on loopback only" in run("view", "--host", "0.0.0.0", "--no-open", code=1)
    assert "no session.db" in run("view", "20991231-000000-dead", "--no-open", code=1)


def test_run_view_serves_the_page_of_the_session_about_to_start(home, monkeypatch):
    import webbrowser

    from assembler.view.cli import open_live_view

    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", opened.append)
    sid, _ = open_live_view()
    deadline = time.monotonic() + 10
    while not opened and time.monotonic() < deadline:  # the browser opens once the server listens
        time.sleep(0.05)
    (url,) = opened
    assert re.fullmatch(rf"http://127\.0\.0\.1:\d+/s/{sid}", url)
    import httpx

    waiting = httpx.get(url, timeout=10)
    assert waiting.status_code == 404 and "Waiting for the session" in waiting.text


def test_html_export_of_a_long_session_keeps_the_last_calls_and_says_so(home):
    from assembler.view.app import View

    sid = recorded_id(home)
    ids = [r["id"] for r in rows(session_db(home), "SELECT id FROM model_calls ORDER BY id")]
    page = View().export(sid, max_calls=1)
    assert re.findall(r'<section class="page" id="call-(\d+)"', page) == [str(ids[-1])]
    assert f"the last 1 of {len(ids)} calls" in page and f'id="c{ids[0]}"' in page  # the tree lists them all


def test_items_read_as_text_whatever_api_they_came_from():
    from assembler.view.queries import readable

    chat_call = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": '{"q": "x"}'}}
    assert readable("tool_call", json.dumps(chat_call)) == 'grep({"q": "x"})'
    block = {"type": "tool_use", "id": "t1", "name": "read", "input": {"p": "a"}}
    assert readable("tool_call", json.dumps(block)) == 'read({"p": "a"})'
    result = {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "A"}]}
    assert readable("tool_result", json.dumps(result)) == "A"


def test_view_on_another_loopback_address_serves_and_a_huge_call_id_is_not_found(home):
    """`capsem view --host 127.0.0.2` as a real process: its pages answer (they were 400 to their own
    host name), and a call id past SQLite's 64-bit integers is a clear 404 (it was a 500)."""
    import httpx

    sid = recorded_id(home)
    proc = subprocess.Popen([sys.executable, "-m", "assembler", "view", sid, "--host", "127.0.0.2", "--no-open"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.2:\d+", line)
        assert url, line
        assert httpx.get(f"{url.group(0)}/s/{sid}", timeout=10).status_code == 200
        huge = httpx.get(f"{url.group(0)}/s/{sid}/call/{2**64 + 1}", timeout=10)
        assert_clear(huge, 404, f"no model call {2**64 + 1}")
        assert httpx.get(f"{url.group(0)}/s/{sid}/call/{2**64}/request", timeout=10).status_code == 404
    finally:
        proc.terminate()
        proc.wait(10)
