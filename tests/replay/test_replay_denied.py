"""A session with denied tool calls, replayed and diffed (issue 36, point 4): recorded once with
`capsem run --emulator` through real mitmdump (tests/replay/destroy_agent.py: the anthropic SDK and
a Codex-shaped Responses WebSocket, the emulator asking for `rm -rf capsem-doomed.txt`, a rule
denying it), then replayed through real mitmdump WITHOUT that rule: the replay must answer what the
agent received, so the file survives the replay too; and `capsem diff` of the two is no change."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from capsem.emulator.agent import DOOMED, FILE
from capsem.store.bodies import read_body
from tests.cli.conftest import run
from tests.conftest import environ, rows

AGENT = str(Path(__file__).with_name("destroy_agent.py"))
RULES = 'policy:\n  rules:\n    - {name: no-rm-rf, action: deny, tool: "*", tool_args: {command: {shell: "rm -rf"}}}\n'


def workspace(path: Path) -> Path:
    path.mkdir()
    (path / DOOMED).write_text("keep me\n")
    return path


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> dict:
    """The recording (the rule in config.yaml) and its replay (the rule gone), in one CAPSEM_HOME."""
    base = tmp_path_factory.mktemp("denied")
    home = base / "home"
    home.mkdir()
    (home / "config.yaml").write_text(RULES)
    with environ(CAPSEM_HOME=str(home), COLUMNS="160"):
        first = run("run", "--quiet", "--emulator", "--workspace", str(workspace(base / "ws")), "--",
                    sys.executable, AGENT)  # fmt: skip
        (original,) = json.loads(run("list-sessions", "--json"))
        (home / "config.yaml").unlink()  # the replay is answered as recorded, not decided again
        again = run("replay", original["id"], "--strict", "--workspace", str(workspace(base / "again")), "--",
                    sys.executable, AGENT)  # fmt: skip
        (replay,) = [s for s in json.loads(run("list-sessions", "--json")) if s["id"] != original["id"]]
    return {"home": home, "base": base, "original": original["id"], "replay": replay["id"], "first": first,
            "again": again}  # fmt: skip


def test_a_denied_call_on_a_websocket_is_recorded_as_the_agent_received_it_and_replayed_so(replayed):
    base, home = replayed["base"], replayed["home"]
    for work in ("ws", "again"):
        assert (base / work / DOOMED).read_text() == "keep me\n", f"{work}: the denied call ran"
        assert (base / work / FILE).exists(), f"{work}: the allowed call did not run"
    assert "0 missed" in replayed["again"] and "no divergence" in replayed["again"], replayed["again"]
    db = home / "sessions" / replayed["original"] / "session.db"
    denied = rows(db, "SELECT t.model_call_id, n.conn_type FROM tool_calls t JOIN model_calls c ON c.id = "
                      "t.model_call_id JOIN net_events n ON n.id = c.net_event_id WHERE t.decision = 'denied'")  # fmt: skip
    assert sorted(r["conn_type"] or "https" for r in denied) == ["https", "wss"], denied
    conn = sqlite3.connect(db)
    for row in denied:
        sent = read_body(conn, row["model_call_id"], "response")[0]
        got = read_body(conn, row["model_call_id"], "delivered")[0]
        assert b"the tool was not run" not in sent  # the model's call, as it came
        assert b"the tool was not run" in got and b"no-rm-rf" in got
    ws = next(r["model_call_id"] for r in denied if r["conn_type"] == "wss")
    got = read_body(conn, ws, "delivered")[0].split(b"\n")
    assert all(json.loads(line)["type"] for line in got)  # one message a line, as the agent got them
    assert json.loads(got[-1])["type"] == "response.completed"
    conn.close()
    replay_db = home / "sessions" / replayed["replay"] / "session.db"
    assert (
        rows(replay_db, "SELECT count(*) AS n FROM tool_calls WHERE arguments LIKE '%rm -rf%'")[0]["n"] == 0
    )


@pytest.mark.parametrize("width", ("80", "160"))
def test_the_replay_of_a_session_with_denied_calls_diffs_as_no_change(replayed, monkeypatch, width):
    monkeypatch.setenv("CAPSEM_HOME", str(replayed["home"]))
    monkeypatch.setenv("COLUMNS", width)
    out = run("diff", replayed["original"], replayed["replay"])
    assert "no change but ids and timings" in out, out
    assert "changed" not in out.replace("no change", ""), out
    lines = [line.strip() for line in out.splitlines()]
    at = lines.index("tool calls denied (compared as the agent received them):")
    assert lines[at + 1 : at + 3] == ["call 1 ↔ 1: Bash denied by rule no-rm-rf (A and B)",
                                      "call 3 ↔ 3: shell denied by rule no-rm-rf (A and B)"], out  # fmt: skip
    found = json.loads(run("diff", replayed["original"], replayed["replay"], "--json"))
    assert found["same"] is True, found
    delivered = [(c["a"]["delivered"], c["b"]["delivered"]) for c in found["calls"]]
    assert delivered == [(True, False), (False, False)] * 2  # the replay was answered so: nothing rewritten
    first = found["calls"][0]
    assert first["a"]["denied"] == first["b"]["denied"] == ["Bash denied by rule no-rm-rf"]
    if width == "80":  # the page says it too
        page = replayed["base"] / "diff.html"
        run("diff", replayed["original"], replayed["replay"], "--html", str(page))
        html = page.read_text()
        assert "no change but ids and timings" in html
        assert "call 1 ↔ 1: Bash denied by rule no-rm-rf (A and B); call 3 ↔ 3: shell" in html, html
