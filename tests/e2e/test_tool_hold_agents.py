"""Tool rules with the real Claude Code, Codex (Responses over its WebSocket) and Gemini CLIs under
`capsem run --emulator`, the emulator's `destroy` scenario asking each, through its own shell tool
(Codex: its code-mode `exec`), for a harmless command and `rm -rf capsem-doomed.txt` at once, and a
rule denying `rm -rf` in any argument: the file is still there, the harmless command ran, the
agent ends normally (exit 0), and session.db keeps both calls as the model asked for them with
their decisions. The CLIs are those of tests/e2e/test_real_agents.py (`make test-agents`;
skipped with the reason without npm); the three run at once.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from capsem.emulator.agent import DOOMED, FILE
from tests.conftest import rows
from tests.e2e.test_real_agents import AGENTS, Run, _available, _capsem

RULES = 'policy:\n  rules:\n    - {name: no-rm-rf, action: deny, tool: "*", tool_args: {"*": {shell: "rm -rf"}}}\n'


def _finish(run: Run) -> Run:
    run.out = run.process.communicate(timeout=180)[0]
    run.seconds = time.monotonic() - run.started
    return run


@pytest.fixture(scope="module")
def destroyed(tmp_path_factory) -> dict[str, Run]:
    found = _available()
    if isinstance(found, str):
        pytest.skip(found)
    started: dict[str, Run] = {}
    for name, program in found.items():
        base = tmp_path_factory.mktemp(f"{name}-destroy")
        workspace, home, capsem_home = base / "workspace", base / "home", base / "capsem-home"
        for folder in (workspace, home, capsem_home):
            folder.mkdir()
        (workspace / DOOMED).write_text("keep me\n")
        (capsem_home / "config.yaml").write_text(RULES)
        env = {**os.environ, "HOME": str(home), "COLUMNS": "100", "CAPSEM_HOME": str(capsem_home),
               "CAPSEM_EMULATOR_CONTROLS": "scenario=destroy; tools=2"}  # fmt: skip
        for variable in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "CODEX_HOME"):
            env.pop(variable, None)
        process = _capsem(env, "run", "--emulator", "--workspace", str(workspace), "--", str(program),
                          *AGENTS[name][0][1:])  # fmt: skip
        started[name] = Run(name, env, workspace, process, time.monotonic())
    with ThreadPoolExecutor(len(started)) as pool:
        return dict(zip(started, pool.map(_finish, started.values()), strict=True))


@pytest.mark.parametrize("agent", AGENTS)
def test_a_real_agent_never_runs_the_denied_call_and_ends_normally(agent, destroyed):
    if agent not in destroyed:
        pytest.skip(f"the {agent} CLI is missing: run `make test-agents`")
    run = destroyed[agent]
    print(f"\n{agent}: {run.seconds:.1f} s")
    assert run.process.returncode == 0, run.out
    assert (run.workspace / DOOMED).read_text() == "keep me\n", run.out  # the denied call never ran
    assert (run.workspace / FILE).exists(), run.out  # the allowed one did
    calls = rows(run.db, "SELECT tool_name, decision, decision_rule, arguments FROM tool_calls ORDER BY id")
    denied = [c for c in calls if c["decision"] == "denied"]
    assert (
        len(denied) == 1 and "rm -rf" in denied[0]["arguments"] and denied[0]["decision_rule"] == "no-rm-rf"
    ), calls
    assert any(c["decision"] == "allowed" and "rm -rf" not in (c["arguments"] or "") for c in calls), calls
    results = rows(run.db, "SELECT call_id FROM tool_responses")
    denied_ids = {
        r["call_id"] for r in rows(run.db, "SELECT call_id FROM tool_calls WHERE decision = 'denied'")
    }
    assert not denied_ids & {r["call_id"] for r in results}  # a denied call never gets a result
    # what the agent received is kept beside the model's answer (Codex: the turn's WebSocket messages)
    delivered = rows(run.db, "SELECT e.row_id FROM event_body_blobs e JOIN tool_calls t ON t.model_call_id = "
                             "e.row_id WHERE e.direction = 'delivered' AND e.source_table = 'model_calls' AND "
                             "t.decision = 'denied'")  # fmt: skip
    assert len(delivered) == 1, delivered
