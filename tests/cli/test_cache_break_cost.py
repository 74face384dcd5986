"""cost-report says what prompt-cache breaks cost, per model and in all, from the main.db rollup."""

from __future__ import annotations

import json

from capsem.rollup import register_session, rollup
from capsem.store.schema import open_main_db
from tests.addons.recorder.test_conversations import BASH, TOOLS, claude_code, send, usage_reply
from tests.cli.conftest import run
from tests.recording import RecorderHarness

SID = "20261125-203000-abcd"


def test_cost_report_says_what_cache_breaks_cost(capsem_home, monkeypatch):
    main = open_main_db(capsem_home / "main.db")
    register_session(main, SID, mode="run", command="claude -p 'fix it'", created_at="2026-11-25T20:30:00Z")
    main.commit()
    rec = RecorderHarness(capsem_home / "sessions" / SID)
    ask = {"role": "user", "content": "fix the failing test"}
    send(rec, 0, claude_code("a1", [ask]), usage_reply([BASH], read=0, write=12_000, stop="tool_use"))
    result = {"type": "tool_result", "tool_use_id": "toolu_bash1", "content": "ok"}
    loop = [ask, {"role": "assistant", "content": [BASH]}, {"role": "user", "content": [result]}]
    changed = [{**TOOLS[0], "description": "the Bash tool, now with a timeout"}, TOOLS[1]]
    send(rec, 1, {**claude_code("b2", loop), "tools": changed}, usage_reply([], read=0, write=12_300))
    rec.shutdown()
    assert rollup(main, SID)
    main.commit()
    (row,) = main.execute("SELECT lost_to_cache_breaks FROM sessions").fetchall()
    assert abs(row[0] - 0.0414) < 1e-9  # 12,000 tokens written again: 12,000 × ($3.75 − $0.30) / 1M
    report = json.loads(run("cost-report", "--by", "model", "--json"))
    (model,) = report["rows"]
    assert abs(model["lost_to_cache_breaks"] - 0.0414) < 1e-9
    for width in ("80", "160"):
        monkeypatch.setenv("COLUMNS", width)
        table = run("cost-report")
        assert "lost to" in table and "$0.0414" in table
        assert all(len(line) <= int(width) for line in table.splitlines())
