"""Issue 25, point 8 ("smaller"): an unpriced model shows `unpriced`, never `$0.0000`; `export
otlp` says what the endpoint answered, where it posted and what to do; `run --view` says the page
stays up (and never holds a script); the workspace watcher leaves $CAPSEM_HOME alone when it lies in
the workspace. (The others: vacuum --dry-run in test_retention.py, an empty $CAPSEM_HOME in
test_session_commands.py, the demo's answer in test_run_summary.py, the list at 390 px by eye.)"""

from __future__ import annotations

import http.server
import json
import socket
import sys
import threading

from starlette.testclient import TestClient

from assembler.view.app import create_app
from capsem.rollup import open_main, rollup
from tests.cli.conftest import execute, recorded_id, run, session_db


def test_an_unpriced_model_reads_unpriced_everywhere(home, monkeypatch):
    sid = recorded_id(home)
    execute(session_db(home), "UPDATE model_calls SET estimated_cost_usd = NULL")
    main = open_main()
    rollup(main, sid)
    main.close()
    for width in ("80", "160"):
        monkeypatch.setenv("COLUMNS", width)
        listed = run("list-sessions")
        assert (
            "unpriced" in next(x for x in listed.splitlines() if x.startswith(sid))
            and "$0.0000" not in listed
        )
        report = run("cost-report")
        assert (
            "unpriced" in report and "$0.0000" not in report.split("cost by token type")[0].split("total")[0]
        )
    from rich.console import Console

    from assembler.summary import render_session, session_summary

    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_session(session_summary(sid), 80))
    text = " ".join(console.export_text().split())
    assert "cost unpriced (no known price for their models)" in text and "$0.0000" not in text
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        assert "unpriced" in client.get("/").text
        page = client.get(f"/s/{sid}").text
        assert page.count(">unpriced<") == 4  # each call of the timeline


class _NotImplemented(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(501)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_export_otlp_failures_say_the_status_the_url_and_the_hint(home):
    """As seen: a closed port and an HTTP 501 both said "refused the spans or could not be reached"."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    out = run("export", "otlp", "--endpoint", f"http://127.0.0.1:{closed}", "--timeout", "1", code=1)
    assert f"from http://127.0.0.1:{closed}/v1/traces: nothing accepted the connection" in out, out
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotImplemented)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        out = run("export", "otlp", "--endpoint", f"http://127.0.0.1:{port}/otel", "--timeout", "1", code=1)
    finally:
        server.shutdown()
    assert (
        "HTTP 501" in out
        and f"from http://127.0.0.1:{port}/otel/v1/traces: that server does not take OTLP/HTTP" in out
    )


def test_run_view_says_the_page_stays_and_never_holds_a_script(capsem_home, monkeypatch):
    """As seen: `run --view` stopped serving when the agent ended. In a terminal it now serves until
    Ctrl-C; without one (a script, this test) it says so and returns."""
    monkeypatch.setattr("webbrowser.open", lambda url: True)
    out = run("run", "--view", "-q", "--", sys.executable, "-c", "pass")
    assert "stops now (not a terminal); capsem view serves it again" in out


def test_the_workspace_watcher_leaves_capsem_home_alone(capsem_home, tmp_path, monkeypatch):
    """As seen: with $CAPSEM_HOME inside the workspace, the watcher recorded capsem's own files."""
    monkeypatch.setenv("CAPSEM_HOME", str(tmp_path / "ws" / ".capsem"))
    (tmp_path / "ws").mkdir()
    agent = "import pathlib; pathlib.Path('made.txt').write_text('x')"
    run("run", "-q", "--workspace", str(tmp_path / "ws"), "--", sys.executable, "-c", agent)
    (session,) = json.loads(run("list-sessions", "--json"))
    paths = json.loads(run("query-session", "SELECT path FROM fs_events", session["id"], "--format", "json"))
    assert {p["path"] for p in paths} == {"made.txt"}, paths


def test_run_emulator_refuses_a_mode_of_its_own(capsem_home):
    out = run("run", "--emulator", "--mitmdump-args", "--mode regular@8080", "--", sys.executable, "-c", "pass",
              code=1)  # fmt: skip
    assert (
        "--emulator sets mitmdump's --mode (upstream to the emulator): drop --mode from --mitmdump-args"
        in out
    )
