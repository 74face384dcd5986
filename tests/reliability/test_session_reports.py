"""What the session commands say about a session whose processes died, and how long they take on a
big degraded one."""

from __future__ import annotations

import re
import signal

from assembler.inspect import Clock, inspect_session
from assembler.sessions import SessionFilters, list_sessions
from capsem.rollup import NOT_RECORDED_END, open_main, recover_crashed
from capsem.store.schema import open_session_db
from tests.conftest import only_session, rows
from tests.reliability.test_crash_and_faults import ask
from tests.reliability.test_recorder_faults import recorder_of


def test_a_session_whose_processes_died_reads_the_same_everywhere_and_never_complete(
    mitmdump, emu, capsem_home
):
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    assert [ask(proxy, n) for n in range(2)] == [200] * 2
    recorder = recorder_of(proxy)
    recorder.send_signal(signal.SIGSTOP)  # so that it cannot record the end when mitmdump dies
    proxy.kill()
    recorder.kill()
    recorder.wait(10)
    sid = only_session(capsem_home).parent.name
    assert rows(capsem_home / "main.db", "SELECT status FROM sessions") == [{"status": "running"}]

    (listed,) = list_sessions(SessionFilters()).sessions
    report = inspect_session(sid)
    assert listed["status"] == report.status == "crashed"
    assert listed["capture_status"] == "unknown"
    assert [f.message for f in report.findings if f.check == "capture"] == [
        f"capture incomplete: {NOT_RECORDED_END}"
    ]

    main = open_main()
    try:
        assert recover_crashed(main) == [sid]  # what the next start does
    finally:
        main.close()
    (row,) = rows(capsem_home / "main.db", "SELECT * FROM sessions WHERE id = ?", (sid,))
    assert (row["status"], row["capture_status"], row["capture_error"]) == (
        "crashed",
        "unknown",
        NOT_RECORDED_END,
    )
    assert inspect_session(sid).status == "crashed"


def test_inspect_session_is_bounded_on_a_big_degraded_session_and_says_what_it_skipped(capsem_home):
    """Half of 30,000 model-call flows lost their model_calls row (a recorder that died): the check
    that finds them was quadratic (minutes on 560 MB); it is not any more, and whatever does not
    finish within the clock is reported as skipped."""
    sid = "20261125-120000-b1b1"
    db = capsem_home / "sessions" / sid / "session.db"
    db.parent.mkdir(parents=True)
    conn = open_session_db(db)
    with conn:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO net_events (id, event_id, timestamp, domain, port, decision, method, path, flow_id, "
            "http_version, conn_type, provider) VALUES (?, ?, '2026-11-25T12:00:00Z', 'api.anthropic.com', 443, "
            "'allowed', 'POST', '/v1/messages', ?, 'HTTP/1.1', 'https', 'anthropic')",
            [(i, f"{i:012x}", f"flow-{i}") for i in range(1, 30_001)],
        )
        conn.executemany(
            "INSERT INTO model_calls (id, event_id, timestamp, provider, method, path, flow_id, protocol, host, "
            "net_event_id) VALUES (?, ?, '2026-11-25T12:00:00Z', 'anthropic', 'POST', '/v1/messages', ?, "
            "'anthropic', 'api.anthropic.com', ?)",
            [(i, f"{i:012x}", f"flow-{2 * i}", 2 * i) for i in range(1, 15_001)],
        )
    conn.close()

    found = {f.check: f.message for f in inspect_session(sid).findings}
    assert found["provider traffic"].startswith("15000/30000 model-call flows have no model_calls row")
    assert "checks" not in found

    skipped = [f for f in inspect_session(sid, clock=Clock(per_check=0.0)).findings if f.check == "checks"]
    said = re.match(r"(\d+) checks skipped \((schema, integrity, .*)\): not done", skipped[0].message)
    assert skipped[0].severity == "warning" and said, skipped[0].message
    assert int(said.group(1)) == len(said.group(2).split(", ")) > 15  # every check named
    assert "their findings are missing" in skipped[0].message
