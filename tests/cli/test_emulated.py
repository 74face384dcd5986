"""Issue 35, point 2: what `run --emulator` (and a replay, and `demo`) answers costs nothing, so it
never counts toward a budget and is left out of cost totals unless asked for, and is shown marked."""

from __future__ import annotations

import json
import sys

from tests.cli.conftest import run
from tests.conftest import rows

AGENT = """
import sys, anthropic, httpx
client = anthropic.Anthropic(api_key="sk-ant-api03-EMULATEDRUN00000000000000", max_retries=0)
model, words = sys.argv[1], int(sys.argv[2])
for _ in range(2):
    client.messages.create(model=model, max_tokens=50, messages=[{"role": "user", "content": "word " * words}])
# a host the emulator does not play: its 404 says `server: not-emulated (capsem)`
assert httpx.get("https://github.com/capsem/x.git/info/refs").status_code == 404
"""


def meta(home, session_id: str) -> dict[str, str]:
    db = home / "sessions" / session_id / "session.db"
    return {r["key"]: r["value"] for r in rows(db, "SELECT key, value FROM session_meta")}


def test_an_emulated_run_spends_nothing_and_a_real_run_is_not_refused_for_it(emu, capsem_home, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    # long prompts to an expensive model: priced far past the daily limit, but nothing was spent
    run("run", "-q", "--emulator", "--workspace", str(tmp_path), "--", sys.executable, str(script),
        "claude-opus-4-1", "20000")  # fmt: skip
    (emulated,) = json.loads(run("list-sessions", "--json"))
    # a daily budget, set after: an emulated session's own budgets count its own calls (a budget can
    # be tried on the emulator), no other session's do
    (capsem_home / "config.yaml").write_text("budgets:\n  daily: {scope: day, limit_usd: 0.05}\n")
    assert emulated["emulated"] == 1 and emulated["total_estimated_cost"] > 0.05
    # the emulator's 404 for a host it does not play is listed apart, not an error of the agent's
    assert meta(capsem_home, emulated["id"])["emulated"] == "true" and emulated["total_errors"] == 0
    assert [b["spent_usd"] for b in json.loads(run("budget", "--json"))] == [0]
    listed = run("list-sessions")
    assert "stopped emu" in listed and "emu = emulated" in listed
    # a run against a real upstream (the emulator playing the provider, as in the other tests) is
    # not refused for the emulated session's priced calls, and its own spend counts
    upstream = f"--mode upstream:{emu.proxy_url} --set ssl_verify_upstream_trusted_ca={emu.ca_path}"
    run("run", "-q", "--workspace", str(tmp_path), "--mitmdump-args", upstream, "--", sys.executable, str(script),
        "claude-haiku-4-5", "5")  # fmt: skip
    real = next(s for s in json.loads(run("list-sessions", "--json")) if s["id"] != emulated["id"])
    assert real["emulated"] == 0 and real["denied_requests"] == 0
    # not emulated: the same header is one any server could send, so that 404 is an error
    assert meta(capsem_home, real["id"])["emulated"] == "false" and real["total_errors"] == 1
    assert "not emulated" not in run("inspect-session", real["id"])
    decisions = rows(capsem_home / "sessions" / real["id"] / "session.db", "SELECT decision FROM net_events")
    assert {d["decision"] for d in decisions} <= {"allowed", "warned"}
    (daily,) = json.loads(run("budget", "--json"))
    assert daily["spent_usd"] == real["total_estimated_cost"] > 0
    report = json.loads(run("cost-report", "--json", "--by", "session"))
    assert [r["key"] for r in report["rows"]] == [real["id"]] and report["totals"]["emulated_sessions"] == 1
    assert "1 emulated session left out" in run("cost-report") and "--include-emulated counts them" in run(
        "cost-report"
    )
    both = json.loads(run("cost-report", "--json", "--by", "session", "--include-emulated"))
    assert {r["key"] for r in both["rows"]} == {real["id"], emulated["id"]}
