"""`capsem tail`: a session followed while rows are added, and a finished one printed."""

from __future__ import annotations

import pytest

from assembler.tail import follow
from tests.cli.conftest import clone_session, days_ago, execute, recorded_id, run


def test_follow_prints_rows_as_they_are_committed_until_the_session_stops(home):
    sid = clone_session(home, days_ago(-0.001), status="running", suffix="7a11")
    db = home / "sessions" / sid / "session.db"
    seen = []
    polls = []

    def running(_sid: str) -> bool:
        polls.append(len(seen))
        if len(polls) == 2:  # the agent goes on: a file written, a connection that fails
            execute(db, "INSERT INTO fs_events (timestamp, action, path) "
                        "VALUES ('2999-01-01T00:00:01Z', 'created', 'notes.md')",
                    "INSERT INTO net_events (timestamp, domain, port, decision, method, path, error) VALUES "
                    "('2999-01-01T00:00:02Z', 'api.x.invalid', 443, 'error', 'CONNECT', '', "
                    "'DNS lookup failed')")  # fmt: skip
        return len(polls) < 3

    n = follow(sid, seen.append, interval=0.01, running=running)
    assert polls == [0, 6, 8] and n == 8
    kinds = [e.kind for e in seen]
    assert kinds[:6].count("model") == 4 and kinds[:6].count("tool") == 2
    assert [(e.kind, e.text, e.failed) for e in seen[6:]] == [
        ("file", "created notes.md", False),
        ("error", "CONNECT api.x.invalid:443 DNS lookup failed", True),
    ]
    first = next(e for e in seen if e.kind == "model")
    assert first.text.startswith("#1 anthropic/claude-sonnet-4-5 in ") and "$0.0" in first.text


@pytest.mark.parametrize("width", [80, 200])
def test_tail_of_a_finished_session(home, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    out = run("tail", "-n", "2")
    lines = out.splitlines()
    assert lines[0] == f"session {recorded_id(home)}" and all(len(x) <= width for x in lines)
    assert "#4 openai/gpt-4.1" in " ".join(out.split()) and "2 events; session" in " ".join(out.split())
    assert "#1 anthropic" not in out
