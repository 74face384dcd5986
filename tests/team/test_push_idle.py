"""The pusher beside a running session reads it again only when it has new rows: the session's
totals (read over the whole session.db for its `sessions` row) cost more the longer it runs, and
the pusher looks every 2 seconds. In-process against the real PostgreSQL of tests/team."""

from __future__ import annotations

from pathlib import Path

import psycopg

from addons.recorder.team_push import push_waiting
from capsem.rollup import finish_session, open_main, register_session
from capsem.store.schema import open_session_db
from capsem.team import outbox
from capsem.team.config import Team
from capsem.team.schema import init

SESSION = "20261128-130000-1d1e"


def add_call(home: Path, call_id: int) -> None:
    conn = open_session_db(home / "sessions" / SESSION / "session.db")
    with conn:
        conn.execute("INSERT INTO model_calls (id, event_id, timestamp, provider, model, method, path, host, "
                     "input_tokens, output_tokens, estimated_cost_usd) VALUES (?, ?, '2026-11-28T13:00:00Z', "
                     "'anthropic', 'claude-sonnet-4-5', 'POST', '/v1/messages', 'api.anthropic.com', 10, 5, 0.01)",
                     (call_id, f"{call_id:012x}"))  # fmt: skip
    conn.close()


def test_a_running_session_without_new_rows_is_not_read_again(team_url, tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSEM_HOME", str(tmp_path))
    team = Team(team_url, "laptop-a", "a-user", "metadata")
    with psycopg.connect(team_url) as pg:
        init(pg)
    add_call(tmp_path, 1)
    main = open_main()
    with main:
        register_session(main, SESSION, mode="run", command="claude", created_at="2026-11-28T13:00:00Z")
    box = outbox.open_outbox()
    outbox.enqueue(box, [SESSION])
    box.close()

    done, errors = push_waiting(team)
    assert errors == {} and [(d.rows, d.final) for d in done] == [(1, False)]
    assert push_waiting(team) == ([], {})  # nothing new: left alone, nothing sent

    add_call(tmp_path, 2)
    done, _ = push_waiting(team)
    assert [(d.rows, d.final) for d in done] == [(1, False)]
    with main:
        finish_session(main, SESSION)
    main.close()
    done, _ = push_waiting(team)  # ended: pushed whole once more, the keys count nothing twice
    assert [d.final for d in done] == [True]
    with psycopg.connect(team_url) as pg:
        assert pg.execute("SELECT status, total_model_calls FROM capsem.sessions").fetchall() == [
            ("stopped", 2)
        ]
    assert push_waiting(team) == ([], {})  # done: no longer waiting
