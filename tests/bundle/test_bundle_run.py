"""A bundle of a whole CAPSEM_HOME after `capsem run` around a scripted tool-loop agent: the
workspace file events and capsem's own process diagnostics reach the bundle and its timeline."""

from __future__ import annotations

import json
import sys

from assembler.bundle import DebugBundle
from tests.cli.conftest import run
from tests.cli.test_run import LOOP_AGENT
from tests.conftest import rows

EXTRA = ("session_id", "source_id", "correlation", "raw")


def test_bundle_of_a_capsem_home_after_capsem_run(emu, capsem_home, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(LOOP_AGENT)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    upstream = f"--mode upstream:{emu.proxy_url} --set ssl_verify_upstream_trusted_ca={emu.ca_path}"
    run("run", "--workspace", str(workspace), "--mitmdump-args", upstream, "--", sys.executable, str(script))
    (session,) = json.loads(run("list-sessions", "--json"))
    sid = session["id"]
    db = capsem_home / "sessions" / sid / "session.db"

    bundle = DebugBundle.from_directory(capsem_home, output=tmp_path / "home.db")
    with bundle:
        kinds = {r[0]: r[1] for r in bundle.query("SELECT path, kind FROM sources")}
        assert kinds["main.db"] == "capsem_main" and kinds[f"sessions/{sid}/session.db"] == "capsem_session"
        (status, mode) = bundle.query("SELECT status, json_extract(raw, '$.mode') FROM sessions").fetchone()
        assert (status, mode) == ("stopped", "run")
        for table in ("fs_events", "proc_samples", "proc_anomalies", "model_calls", "tool_calls"):
            cur = bundle.query(f"SELECT * FROM {table} ORDER BY id")
            got = [{k: v for k, v in zip([d[0] for d in cur.description], r, strict=True) if k not in EXTRA}
                   for r in cur]  # fmt: skip
            assert got == rows(db, f"SELECT * FROM {table} ORDER BY id"), table
        assert bundle.query("SELECT COUNT(*) FROM proc_samples").fetchone()[0] > 0  # the agent was sampled

        steps = bundle.query(
            "SELECT event_type, name, prompt_number FROM execution_timeline WHERE session_id = ? ORDER BY step_order",
            (sid,),
        ).fetchall()
        kinds_seen = [s[0] for s in steps]
        assert kinds_seen.count("model_call") == 2 and kinds_seen.count("tool_call") == 1
        assert ("file_event", "notes.md", 1) in steps and ("file_event", "scratch.tmp", 1) in steps
        # one tool loop: one prompt (anomalies found before the first call, if any, come before it)
        assert {p for kind, _, p in steps if kind != "anomaly"} == {1}
        assert bundle.statistics.model_call_count == 2
