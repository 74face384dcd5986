"""`capsem approvals|approve|deny` when nothing can answer: no main.db, a running session whose
mitmdump never asked (no channel), one whose mitmdump was killed and left its channel file, and
one whose channel does not answer. Each is a clear line, never a traceback. Answering real held
requests: tests/e2e/test_ask.py (through mitmdump) and tests/addons/proxy/test_approvals.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from capsem.approval_wire import write_channel
from capsem.ids import new_session_id, utc_now
from capsem.paths import session_dir
from capsem.rollup import open_main, register_session
from tests.cli.conftest import run


def running_session() -> str:
    sid = new_session_id()
    session_dir(sid).mkdir(parents=True)
    main = open_main()
    try:
        register_session(main, sid, mode="mitmdump", command=None, created_at=utc_now())
    finally:
        main.close()
    return sid


def test_nothing_to_answer_is_said_in_one_line(capsem_home):
    assert run("approvals") == "Nothing waits for a person.\n"
    assert json.loads(run("approvals", "--json")) == {"waiting": [], "problems": []}
    said = run("approve", "3f9c2a", code=1)
    assert said == "Error: no request waits as '3f9c2a' (waiting now: none)\n"
    running_session()  # a session that never asked has no channel
    assert run("approvals") == "Nothing waits for a person.\n"


def test_a_dead_mitmdumps_channel_is_skipped_and_one_that_does_not_answer_named(capsem_home):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = session_dir(running_session())
    write_channel(gone, 9, "t")
    (gone / "approvals.json").write_text(json.dumps({"port": 9, "token": "t", "pid": dead.pid}))
    assert run("approvals") == "Nothing waits for a person.\n"  # its process is gone: skipped
    with socket.socket() as closed:  # a port nothing listens on: its mitmdump (this process) is alive
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    sid = running_session()
    write_channel(session_dir(sid), port, "t")
    listed = json.loads(run("approvals", "--json"))
    said = run("deny", "3f9c2a", "--reason", "x", code=1)
    assert listed["waiting"] == [] and len(listed["problems"]) == 1
    assert listed["problems"][0].startswith(f"session {sid}: its approvals channel")
    assert said.startswith("Error: no request waits as '3f9c2a' (waiting now: none) (session ")
