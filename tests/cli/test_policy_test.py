"""`capsem policy test` on a session recorded through real mitmdump (tests/cli/conftest.py: an
anthropic and an openai tool loop against the emulator): findings per rule and session, budget
refusals, --json, --fail-on, and clear errors. The agreement with live decisions is
tests/e2e/test_policy_backtest.py."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anthropic
import httpx
import pytest
from mcp.server.fastmcp import FastMCP

from capsem.store.schema import open_main_db
from tests.cli.conftest import recorded_id, run, session_db
from tests.conftest import rows
from tests.e2e.test_capture_sdk import ANTHROPIC_KEY, http_client
from tests.e2e.test_mcp import asgi_server, session_calls

POLICY = """
policy:
  rules:
    - {name: no-openai, action: deny, host: api.openai.com}
    - {name: watch-claude, action: warn, host: api.anthropic.com, path: /v1/messages}
budgets:
  tiny: {scope: session, limit_usd: 0.0000001}
"""


def policy_file(tmp_path: Path, text: str = POLICY) -> Path:
    path = tmp_path / "strict.yaml"
    path.write_text(text)
    return path


def test_findings_per_rule_and_session_and_the_budget_that_would_have_refused(home, tmp_path):
    data = json.loads(run("policy", "test", str(policy_file(tmp_path)), "--json"))
    session = recorded_id(home)
    nets = rows(session_db(home), "SELECT id, domain, path, method FROM net_events ORDER BY id")
    calls = rows(session_db(home), "SELECT id, estimated_cost_usd AS cost FROM model_calls ORDER BY id")
    assert data["sessions"] == {"tested": [session], "skipped": 0, "missing": 0, "unreadable": {}}
    assert data["totals"] == {"requests": len(nets), "mcp_calls": 0, "model_calls": len(calls)}
    expected = {("no-openai", "denied", n["id"]) for n in nets if n["domain"] == "api.openai.com"}
    expected |= {("watch-claude", "warned", n["id"]) for n in nets if n["domain"] == "api.anthropic.com"}
    assert {(f["rule"], f["decision"], f["net_event_id"]) for f in data["findings"]} == expected
    by_rule = {r["rule"]: r for r in data["rules"]}
    assert by_rule["no-openai"]["sessions"] == {session: 2} and by_rule["no-openai"]["decision"] == "denied"
    # the budget: the openai calls are denied by the policy (never made, never spent); the most the
    # first anthropic call could cost (its reservation, from its stored request) passes the tiny
    # limit alone, so every anthropic call is refused
    (budget,) = data["budgets"]
    openai_calls = {n["id"] for n in nets if n["domain"] == "api.openai.com"}
    ordered = rows(session_db(home), "SELECT id, net_event_id, estimated_cost_usd AS cost FROM model_calls "
                                     "ORDER BY timestamp, id")  # fmt: skip
    sent = [c for c in ordered if c["net_event_id"] not in openai_calls]
    assert sent[0]["cost"] > 0
    assert budget["first_refused"]["model_call_id"] == sent[0]["id"]
    assert budget["first_refused"]["spent_usd"] == 0
    assert budget["refused_calls"] == len(sent)
    assert budget["saved_usd"] == pytest.approx(sum(c["cost"] for c in sent))


def test_the_text_report_reads_at_80_columns(home, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = run("policy", "test", str(policy_file(tmp_path)))
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "no-openai would have denied 2 requests in 1 session, e.g.:" in text
    assert "POST api.openai.com:443/v1/chat/completions" in text
    assert "budget tiny (session, $0.0000001) would have refused 2 model calls in" in text
    assert "watch-claude would have warned about 2 requests in 1 session" in text


def test_fail_on_exits_3_only_for_the_decisions_named(home, tmp_path):
    file = str(policy_file(tmp_path))
    run("policy", "test", file, "--fail-on", "deny", code=3)
    run("policy", "test", file, "--fail-on", "ask")  # nothing would have been asked for
    allow = policy_file(tmp_path, "policy: {rules: [{action: warn, host: nowhere.test}]}")
    run("policy", "test", str(allow), "--fail-on", "deny", "--fail-on", "warn")


def test_the_current_config_is_the_default_and_a_session_can_be_named(home, tmp_path):
    (home / "config.yaml").write_text(POLICY)
    prefix = recorded_id(home)[:15]
    data = json.loads(run("policy", "test", prefix, "--json"))
    assert data["file"] == "current config" and data["sessions"]["tested"] == [recorded_id(home)]
    assert {f["rule"] for f in data["findings"]} == {"no-openai", "watch-claude"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("policy: {rules: [{action: block, host: x}]}", "policy.rules[1].action must be allow, warn, deny or ask"),
        ("policy: {rules: [{action: deny, mcp_args: {command: {regex: '('}}}]}",
         "policy.rules[1].mcp_args.command.regex is not a valid regular expression"),
        ("policy: [", "invalid YAML at line 1"),
        ("capture: {}\n", "has no policy rules and no budgets: nothing to test"),
    ],
)  # fmt: skip
def test_a_bad_file_is_one_clear_line(home, tmp_path, text, message):
    out = run("policy", "test", str(policy_file(tmp_path, text)), code=1)
    assert message in out and len(out.strip().splitlines()) == 1


def test_unknown_session_missing_file_and_empty_home_are_clear_errors(home, tmp_path):
    file = str(policy_file(tmp_path))
    assert "no session.db or session.db.gz for session 'nope'" in run("policy", "test", file, "nope", code=1)
    assert "missing.yaml: no such file" in run("policy", "test", str(tmp_path / "missing.yaml"), code=1)
    assert "no session recorded since 2999-01-01" in run(
        "policy", "test", file, "--since", "2999-01-01", code=1
    )
    assert "is not a day" in run("policy", "test", file, "--since", "soon", code=2)


def test_no_main_db_or_an_empty_one_is_a_clear_error(capsem_home, tmp_path):
    out = run("policy", "test", str(policy_file(tmp_path)), code=1)
    assert "no main.db at" in out and "nothing to test" in out
    open_main_db(capsem_home / "main.db").close()
    assert (
        run("policy", "test", str(policy_file(tmp_path)), code=1) == "Error: main.db holds no session yet\n"
    )


# --- the backtest agrees with the live proxy --------------------------------------------------

LIVE_POLICY = """
policy:
  rules:
    - {name: no-admin, action: deny, path: "/admin/*"}
    - {name: no-rm-rf, action: deny, mcp_tool: run_command, mcp_args: {command: "rm -rf *"}}
    - {name: watch-notes, action: warn, mcp_server: shell-server, mcp_tool: read_note}
budgets:
  tiny: {scope: session, limit_usd: 0.0013}  # one call's reservation (~$0.00127) fits, not two
"""


@contextmanager
def shell_server() -> Iterator[str]:
    """A FastMCP server (the `mcp` SDK, Streamable HTTP) on loopback with a shell-like tool."""
    server = FastMCP("shell-server", json_response=True, log_level="WARNING")

    @server.tool()
    def run_command(command: str) -> str:
        """Run a command."""
        return f"ran {command}"

    @server.tool()
    def read_note(name: str) -> str:
        """Read a note."""
        return f"note {name}"

    with asgi_server(server.streamable_http_app()) as port:
        yield f"http://127.0.0.1:{port}/mcp"


def agent(proxy, emu, url: str) -> list[str]:
    """The same traffic every time: plain HTTP, MCP tool calls (one client session each: a refused
    call ends its session), model calls; what became of each."""
    outcomes = []
    with httpx.Client(proxy=proxy.url, timeout=30) as http:
        for path in ("/admin/users", "/v1/models"):
            outcomes.append(f"GET {path} {http.get(emu.http_url + path).status_code}")
    for tool, arguments in (("run_command", {"command": "ls -la"}), ("run_command", {"command": "rm -rf /tmp/x"}),
                            ("read_note", {"name": "todo"})):  # fmt: skip
        try:
            asyncio.run(session_calls(url, proxy, [lambda s, t=tool, a=arguments: s.call_tool(t, a)]))
            outcomes.append(f"{tool} ok")
        except BaseExceptionGroup:  # the SDK fails the session on the proxy's 403
            outcomes.append(f"{tool} refused")
    client = anthropic.Anthropic(api_key=ANTHROPIC_KEY, base_url=emu.http_url, http_client=http_client(proxy),
                                 max_retries=0)  # fmt: skip
    for _ in range(3):
        try:
            client.messages.create(
                model="claude-sonnet-4-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
            )
            outcomes.append("model ok")
        except anthropic.APIStatusError as exc:
            outcomes.append(f"model {exc.status_code}")
    return outcomes


def keyed(db: Path, net_ids: set[int] | None = None, decision: str | None = None) -> set[tuple]:
    """Requests of a session as comparable keys: method, host, port, path, MCP tool and arguments,
    and which of the identical ones it was (the 2nd model call)."""
    nets = rows(db, "SELECT id, method, domain, port, path, decision FROM net_events ORDER BY id")
    tools = {m["net_event_id"]: (m["tool_name"], json.loads(m["request_preview"]).get("arguments"))
             for m in rows(db, "SELECT net_event_id, tool_name, request_preview FROM mcp_calls "
                               "WHERE method = 'tools/call'")}  # fmt: skip
    seen: Counter = Counter()
    out = set()
    for n in nets:
        key = (n["method"], n["domain"], n["port"], n["path"], json.dumps(tools.get(n["id"])))
        seen[key] += 1
        if (net_ids is None or n["id"] in net_ids) and (decision is None or n["decision"] == decision):
            out.add((*key, seen[key]))
    return out


def test_the_backtest_denies_what_the_proxy_then_denies_live(mitmdump, emu, capsem_home, tmp_path):
    """Record with no policy; backtest a policy file on that session; record the same traffic with
    the policy on: the requests denied (and warned about) live are those the backtest named."""
    file = policy_file(tmp_path, LIVE_POLICY)
    with shell_server() as url:
        proxy = mitmdump()
        before = agent(proxy, emu, url)
        assert proxy.stop() == 0
        (first,) = [p.parent for p in (capsem_home / "sessions").glob("*/session.db")]
        data = json.loads(run("policy", "test", str(file), first.name, "--json"))
        (capsem_home / "config.yaml").write_text(LIVE_POLICY)
        proxy = mitmdump()
        after = agent(proxy, emu, url)
        assert proxy.stop() == 0
    assert before == ["GET /admin/users 404", "GET /v1/models 200", "run_command ok", "run_command ok", "read_note ok",
                      "model ok", "model ok", "model ok"]  # fmt: skip
    assert after == ["GET /admin/users 403", "GET /v1/models 200", "run_command ok", "run_command refused",
                     "read_note ok", "model ok", "model 402", "model 402"]  # fmt: skip
    (second,) = [p.parent for p in (capsem_home / "sessions").glob("*/session.db") if p.parent != first]
    db1, db2 = first / "session.db", second / "session.db"
    denied = {f["net_event_id"] for f in data["findings"] if f["decision"] == "denied"}
    (budget,) = data["budgets"]
    refused = {
        c["net_event_id"]
        for c in rows(db1, "SELECT net_event_id FROM model_calls ORDER BY timestamp, id")[1:]
    }
    assert budget["refused_calls"] == 2 and budget["first_refused"]["model_call_id"] == 2
    assert budget["saved_usd"] > 0
    assert keyed(db1, denied | refused) == keyed(db2, decision="denied")
    assert len(keyed(db2, decision="denied")) == 4  # /admin, rm -rf, two model calls past the budget
    warned = {f["net_event_id"] for f in data["findings"] if f["decision"] == "warned"}
    assert keyed(db1, warned) == keyed(db2, decision="warned") and len(warned) == 1
    (rm,) = [f for f in data["findings"] if f["rule"] == "no-rm-rf"]
    assert rm["mcp"]["tool"] == "run_command" and rm["mcp"]["server"] == "shell-server"
    assert json.loads(rm["mcp"]["arguments"]) == {"command": "rm -rf /tmp/x"}
    assert rm["process"] and rm["live_decision"] == "allowed"
    # both sessions: the second was recorded with the policy on, and the report says so
    text = run("policy", "test", str(file))
    assert "no-rm-rf would have denied 2 requests in 2 sessions (1 denied live), e.g.:" in text
    assert 'MCP shell-server > run_command {"command":"rm -rf /tmp/x"}' in text
