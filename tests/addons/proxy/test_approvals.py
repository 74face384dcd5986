"""`ask` in-process (taddons/tflow, the recorder on a thread): a held flow waits for its answer
while other flows go on; the answer comes through the real loopback channel (as `capsem approve`
sends it), from an `--always` rule, or from the timeout; each is recorded in `approvals`.
Through a real mitmdump, the CLI, the view and real clients: tests/e2e/test_ask.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager

from mitmproxy import http
from mitmproxy.test import tflow, tutils

from addons.proxy.capture import Capsem
from addons.recorder.thread import RecorderThread
from capsem.approval_wire import call, read_channel
from tests.addons.proxy.conftest import Chain, finish, started
from tests.conftest import rows


@contextmanager
def asking(home, rules: str, timeout: float = 30) -> Iterator[Chain]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(f"policy:\n  ask_timeout_s: {timeout}\n  rules:\n" + rules)
    with started(Capsem(recorder=RecorderThread)) as addon:
        yield addon


def flow_to(host: str, path: bytes = b"/", **kw) -> http.HTTPFlow:
    return tflow.tflow(req=tutils.treq(host=host, port=443, path=path, **kw), resp=False)


def mcp_flow(tool: str, arguments: dict) -> http.HTTPFlow:
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    req = tutils.treq(host="127.0.0.1", port=9000, method=b"POST", path=b"/mcp", content=json.dumps(message).encode(),
                      headers=http.Headers(content_type="application/json"))  # fmt: skip
    return tflow.tflow(req=req, resp=False)


async def held(addon: Chain, flow: http.HTTPFlow, hook: str = "requestheaders") -> asyncio.Task:
    """Run the request hooks of `flow` as mitmproxy does; the task ends when its answer comes."""

    async def hooks() -> None:
        for name in ("requestheaders", "request"):
            result = getattr(addon, name)(flow)
            if result is not None:
                await result

    task = asyncio.ensure_future(hooks())
    for _ in range(50):  # until the flow waits (or has been decided at once)
        await asyncio.sleep(0)
        if addon.approvals.waiting or task.done():
            break
    return task


def respond(addon: Chain, flow: http.HTTPFlow) -> None:
    if flow.response is None:
        flow.response = tutils.tresp()
    addon.response(flow)


def channel_call(addon: Chain, request: dict) -> dict:
    channel = read_channel(addon.session.id, addon.session.db_path.parent)
    assert channel is not None
    return call(channel, request)


def approvals(addon: Chain, home) -> list[dict]:
    db = finish(addon, home)
    return rows(db, """SELECT a.approval_id, a.rule, a.decision, a.decided_by, a.reason, a.always, a.tool,
                              a.arguments, n.decision AS net_decision, n.matched_rule, n.status_code
                       FROM approvals a JOIN net_events n ON n.id = a.net_event_id ORDER BY a.id""")  # fmt: skip


def test_a_held_flow_waits_while_others_go_on_and_is_approved_through_the_channel(capsem_home):
    with asking(capsem_home, "    - {name: ask-x, action: ask, host: x.test}\n") as addon:

        async def scenario() -> tuple[str, list[dict]]:
            waiting = await held(addon, flow := flow_to("x.test", b"/upload"))
            assert not waiting.done()  # held
            other = flow_to("y.test")
            for name in ("requestheaders", "request"):  # another flow goes through meanwhile
                assert getattr(addon, name)(other) is None
            respond(addon, other)
            assert other.response.status_code == 200 and not waiting.done()
            listed = await asyncio.to_thread(channel_call, addon, {"op": "list"})
            (item,) = listed["waiting"]
            assert (item["rule"], item["host"], item["path"], item["method"]) == (
                "ask-x",
                "x.test",
                "/upload",
                "GET",
            )
            answer = await asyncio.to_thread(channel_call, addon, {"op": "decide", "id": item["id"],
                                                                   "decision": "approve", "by": "cli"})  # fmt: skip
            assert answer == {"ok": True}
            await waiting
            assert flow.response is None  # it goes upstream unchanged
            respond(addon, flow)
            again = await asyncio.to_thread(channel_call, addon, {"op": "decide", "id": item["id"],
                                                                  "decision": "deny", "by": "cli"})  # fmt: skip
            return item["id"], [again]

        approval_id, (again,) = asyncio.run(scenario())
        assert again["ok"] is False and "no request waits" in again["error"]
        assert approvals(addon, capsem_home) == [
            {"approval_id": approval_id, "rule": "ask-x", "decision": "approved", "decided_by": "cli", "reason": None,
             "always": 0, "tool": None, "arguments": None, "net_decision": "asked", "matched_rule": "ask-x",
             "status_code": 200},
        ]  # fmt: skip


def test_a_request_nobody_answers_is_denied_in_the_providers_shape(capsem_home):
    rules = "    - {name: slow-person, action: ask, host: api.anthropic.com}\n"
    with asking(capsem_home, rules, timeout=0.05) as addon:

        async def scenario() -> http.HTTPFlow:
            flow = flow_to("api.anthropic.com", b"/v1/messages", method=b"POST", content=b'{"model": "m"}')
            await (await held(addon, flow))
            return flow

        flow = asyncio.run(scenario())
        assert flow.response.status_code == 403 and flow.response.headers["x-capsem-policy"] == "slow-person"
        error = json.loads(flow.response.content)
        assert error["type"] == "error" and error["error"]["type"] == "permission_error"  # Anthropic's shape
        assert "'slow-person' asked a person: no one answered in time" in error["error"]["message"]
        respond(addon, flow)
        (row,) = approvals(addon, capsem_home)
        assert (row["decision"], row["decided_by"], row["net_decision"], row["status_code"]) == (
            "timed_out", "timeout", "asked", 403)  # fmt: skip


def test_always_turns_a_denial_into_a_rule_for_the_rest_of_the_session(capsem_home):
    rules = "    - {name: review-shell, action: ask, mcp_tool: 'run_*'}\n"
    with asking(capsem_home, rules) as addon:

        async def scenario() -> list[http.HTTPFlow]:
            first = mcp_flow("run_shell", {"command": "rm -rf /", "password": "hunter2-is-my-password"})
            waiting = await held(addon, first)
            (item,) = await asyncio.to_thread(lambda: channel_call(addon, {"op": "list"})["waiting"])
            assert item["tool"] == "run_shell" and "rm -rf /" in item["arguments"]
            assert "hunter2" not in item["arguments"]  # scrubbed with the one scrubber
            await asyncio.to_thread(channel_call, addon, {"op": "decide", "id": item["id"], "decision": "deny",
                                                          "by": "view", "reason": "not here", "always": True})  # fmt: skip
            await waiting
            second = mcp_flow("run_shell", {"command": "ls"})
            await (await held(addon, second))  # decided at once by the rule
            other_tool = mcp_flow("run_tests", {})
            still_asks = await held(addon, other_tool)
            assert not still_asks.done() and len(addon.approvals.waiting) == 1
            addon.approvals.stop()  # shutdown denies what waits
            await still_asks
            return [first, second, other_tool]

        flows = asyncio.run(scenario())
        for flow in flows:
            body = json.loads(flow.response.content)
            assert body["id"] == 7 and body["error"]["code"] == -32001  # a JSON-RPC error the client shows
            respond(addon, flow)
        assert "denied by view (not here)" in json.loads(flows[0].response.content)["error"]["message"]
        recorded = approvals(addon, capsem_home)
        assert [(r["tool"], r["decision"], r["decided_by"], r["always"]) for r in recorded] == [
            ("run_shell", "denied", "view", 1), ("run_shell", "denied", "rule", 0), ("run_tests", "denied", "shutdown", 0),
        ]  # fmt: skip
        assert "rm -rf /" in recorded[0]["arguments"] and "hunter2" not in recorded[0]["arguments"]
        assert {r["net_decision"] for r in recorded} == {"asked"}


def test_the_channel_refuses_a_wrong_token_and_anything_not_json(capsem_home):
    with asking(capsem_home, "    - {name: ask-x, action: ask, host: x.test}\n") as addon:

        async def scenario() -> tuple[dict, dict, bytes]:
            waiting = await held(addon, flow_to("x.test"))
            channel = read_channel(addon.session.id, addon.session.db_path.parent)
            assert (addon.session.db_path.parent / "approvals.json").stat().st_mode & 0o777 == 0o600
            forged = await asyncio.to_thread(call, type(channel)(channel.session_id, channel.port, "guess"),
                                             {"op": "decide", "id": "x", "decision": "approve", "by": "cli"})  # fmt: skip
            bad_by = await asyncio.to_thread(channel_call, addon, {"op": "decide", "id": "x", "decision": "approve",
                                                                   "by": "agent"})  # fmt: skip
            reader, writer = await asyncio.open_connection("127.0.0.1", channel.port)
            writer.write(b"POST /decide HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # a browser's request
            http_answer = await reader.readline()
            writer.close()
            assert not waiting.done()
            addon.approvals.stop()
            await waiting
            return forged, bad_by, http_answer

        forged, bad_by, http_answer = asyncio.run(scenario())
        assert forged == {"ok": False, "error": "wrong token"}
        assert bad_by["ok"] is False
        assert json.loads(http_answer) == {"ok": False, "error": "not a JSON request"}
        assert not (
            addon.session.db_path.parent / "approvals.json"
        ).exists()  # removed when the channel closes


def test_a_streamed_request_body_not_approved_is_killed_before_it_is_sent(capsem_home):
    """mitmproxy cannot answer a request whose body it streams (stream_large_bodies): held on its
    headers, then, unless approved, its connection is closed (`Capsem.requestheaders`)."""
    rules = "    - {name: ask-upload, action: ask, host: x.test}\n"
    with asking(capsem_home, rules) as addon:

        async def scenario() -> tuple[http.HTTPFlow, http.HTTPFlow]:
            refused, approved = flow_to("x.test", b"/big"), flow_to("x.test", b"/big")
            for flow in (refused, approved):
                flow.request.stream = True
            first = await held(addon, refused)
            (waiting,) = addon.approvals.waiting.values()
            assert addon.approvals.decide(waiting.id, False, "cli", "too big") is None
            await first
            second = await held(addon, approved)
            (waiting,) = addon.approvals.waiting.values()
            assert addon.approvals.decide(waiting.id, True, "cli") is None
            await second
            return refused, approved

        refused, approved = asyncio.run(scenario())
        assert refused.response is None and refused.error is not None and not refused.live  # killed
        assert approved.error is None and callable(approved.request.stream)  # its body goes up, tapped
        addon.error(refused)
        respond(addon, approved)
        db = finish(addon, capsem_home)
    nets = rows(db, "SELECT n.error, a.decision FROM net_events n JOIN approvals a ON a.net_event_id = n.id "
                    "ORDER BY n.id")  # fmt: skip
    assert nets == [
        {
            "error": "denied by capsem policy rule 'ask-upload' (denied by cli): connection closed",
            "decision": "denied",
        },
        {"error": None, "decision": "approved"},
    ]


def test_a_request_capsem_cannot_hold_is_denied_not_let_through(capsem_home):
    """The rule asked for a person's yes: when the channel cannot open (here a directory sits where
    its file goes), the request is refused and the failure recorded, as decided by `error`."""
    with asking(capsem_home, "    - {name: ask-x, action: ask, host: x.test}\n") as addon:
        (addon.session.db_path.parent / "approvals.tmp").mkdir()

        async def scenario() -> http.HTTPFlow:
            flow = flow_to("x.test")
            await (await held(addon, flow))
            return flow

        flow = asyncio.run(scenario())
        assert flow.response.status_code == 403 and not addon.approvals.waiting
        assert addon.approvals.hook_failures == 1
        respond(addon, flow)
        (row,) = approvals(addon, capsem_home)
    assert (row["decision"], row["decided_by"], row["net_decision"]) == ("denied", "error", "asked")
    assert row["reason"].startswith("capsem could not hold the request: IsADirectoryError")


def test_the_reason_an_agent_reads_is_scrubbed_like_every_stored_text(capsem_home):
    """A person's words (or an exception's text) go back to the agent and into `approvals`: a
    secret in them is redacted in both (issue 34)."""
    token = "ghp_" + "Rk4Tn7Wq2Zs9Xv5Bm8Lp3Hd6Fj1" + "Cy0Ga"
    with asking(capsem_home, "    - {name: ask-x, action: ask, host: api.anthropic.com}\n") as addon:

        async def scenario() -> http.HTTPFlow:
            flow = flow_to("api.anthropic.com", b"/v1/messages", method=b"POST", content=b'{"model": "m"}')
            waiting = await held(addon, flow)
            (item,) = addon.approvals.waiting.values()
            assert addon.approvals.decide(item.id, False, "cli", f"use the CI token {token} instead") is None
            await waiting
            return flow

        flow = asyncio.run(scenario())
        message = json.loads(flow.response.content)["error"]["message"]
        assert "denied by cli (use the CI token [redacted hash:" in message and token not in message
        respond(addon, flow)
        (row,) = approvals(addon, capsem_home)
    assert row["reason"].startswith("use the CI token [redacted hash:") and token not in row["reason"]
