"""`capsem verify` on a 5,000-call session built through the store's writer: it verifies, and
one changed token count among its ~20,000 rows is found and named."""

from __future__ import annotations

import sqlite3

from benchmarks.ledger import build
from tests.cli.conftest import run


def test_a_5000_call_session_verifies_and_one_change_is_found(capsem_home):
    session_id = "20260101-000000-5000"
    db = capsem_home / "sessions" / session_id / "session.db"
    build(db, 5000)
    out = run("verify", session_id)
    # 5,000 net_events, model_calls and tool_calls, 4,999 tool_responses, 2 meta values, and the
    # 4,999 tool calls a result finished chained again as the trigger left them
    assert f"{session_id}  verified  25,000 rows in 101 signed batches, signed end" in out
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM tool_calls WHERE status = 'responded'").fetchone() == (4999,)
    conn.execute("UPDATE model_calls SET input_tokens = input_tokens + 1 WHERE id = 4321")
    conn.commit()
    conn.close()
    assert f"{session_id}  FAILED    model_calls id 4321: changed" in run("verify", session_id, code=1)
