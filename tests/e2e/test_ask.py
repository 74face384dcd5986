"""`ask` through a real mitmdump (two starts in all): an HTTP client (the anthropic SDK, to the
emulator) and an MCP client (the `mcp` SDK, to a FastMCP server) are held by `ask` rules while
other flows go through; one is approved with `capsem approve`, the other denied by clicking Deny
in the banner of `capsem view` in real headless Chromium (driven over the DevTools protocol); with
a short `ask_timeout_s` both time out and get errors naming the rule. The recorded decisions are
read back from session.db and `inspect-session`. In-process: tests/addons/proxy/test_approvals.py."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

from assembler.view.app import Urls, View
from tests.bundle.conftest import devtools
from tests.cli.conftest import run
from tests.conftest import ARTIFACTS, only_session, rows
from tests.e2e.test_mcp import proxied, serve

HI = [{"role": "user", "content": "hi"}]
SHOTS = ARTIFACTS / "ask"


def configure(home: Path, timeout: float) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"policy:\n  ask_timeout_s: {timeout}\n  rules:\n"
        "    - {name: ask-claude, action: ask, host: 127.0.0.1, path: /v1/messages}\n"
        "    - {name: review-notes, action: ask, mcp_tool: read_note}\n"
    )


def claude(proxy, emu) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-ant-x", base_url=emu.http_url, max_retries=0,
                               http_client=httpx.Client(proxy=proxy.url, timeout=60))  # fmt: skip


def gpt(proxy, emu) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-x", base_url=f"{emu.http_url}/v1", max_retries=0,
                         http_client=httpx.Client(proxy=proxy.url, timeout=60))  # fmt: skip


async def mcp_call(url: str, proxy, tool: str, arguments: dict) -> Any:
    """The tool's result, or the McpError the call raised (the session itself goes on)."""
    async with (
        proxied(proxy) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        try:
            return await session.call_tool(tool, arguments)
        except McpError as exc:
            return exc


class Background:
    """`work` on a thread: its result (or exception) once it ends."""

    def __init__(self, work: Callable[[], Any]) -> None:
        self.result: Any = None
        self.thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self.thread.start()

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            self.result = work()
        except Exception as exc:
            self.result = exc

    def join(self) -> Any:
        self.thread.join(90)
        assert not self.thread.is_alive(), "the held request never got an answer"
        return self.result


def waiting(count: int, deadline_s: float = 60) -> list[dict]:
    """`capsem approvals --json` once it lists `count` requests."""
    end = time.monotonic() + deadline_s
    while True:
        listed = json.loads(run("approvals", "--json"))["waiting"]
        if len(listed) >= count or time.monotonic() > end:
            return listed
        time.sleep(0.1)


def test_approve_from_the_cli_and_deny_from_the_view_while_other_flows_go_on(
    mitmdump, emu, capsem_home, tmp_path
):
    configure(capsem_home, timeout=120)
    proxy = mitmdump()
    with serve(json_response=True) as (url, recording):
        held_http = Background(lambda: claude(proxy, emu).messages.create(model="claude-haiku-4-5", max_tokens=20,
                                                                          messages=HI))  # fmt: skip
        (item,) = waiting(1)
        assert (item["rule"], item["target"]) == ("ask-claude", f"POST {emu.http_url[7:]}/v1/messages")
        # other flows keep moving while it waits: a model call and an MCP call the rules do not hold
        other = gpt(proxy, emu).chat.completions.create(model="gpt-4o-mini", messages=HI)
        listed = asyncio.run(mcp_call(url, proxy, "flaky", {"reason": "x"}))
        assert other.choices[0].message.content and listed.isError is True
        assert held_http.thread.is_alive() and [e["path"] for e in emu.exchanges()] == [
            "/v1/chat/completions"
        ]
        shown = run("approvals")
        assert item["id"] in shown and "rule ask-claude" in shown and "/v1/messages" in shown
        assert all(len(line) <= 80 for line in shown.splitlines()), shown
        print(shown)  # looked at: tests/e2e/test_ask.py -s
        assert f"approved {item['id']}" in run("approve", item["id"])
        answer = held_http.join()
        assert isinstance(answer, anthropic.types.Message), answer  # went upstream unchanged
        assert [e["path"] for e in emu.exchanges()][-1] == "/v1/messages"

        def ask_claude() -> Any:
            return claude(proxy, emu).messages.create(model="claude-haiku-4-5", max_tokens=20, messages=HI)

        held_again = Background(ask_claude)
        (item,) = waiting(1)
        said = run("deny", item["id"], "--reason", "enough for today", "--always")
        assert f"denied {item['id']}" in said and "for the rest of the session" in said
        refused = held_again.join()
        assert isinstance(refused, anthropic.PermissionDeniedError) and "enough for today" in refused.message
        with_rule = Background(ask_claude).join()  # the --always answer decides at once: nothing waits
        assert (
            isinstance(with_rule, anthropic.PermissionDeniedError) and "denied by rule" in with_rule.message
        )
        assert [e["path"] for e in emu.exchanges()].count("/v1/messages") == 1

        held_mcp = Background(lambda: asyncio.run(mcp_call(url, proxy, "read_note", {"name": "groceries"})))
        (item,) = waiting(1)
        assert item["target"].endswith("› read_note") and item["arguments"] == {"name": "groceries"}
        with view_server(capsem_home) as base:
            clicked = deny_in_chromium(base, item["id"], tmp_path / "chromium")
        denied = held_mcp.join()
        assert isinstance(denied, McpError) and "'review-notes' asked a person: denied by view" in str(denied)
        assert "(not today)" in str(denied) and item["id"] not in clicked
    tools = [json.loads(e["request"]).get("params", {}).get("name") for e in recording.exchanges
             if e["method"] == "POST" and b"tools/call" in e["request"]]  # fmt: skip
    assert tools == ["flaky"]  # the denied call never reached the server
    assert proxy.stop() == 0
    db = only_session(capsem_home)
    recorded = rows(db, "SELECT a.rule, a.decision, a.decided_by, a.reason, a.tool, a.arguments, "
                        "n.decision AS net, n.status_code "
                        "FROM approvals a JOIN net_events n ON n.id = a.net_event_id ORDER BY a.id")  # fmt: skip
    assert recorded == [
        {"rule": "ask-claude", "decision": "approved", "decided_by": "cli", "reason": None, "tool": None,
         "arguments": None, "net": "asked", "status_code": 200},
        {"rule": "ask-claude", "decision": "denied", "decided_by": "cli", "reason": "enough for today", "tool": None,
         "arguments": None, "net": "asked", "status_code": 403},
        {"rule": "ask-claude", "decision": "denied", "decided_by": "rule", "reason": "enough for today", "tool": None,
         "arguments": None, "net": "asked", "status_code": 403},
        {"rule": "review-notes", "decision": "denied", "decided_by": "view", "reason": "not today", "tool": "read_note",
         "arguments": '{"name": "groceries"}', "net": "asked", "status_code": 200},
    ]  # fmt: skip
    (mcp_row,) = rows(db, "SELECT decision, matched_rule FROM mcp_calls WHERE tool_name = 'read_note'")
    assert mcp_row == {"decision": "asked", "matched_rule": "review-notes"}
    inspected = run("inspect-session", db.parent.name)
    assert "approved by cli" in inspected and "denied by view" in inspected, inspected
    page = View().session_page(Urls(), db.parent.name)  # the session page of `capsem view`
    assert "held for approval: approved by cli after" in page
    assert re.search(r"held for approval: denied by view after [\d.]+ s \(not today\)", page), page


def test_a_request_nobody_answers_times_out_with_an_error_naming_the_rule(mitmdump, emu, capsem_home):
    configure(capsem_home, timeout=0.3)
    proxy = mitmdump()
    with serve(json_response=True) as (url, _recording):
        try:
            claude(proxy, emu).messages.create(model="claude-haiku-4-5", max_tokens=20, messages=HI)
            raise AssertionError("the held call was answered")
        except anthropic.PermissionDeniedError as exc:
            assert exc.response.headers["x-capsem-policy"] == "ask-claude"
            assert "'ask-claude' asked a person: no one answered in time" in exc.message
        timed_out = asyncio.run(mcp_call(url, proxy, "read_note", {"name": "x"}))
        assert isinstance(timed_out, McpError) and "no one answered in time" in str(timed_out)
    assert emu.exchanges() == []
    assert proxy.stop() == 0
    recorded = rows(only_session(capsem_home), "SELECT rule, decision, decided_by FROM approvals ORDER BY id")
    assert recorded == [
        {"rule": "ask-claude", "decision": "timed_out", "decided_by": "timeout"},
        {"rule": "review-notes", "decision": "timed_out", "decided_by": "timeout"},
    ]


@contextmanager
def view_server(home: Path) -> Iterator[str]:
    server = subprocess.Popen([sys.executable, "-m", "assembler", "view", "--no-open", "--port", "0"],
                              env={**os.environ, "CAPSEM_HOME": str(home)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        line = server.stdout.readline()  # type: ignore[union-attr]
        match = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert match, line
        yield match.group(0)
    finally:
        server.terminate()
        server.wait(10)


def deny_in_chromium(base: str, approval_id: str, profile: Path) -> str:
    """Open the sessions page, wait for the banner to list `approval_id`, type a reason, screenshot
    the banner, and click its Deny button with real mouse events. Returns the banner's text after."""
    with devtools(profile, "--window-size=1280,800") as page:

        def call(method: str, **params) -> dict:
            return page.call(method, **params).get("result", {})

        def js(expression: str) -> Any:
            return call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

        call("Page.navigate", url=f"{base}/")
        row = f'#approvals [data-id="{approval_id}"]'
        end = time.monotonic() + 60
        while not js(f"!!document.querySelector('{row} button.deny')"):
            assert time.monotonic() < end, js("document.body.innerText")
            time.sleep(0.1)
        js(f"document.querySelector('{row} input[type=text]').value = 'not today'")
        SHOTS.mkdir(parents=True, exist_ok=True)
        shot = call("Page.captureScreenshot", format="png")
        (SHOTS / "banner.png").write_bytes(base64.b64decode(shot["data"]))
        call("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=1, mobile=True)
        shot = call("Page.captureScreenshot", format="png")
        (SHOTS / "banner-phone.png").write_bytes(base64.b64decode(shot["data"]))
        call("Emulation.clearDeviceMetricsOverride")
        box = js(f"JSON.stringify(document.querySelector('{row} button.deny').getBoundingClientRect())")
        rect = json.loads(box)
        x, y = rect["x"] + rect["width"] / 2, rect["y"] + rect["height"] / 2
        for kind in ("mousePressed", "mouseReleased"):
            call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
        end = time.monotonic() + 30
        while js(f"!!document.querySelector('{row}')"):  # the banner drops it once answered
            assert time.monotonic() < end, js("document.getElementById('approvals').innerText")
            time.sleep(0.1)
        return js("document.getElementById('approvals').innerText") or ""


ASKING_AGENT = """
import anthropic
# the proxy and CA come from capsem run's environment; the ask rule holds this call
client = anthropic.Anthropic(api_key="sk-ant-capsem-x", max_retries=0, timeout=60)
msg = client.messages.create(model="claude-haiku-4-5", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
print("answered:", msg.stop_reason)
"""


def test_capsem_run_tells_the_terminal_what_waits_and_the_wait_is_not_ttft(capsem_home, tmp_path):
    """Issue 35, point 9: one line in the agent's terminal names the held request and the commands
    that answer it; the approved call's time to first token counts from its release."""
    capsem_home.mkdir(parents=True, exist_ok=True)
    (capsem_home / "config.yaml").write_text(
        "policy:\n  ask_timeout_s: 120\n  rules:\n"
        "    - {name: ask-claude, action: ask, host: api.anthropic.com, path: /v1/messages}\n"
    )
    (tmp_path / "agent.py").write_text(ASKING_AGENT)
    capsem = [sys.executable, "-m", "assembler"]
    proc = subprocess.Popen([*capsem, "run", "--emulator", "--workspace", str(tmp_path), "--", sys.executable,
                             str(tmp_path / "agent.py")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "COLUMNS": "160"})  # fmt: skip
    said: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if "holds POST api.anthropic.com/v1/messages" in line:
                break
        (line,) = [x for x in said if "holds" in x]
        match = re.search(r"capsem: rule 'ask-claude' holds POST api\.anthropic\.com/v1/messages for a person: "
                          r"(\S.*) approve (\w+)  or  (\S.*) deny (\w+)$", line.strip())  # fmt: skip
        assert match and match[2] == match[4], line
        approve = subprocess.run(f"{match[1]} approve {match[2]}", shell=True, capture_output=True, text=True)
        assert approve.returncode == 0 and f"approved {match[2]}" in approve.stdout, approve.stderr
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill() if proc.poll() is None else None
    assert proc.returncode == 0 and "answered: end_turn" in out, "".join(said) + err
    db = only_session(capsem_home)
    (held,) = rows(db, "SELECT asked_at, decided_at FROM approvals")
    (call,) = rows(db, "SELECT ttft_ms, duration_ms, timestamp FROM model_calls")
    from datetime import datetime

    wait_ms = (
        datetime.fromisoformat(held["decided_at"]) - datetime.fromisoformat(held["asked_at"])
    ).total_seconds()
    assert call["ttft_ms"] is not None and call["ttft_ms"] + wait_ms * 1000 <= call["duration_ms"] + 2, (
        call,
        held,
    )
