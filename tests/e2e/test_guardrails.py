"""Guardrails end to end: real mitmdump, the real SDKs, the emulator upstream.

A day budget crossed by a tool loop: the next call is answered by capsem in the provider's own
error shape, the SDKs raise at once (no retry) with the budget in the message, the emulator never
sees it; a second session running at the same time shares the day budget. Brokered Anthropic and
OpenAI keys through `capsem run --broker`: the emulator receives the real keys, the agent's
environment and every file under CAPSEM_HOME hold only the placeholders, and a placeholder sent to
another host arrives unchanged and is recorded as refused.
"""

from __future__ import annotations

import json
import ssl
import sys
import time

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from capsem.mitm import MitmdumpError
from tests.cli.conftest import run
from tests.conftest import rows
from tests.e2e.test_capture_sdk import ANTHROPIC_KEY, OPENAI_KEY, TOOLS_A, model_exchanges
from tests.reliability.test_bombs_and_secrets import leaks_in_tables

HI = [{"role": "user", "content": "hi"}]


class Counted(httpx.Client):
    """An httpx client through the proxy that counts the requests the SDK sends (retries included)."""

    def __init__(self, proxy) -> None:
        self.sent = 0
        super().__init__(proxy=proxy.url, verify=ssl.create_default_context(cafile=proxy.ca_cert), timeout=30,
                         event_hooks={"request": [self._count]})  # fmt: skip

    def _count(self, request: httpx.Request) -> None:
        self.sent += 1


def session_of(proxy) -> str:
    """The id of the session a running mitmdump records (from its log line)."""
    return proxy.log().split("recording session ", 1)[1].split()[0]


def test_a_day_budget_stops_a_tool_loop_and_a_concurrent_session_shares_it(mitmdump, emu, capsem_home):
    capsem_home.mkdir(parents=True, exist_ok=True)
    # the first call reserves ~$0.006 (its body and the tool prompt's allowance at the 1-hour cache
    # write price, 200 output tokens) and fits; the tool loop's next one does not, with the first's cost
    (capsem_home / "config.yaml").write_text("budgets:\n  daily: {scope: day, limit_usd: 0.0065}\n")
    first = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    http = Counted(first)
    claude = anthropic.Anthropic(api_key=ANTHROPIC_KEY, http_client=http, max_retries=2)  # the SDK's default
    messages = [{"role": "user", "content": "read the README"}]
    asked = claude.messages.create(model="claude-haiku-4-5", max_tokens=200, tools=TOOLS_A, messages=messages)
    (use,) = [b for b in asked.content if b.type == "tool_use"]
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "# app"}
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in asked.content]},
                 {"role": "user", "content": [result]}]  # fmt: skip
    with pytest.raises(anthropic.APIStatusError) as refused:  # the tool loop's next call
        claude.messages.create(model="claude-haiku-4-5", max_tokens=200, tools=TOOLS_A, messages=messages)
    error = refused.value
    assert error.status_code == 402 and http.sent == 2  # raised at once: no retry
    assert error.body == {
        "type": "error",
        "error": {"type": "billing_error", "message": error.body["error"]["message"]},
    }
    assert "capsem budget 'daily' cannot cover this call" in str(
        error
    ) and "of its $0.0065 limit per day" in str(error)
    assert len(model_exchanges(emu)) == 1  # the emulator never saw the refused call

    # a second session, running at the same time: the first one's spend counts in the day budget
    first_id = session_of(first)
    deadline = time.monotonic() + 10  # the first session's recorder saves its spend at its next commit
    while not rows(capsem_home / "main.db", "SELECT 1 FROM spend WHERE session_id = ?", (first_id,)):
        assert time.monotonic() < deadline, "the running session's spend never reached main.db"
        time.sleep(0.05)
    emu.clear()
    second = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    http2 = Counted(second)
    with pytest.raises(anthropic.APIStatusError, match="capsem budget 'daily' cannot cover") as claude2:
        anthropic.Anthropic(api_key=ANTHROPIC_KEY, http_client=http2, max_retries=2).messages.create(
            model="claude-haiku-4-5", max_tokens=1300, messages=HI)  # fmt: skip
    assert "is used today (UTC)" in str(claude2.value) and "$0.00 is used" not in str(
        claude2.value
    )  # the first session's
    gpt = openai.OpenAI(api_key=OPENAI_KEY, http_client=http2, max_retries=2)
    with pytest.raises(openai.APIStatusError) as chat:
        gpt.chat.completions.create(model="gpt-4.1", messages=HI)
    with pytest.raises(openai.APIStatusError) as responses:
        gpt.responses.create(model="gpt-4.1", input="hi")
    for raised in (chat.value, responses.value):
        assert raised.status_code == 402 and raised.code == "budget_exceeded" and "'daily'" in raised.message
    gemini = genai.Client(api_key="AIza-e2e-not-a-key-0000000000000", http_options=types.HttpOptions(
        client_args={"proxy": second.url, "verify": ssl.create_default_context(cafile=second.ca_cert)}))  # fmt: skip
    with pytest.raises(genai_errors.ClientError) as google:
        gemini.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert google.value.code == 402 and "capsem budget 'daily'" in google.value.message
    assert http2.sent == 3 and model_exchanges(emu) == []

    assert first.stop() == 0 and second.stop() == 0
    ids = session_of(first), session_of(second)
    nets = [rows(capsem_home / "sessions" / i / "session.db",
                 "SELECT decision, matched_rule, status_code FROM net_events ORDER BY id") for i in ids]  # fmt: skip
    denied = {"decision": "denied", "matched_rule": "budget:daily", "status_code": 402}
    assert nets[0] == [{"decision": "allowed", "matched_rule": None, "status_code": 200}, denied]
    assert nets[1] == [denied] * 4
    states = json.loads(run("budget", "--json"))
    assert [s["name"] for s in states] == ["daily"] and states[0]["spent_usd"] > 0
    assert "budget daily refused 1 model call (answered by capsem, never sent)" in run(
        "inspect-session", ids[0]
    )


def test_a_bad_budget_or_a_missing_key_stops_mitmdump_with_one_line(mitmdump, capsem_home, monkeypatch):
    capsem_home.mkdir(parents=True, exist_ok=True)
    config = capsem_home / "config.yaml"
    monkeypatch.delenv("CAPSEM_TEST_NO_SUCH_KEY", raising=False)
    config.write_text("credentials:\n  anthropic: {host: api.anthropic.com, header: x-api-key, "
                      "env: CAPSEM_TEST_NO_SUCH_KEY}\n")  # fmt: skip
    with pytest.raises(MitmdumpError) as stopped:
        mitmdump()
    line = (f"{config}: credentials.anthropic.env names CAPSEM_TEST_NO_SUCH_KEY, which is not set "
            "(or empty) in capsem's environment")  # fmt: skip
    said = str(stopped.value)  # the addon's line first (what `capsem run` prints), then where the log is
    assert said.startswith(line + " (mitmdump exited 1; its log: ") and "Traceback" not in said


AGENT = """
import json, os, pathlib, sys, anthropic, openai
# Configured only by its environment: the proxy, the CA and the keys it was given.
pathlib.Path(sys.argv[1]).write_text(json.dumps(dict(os.environ)))
claude = anthropic.Anthropic(max_retries=0)
claude.messages.create(model="claude-haiku-4-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
gpt = openai.OpenAI(max_retries=0)
gpt.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}])
# a prompt-injected agent sends its key elsewhere: an OpenAI-compatible host that is not OpenAI
other = openai.OpenAI(base_url="https://api.deepseek.com/v1", max_retries=0)
other.chat.completions.create(model="deepseek-chat", messages=[{"role": "user", "content": "hi"}])
"""
REAL_ANTHROPIC = "sk-ant-api03-BROKERED-real-anthropic-key-00000000"
REAL_OPENAI = "sk-proj-BROKERED-real-openai-key-000000000000000"


def test_brokered_keys_reach_the_upstream_and_nothing_else(emu, capsem_home, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_ANTHROPIC)  # capsem's own environment holds the keys
    monkeypatch.setenv("OPENAI_API_KEY", REAL_OPENAI)
    capsem_home.mkdir(parents=True, exist_ok=True)
    (capsem_home / "config.yaml").write_text(
        "credentials:\n"
        "  anthropic: {host: api.anthropic.com, header: x-api-key, env: ANTHROPIC_API_KEY}\n"
        "  openai: {host: api.openai.com, header: authorization, env: OPENAI_API_KEY}\n"
    )
    script, seen = tmp_path / "agent.py", tmp_path / "agent-env.json"
    script.write_text(AGENT)
    upstream = f"--mode upstream:{emu.proxy_url} --set ssl_verify_upstream_trusted_ca={emu.ca_path}"
    run("run", "--broker", "-q", "--mitmdump-args", upstream, "--", sys.executable, str(script), str(seen))

    env = json.loads(seen.read_text())
    assert env["ANTHROPIC_API_KEY"] == "capsem-placeholder-anthropic"
    assert env["OPENAI_API_KEY"] == "capsem-placeholder-openai"
    assert not [k for k, v in env.items() if REAL_ANTHROPIC in v or REAL_OPENAI in v]
    keys = {e["host"]: e["request_headers"] for e in model_exchanges(emu)}
    assert keys["api.anthropic.com"]["x-api-key"] == REAL_ANTHROPIC
    assert keys["api.openai.com"]["authorization"] == f"Bearer {REAL_OPENAI}"
    assert keys["api.deepseek.com"]["authorization"] == "Bearer capsem-placeholder-openai"  # unchanged

    (session,) = json.loads(run("list-sessions", "--json"))
    db = capsem_home / "sessions" / session["id"] / "session.db"
    events = rows(
        db, "SELECT credential, host, location, outcome, reason FROM substitution_events ORDER BY id"
    )
    assert events == [
        {"credential": "anthropic", "host": "api.anthropic.com", "location": "header x-api-key",
         "outcome": "substituted", "reason": None},
        {"credential": "openai", "host": "api.openai.com", "location": "header authorization",
         "outcome": "substituted", "reason": None},
        {"credential": "openai", "host": "api.deepseek.com", "location": "header authorization",
         "outcome": "refused", "reason": "api.deepseek.com is not a host of this credential (api.openai.com)"},
    ]  # fmt: skip
    files = [p for p in capsem_home.rglob("*") if p.is_file()]
    assert {"session.db", "main.db", "mitmdump.log"} <= {p.name for p in files}
    for path in files:
        data = path.read_bytes()
        assert REAL_ANTHROPIC.encode() not in data and REAL_OPENAI.encode() not in data, path
        assert b"BROKERED-real" not in data, path
    for path in (db, capsem_home / "main.db"):  # values in overflow pages and compressed bodies too
        assert leaks_in_tables(path, "BROKERED-real") == []
    inspected = run("inspect-session", session["id"])
    assert "credential openai: 1 placeholder not replaced" in inspected


def test_run_broker_without_credentials_says_what_to_do(capsem_home):
    out = run("run", "--broker", "--", sys.executable, "-c", "pass", code=1)
    assert "--broker: no credentials are configured; add a credentials: section to" in out


def test_a_budget_holds_on_the_websocket_transport_codex_uses(mitmdump, emu, capsem_home):
    """Responses over a WebSocket: each `response.create` is checked like an HTTP call; a refused
    one never reaches the upstream and the client gets an `error` event with status 402."""
    from tests.e2e.test_responses_sdk import ws_conversation

    capsem_home.mkdir(parents=True, exist_ok=True)
    # a turn reserves ~$0.0011 (100 output tokens of gpt-5 at $10 / M): the first fits, the second,
    # with the first's cost, does not
    (capsem_home / "config.yaml").write_text("budgets:\n  run: {scope: session, limit_usd: 0.0012}\n")
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    ask = {"type": "response.create", "model": "gpt-5", "input": "hello", "max_output_tokens": 100}
    answered, refused = ws_conversation(proxy, [ask, {**ask, "input": "again"}], "scenario=text")
    assert answered[-1]["type"] == "response.completed"
    (error,) = refused
    assert error["type"] == "error" and error["status"] == 402 and error["error"]["code"] == "budget_exceeded"
    assert "capsem budget 'run' cannot cover this call" in error["error"]["message"]
    assert len(model_exchanges(emu)) == 1  # the second turn never reached the upstream
    assert proxy.stop() == 0
    db = capsem_home / "sessions" / session_of(proxy) / "session.db"
    calls = rows(db, "SELECT status_code, error_type FROM model_calls ORDER BY id")
    assert [c["status_code"] for c in calls] == [200, 402] and calls[1]["error_type"]
    (net,) = rows(db, "SELECT decision, matched_rule, status_code FROM net_events")
    assert net == {"decision": "denied", "matched_rule": "budget:run", "status_code": 101}
