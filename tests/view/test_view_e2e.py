"""End to end: `capsem run` records a scripted agent (a tool loop with thinking, a failed tool, a
tool run by a real MCP server, a subagent and a file change) through real mitmdump against the
emulator; `capsem view` serves it, and headless Chromium opens every page with every host but
127.0.0.1 unresolvable, a network log proving no request left the machine. Screenshots at desktop
and phone widths go to test-artifacts/view/. The `--html` export is opened from disk offline;
SIGTERM stops the server."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from assembler.view.charts import money
from tests.bundle.conftest import chromium
from tests.cli.conftest import run
from tests.conftest import ARTIFACTS, rows

AGENT = Path(__file__).with_name("agent.py")
SHOTS = ARTIFACTS / "view"
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
EXTERNAL = re.compile(
    r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import""", re.I
)


@pytest.fixture(scope="module")
def recorded(emulator, tmp_path_factory) -> dict:
    """One session recorded by `capsem run` around tests/view/agent.py, and `capsem view` serving it."""
    from tests.e2e.test_mcp import serve

    home = tmp_path_factory.mktemp("view-home")
    work = tmp_path_factory.mktemp("view-work")
    saved = {k: os.environ.get(k) for k in ("CAPSEM_HOME", "VIEW_MCP_URL", "VIEW_PROVIDER_URL")}
    emulator.clear()
    try:
        with serve(json_response=True) as (mcp_url, _recording):
            os.environ.update(
                CAPSEM_HOME=str(home), VIEW_MCP_URL=mcp_url, VIEW_PROVIDER_URL=emulator.http_url
            )
            run("run", "-q", "--workspace", str(work), "--", sys.executable, str(AGENT))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    (db,) = home.glob("sessions/*/session.db")
    server = subprocess.Popen([sys.executable, "-m", "assembler", "view", "--no-open", "--port", "0"],
                              env={**os.environ, "CAPSEM_HOME": str(home)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        line = server.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert match, line + server.stdout.read()
        yield {"home": home, "db": db, "sid": db.parent.name, "url": match.group(0).rstrip("/"),
               "port": int(match.group(1)), "server": server, "work": work}  # fmt: skip
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def dom(url: str, profile: Path, *extra: str, shot: str = "") -> str:
    """The page's DOM after its scripts ran; with `shot`, screenshots at desktop (same launch) and
    phone widths in test-artifacts/view/."""
    if not shot:
        return chromium([OFFLINE, *extra, "--dump-dom", url], profile)
    SHOTS.mkdir(parents=True, exist_ok=True)
    desktop, phone = SHOTS / f"{shot}-desktop.png", SHOTS / f"{shot}-phone.png"
    out = chromium(
        [OFFLINE, *extra, "--window-size=1280,900", f"--screenshot={desktop}", "--dump-dom", url], profile
    )
    chromium([OFFLINE, "--window-size=390,844", f"--screenshot={phone}", url], profile)
    assert desktop.stat().st_size > 10_000 and phone.stat().st_size > 10_000
    return out


def page_requests(netlog: Path, origin: str) -> set[str]:
    """The URLs the page asked for: the navigation and every request it initiated (Chromium's own
    background requests, to its update and sync services, are initiated by no page)."""
    found: set[str] = set()
    for event in json.loads(netlog.read_text(errors="replace")).get("events", []):
        params = event.get("params") or {}
        url = params.get("url")
        if url and (params.get("initiator") == origin or url.startswith(origin)):
            found.add(url)
        elif url:
            assert "127.0.0.1" not in url and not url.startswith("file:"), url
    return found


def fragment(page: str, element_id: str) -> str:
    """The markup of the element with `element_id` up to the next element carrying an id of the same kind."""
    start = page.index(f'id="{element_id}"')
    prefix = re.match(r"\D+", element_id).group(0)  # type: ignore[union-attr]
    nxt = re.search(rf'id="{prefix}\d', page[start + 5 :])
    return page[start : start + 5 + nxt.start()] if nxt else page[start:]


def test_every_page_in_chromium_shows_the_recorded_session(recorded, tmp_path):
    db, sid, base = recorded["db"], recorded["sid"], recorded["url"]
    calls = rows(db, "SELECT * FROM model_calls ORDER BY id")
    tools = {t["tool_name"]: t for t in rows(db, "SELECT * FROM tool_calls")}
    assert len(calls) == 4 and set(tools) == {"read_file", "mcp__files-server__read_note", "Task"}
    for call in calls:  # the input breakdown the pages show is priced as the call was
        parts = rows(
            db, "SELECT SUM(cost_usd) AS usd FROM input_breakdown WHERE model_call_id = ?", (call["id"],)
        )
        assert parts[0]["usd"] == pytest.approx(float(json.loads(call["cost_details"])["parts"]["input"]))
    netlog = tmp_path / "netlog.json"

    # sessions list: cost equal to session.db's, a link to the session
    listing = dom(f"{base}/", tmp_path / "p", f"--log-net-log={netlog}", shot="sessions")
    assert f"/s/{sid}" in listing and money(sum(c["estimated_cost_usd"] for c in calls)) in listing
    assert "<svg" in listing and 'aria-label="cost per day"' in listing
    # issue 25, point 8: at 390 px the list hid cost and status behind a scroll; now every other
    # column folds away (`hide-s`) and the session cell carries start, duration and errors
    head = listing[listing.index("<thead>") : listing.index("</thead>")]
    kept = re.findall(r"<th(?![^>]*hide-s)[^>]*>([^<]+)</th>", head)
    assert kept == ["Session", "Status", "Cost"], kept
    assert 'class="show-s muted small"' in listing

    # session page: the tree (subagent under its Task tool call), each result beside its tool call
    page = dom(f"{base}/s/{sid}", tmp_path / "p", shot="session")
    assert re.search(
        r'id="session-cost">\s*' + re.escape(money(sum(c["estimated_cost_usd"] for c in calls))), page
    )
    for call in calls:
        row = fragment(page, f"c{call['id']}")
        assert money(call["estimated_cost_usd"]) in row, call["id"]
    failed = fragment(page, f"tool-{tools['read_file']['id']}")
    assert "read_file" in failed and "VIEWFAILED" in failed
    assert "failed" in page[: page.index(f'id="tool-{tools["read_file"]["id"]}"')].rsplit("<div", 1)[1]
    mcp = fragment(page, f"tool-{tools['mcp__files-server__read_note']['id']}")
    assert "MCP files-server" in mcp and "VIEWRESULT" in mcp
    sub = next(c for c in calls if c["parent_tool_call_id"])
    task = fragment(page, f"tool-{tools['Task']['id']}")
    assert sub["parent_tool_call_id"] == tools["Task"]["id"]
    assert page.index(f'id="tool-{tools["Task"]["id"]}"') < page.index(f'id="c{sub["id"]}"')
    assert 'class="row call depth-3' in page[page.index(f'id="c{sub["id"]}"') - 80 :][:200]
    assert "subagent" in fragment(page, f"c{sub['id']}") and "Paris" in task
    assert "notes.md" in page and "Turn 2" in page and 'class="stack"' in page

    # call page of the first call: thinking, its tool calls with their results and where they went
    first = dom(f"{base}/s/{sid}/call/{calls[0]['id']}", tmp_path / "p")
    assert "VIEWSYSTEM" in first and "First, consider the question" in first
    table = first[first.index('class="grid toolcalls"') :]
    row = table[table.index("read_file") : table.index("</tr>", table.index("read_file"))]
    assert "VIEWFAILED" in row and f"sent back in call #{calls[2]['id']}" in row
    assert re.search(r'id="call-cost">\s*' + re.escape(money(calls[0]["estimated_cost_usd"])), first)
    assert 'href="/s/' + sid + f'/call/{calls[0]["id"]}/request"' in first

    # the call that carried the results: system prompt folded, what is new marked, a diff
    third = dom(f"{base}/s/{sid}/call/{calls[2]['id']}", tmp_path / "p", shot="call")
    system = third[third.index('class="fold system"') :]
    assert "VIEWSYSTEM" in system[: system.index("</details>")]
    news = re.findall(r'<div class="msg [^"]*\bnew\b[^"]*"[^>]*>(.*?)</pre>', third, re.S)
    assert any("VIEWRESULT" in n for n in news) and not any("Summarize my notes" in n for n in news)
    assert "Summarize my notes" in third and f"Changes since call #{calls[0]['id']}" in third
    assert re.search(r'id="call-cost">\s*' + re.escape(money(calls[2]["estimated_cost_usd"])), third)

    # nothing but 127.0.0.1 was asked for, and no page names another host
    origin = f"http://127.0.0.1:{recorded['port']}"
    requested = page_requests(netlog, origin)
    assert {f"{origin}/static/view.css", f"{origin}/static/view.js"} <= requested
    assert all(u.startswith(origin + "/") for u in requested), requested
    for html in (listing, page, first, third):
        assert not EXTERNAL.search(html), EXTERNAL.search(html)


def test_the_html_export_opens_offline_with_the_same_content(recorded, tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSEM_HOME", str(recorded["home"]))
    db, sid = recorded["db"], recorded["sid"]
    out = tmp_path / "session.html"
    assert "wrote" in run("view", sid, "--html", str(out))
    html = out.read_text(encoding="utf-8")
    assert not EXTERNAL.search(html) and "/static/" not in html
    calls = rows(db, "SELECT id, estimated_cost_usd FROM model_calls ORDER BY id")
    shown = dom(
        f"{out.as_uri()}#call-{calls[2]['id']}", tmp_path / "p", "--host-resolver-rules=MAP * ~NOTFOUND"
    )
    third = re.search(rf'<section class="page" id="call-{calls[2]["id"]}"( hidden)?>', shown)
    assert third and not third.group(1), "the script shows the call the link points at"
    assert re.search(r'<section class="page" id="session" hidden', shown)
    assert "VIEWSYSTEM" in shown and "VIEWRESULT" in shown and "VIEWFAILED" in shown
    assert money(sum(c["estimated_cost_usd"] for c in calls)) in shown
    assert f'href="#call-{calls[0]["id"]}"' in shown


def test_sigterm_stops_the_server(recorded):
    server = recorded["server"]
    assert server.poll() is None
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=15) in (0, -signal.SIGTERM)  # uvicorn shuts down, then dies of the signal
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", recorded["port"]), timeout=2):
        pass
