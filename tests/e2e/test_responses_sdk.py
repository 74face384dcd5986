"""End to end for the OpenAI Responses API: the real openai SDK (HTTP) and a real WebSocket
client → real mitmdump with capsem (upstream mode) → the emulator; every recorded column is
compared with what the emulator logged that it sent. The HTTP tests share one mitmdump
(tests/shared_proxy.py), each reading its own scenario's rows.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl

import openai
import pytest
from click.testing import CliRunner

from assembler.cli import cli
from tests.conftest import only_session, rows
from tests.e2e.test_capture_sdk import (
    assert_call_matches,
    assert_tool_calls,
    finish,
    gpt,
    model_exchanges,
)
from tests.shared_proxy import SharedProxy

TOOLS_R = [
    {"type": "function", "name": "read_file", "description": "Read a file", "strict": False,
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"type": "function", "name": "search", "description": "Search", "strict": False,
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["query", "limit"]}},
]  # fmt: skip


@pytest.fixture
def proxy(mitmdump, emu):
    return mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)


@pytest.fixture(scope="module")
def shared(emulator, tmp_path_factory) -> SharedProxy:
    """The HTTP tests' traffic through one mitmdump, then stopped (the WebSocket tests keep their own)."""
    shared = SharedProxy(emulator, tmp_path_factory.mktemp("responses"))
    try:
        for stream in (False, True):
            shared.run(f"loop {stream}", lambda p, s=stream: tool_loop_traffic(p, s))
        for scenario in ("midstream_error", "failed", "incomplete"):
            shared.run(scenario, lambda p, s=scenario: stream_failure_traffic(p, s))
        shared.run("http error", http_error_traffic)
    finally:
        shared.stop()
    return shared


def ask(client, stream: bool, items: list, **kw):
    """One Responses call; returns the final response object (as the SDK parsed it)."""
    args = {"model": "gpt-5", "instructions": "Be terse.", "input": items, "tools": TOOLS_R, **kw}
    if not stream:
        return client.responses.create(**args)
    final = None
    for event in client.responses.create(stream=True, **args):
        if event.type == "response.completed":
            final = event.response
    assert final is not None
    return final


def assert_rows(db, exchanges, calls) -> None:
    assert len(calls) == len(exchanges)
    for call, ex in zip(calls, exchanges, strict=True):
        assert (call["provider"], call["protocol"], call["host"], call["path"]) == (
            "openai",
            "openai_responses",
            "api.openai.com",
            "/v1/responses",
        )
        assert call["system_prompt_preview"] == "Be terse."
        assert call["tools_count"] == 2
        assert_call_matches(call, ex)
        assert_tool_calls(db, call["id"], ex)
        details = json.loads(call["usage_details"])
        assert details["cache_read"] == ex["expected"]["cache_read"] == 64
        assert details["reasoning"] == ex["expected"]["reasoning"] == 32


def tool_loop_traffic(proxy, stream: bool):
    """Three turns; (the first and second responses, the function calls of the first, the items sent last)."""
    client = gpt(proxy, "tools=2; cache_read=64; reasoning=32; scenario=thinking" if stream else
                 "tools=2; cache_read=64; reasoning=32; encoding=gzip")  # fmt: skip
    items: list = [{"role": "user", "content": "Find the README and search for ünïcode 🎉"}]
    first = ask(client, stream, items, reasoning={"summary": "auto"})
    calls_out = [o for o in first.output if o.type == "function_call"]
    assert len(calls_out) == 2
    items += [o.model_dump(exclude_none=True) for o in first.output]
    items += [
        {"type": "function_call_output", "call_id": c.call_id, "output": f"result {i} ✓"}
        for i, c in enumerate(calls_out)
    ]
    second = ask(client, stream, items)
    assert second.output_text
    # a third turn resends the whole history: its tool results must not be recorded again
    items += [o.model_dump(exclude_none=True) for o in second.output]
    items.append({"role": "user", "content": "thanks"})
    ask(client, stream, items)
    return first, second, calls_out, items


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tool_loop_three_turns(shared, stream):
    db, s, exchanges = shared.exchanges(f"loop {stream}")
    first, second, calls_out, items = s.result
    calls = rows(db, f"SELECT * FROM model_calls WHERE net_event_id IN ({s.ids()}) ORDER BY id")
    assert_rows(db, exchanges, calls)
    assert [c["messages_count"] for c in calls] == [1, len(items) - 1 - len(second.output), len(items)]
    assert calls[0]["stop_reason"] == "completed" and calls[0]["message_id"] == first.id
    if stream:
        assert (
            calls[0]["thinking_content"]
            == "**Weighing the question**\n\n" + exchanges[0]["expected"]["thinking"].split("\n\n", 1)[1]
        )
    else:
        assert calls[0]["thinking_content"] == "**Planning the answer**"
    assert calls[0]["trace_id"] == calls[1]["trace_id"] != calls[2]["trace_id"]
    ids = ",".join(str(c["id"]) for c in calls)
    responses = rows(db, "SELECT model_call_id, call_id, content_preview, tool_name, trace_id, is_error "
                         f"FROM tool_responses WHERE model_call_id IN ({ids}) ORDER BY id")  # fmt: skip
    assert responses == [
        {"model_call_id": calls[1]["id"], "call_id": c.call_id, "content_preview": f"result {i} ✓",
         "tool_name": c.name, "trace_id": calls[0]["trace_id"], "is_error": 0}
        for i, c in enumerate(calls_out)
    ]  # fmt: skip
    tool_rows = rows(db, f"SELECT call_id, tool_name, trace_id FROM tool_calls WHERE model_call_id IN ({ids}) "
                         "ORDER BY id")  # fmt: skip
    assert tool_rows == [{"call_id": c.call_id, "tool_name": c.name, "trace_id": calls[0]["trace_id"]}
                         for c in calls_out]  # fmt: skip
    assert all(c["estimated_cost_usd"] is None or c["estimated_cost_usd"] > 0 for c in calls)
    net = rows(db, "SELECT conn_type, status_code, streamed FROM net_events WHERE path = '/v1/responses' "
                   f"AND id IN ({s.ids()})")  # fmt: skip
    assert net == [{"conn_type": "https", "status_code": 200, "streamed": int(stream)}] * 3


def stream_failure_traffic(proxy, scenario: str) -> None:
    client = gpt(proxy, f"scenario={scenario}; text=Hello there, this is a longer answer to cut.")
    got = []
    try:
        for event in client.responses.create(model="gpt-5", input="hi", stream=True):
            got.append(event.type)
    except Exception:  # the SDK raises on `event: error`
        pass


@pytest.mark.parametrize("scenario_name", ["midstream_error", "failed", "incomplete"])
def test_responses_stream_failures(shared, scenario_name):
    db, s, (ex,) = shared.exchanges(scenario_name)
    (call,) = rows(db, f"SELECT * FROM model_calls WHERE net_event_id IN ({s.ids()})")
    exp = ex["expected"]
    assert (call["text_content"] or "") == exp["text"]
    assert call["stop_reason"] == exp["stop_reason"]
    assert call["error_type"] == exp["error_type"]
    assert call["complete"] == int(ex["complete"]) == int(scenario_name == "incomplete")
    if scenario_name == "incomplete":
        assert call["stop_reason"] == "incomplete:max_output_tokens"
        assert_call_matches(call, ex)


def http_error_traffic(proxy) -> None:
    client = gpt(proxy, "scenario=error; status=429")
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="gpt-5", input="hi")


def test_responses_http_error(shared):
    db, s, _ = shared.exchanges("http error")
    (call,) = rows(
        db, f"SELECT status_code, error_type, protocol FROM model_calls WHERE net_event_id IN ({s.ids()})"
    )
    assert call == {"status_code": 429, "error_type": "requests", "protocol": "openai_responses"}


# -- WebSocket (Codex CLI speaks Responses over a WebSocket on the same path) ----------------------


def ws_conversation(
    proxy, turns: list[dict], control: str, before_close=None, raw: bool = False
) -> list[list]:
    """Connect through the proxy (CONNECT tunnel) to wss://api.openai.com/v1/responses and run turns
    (each turn's events parsed, or as the text received with `raw`)."""
    import websockets
    from websockets.asyncio.client import connect

    async def run() -> list[list]:
        host, port = proxy.url.rsplit("//", 1)[1].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n")
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert b" 200 " in head.split(b"\r\n")[0], head
        sock = writer.get_extra_info("socket").dup()
        writer.transport.pause_reading()
        ctx = ssl.create_default_context(cafile=proxy.ca_cert)
        out: list[list] = []
        async with connect(
            "wss://api.openai.com/v1/responses",
            sock=sock,
            ssl=ctx,
            server_hostname="api.openai.com",
            additional_headers={
                "authorization": "Bearer sk-proj-e2eSECRETopenaiKEY0000",
                "x-emulator": control,
            },
        ) as ws:
            if before_close is not None:
                ws.close_timeout = 1
            for t in turns:
                await ws.send(json.dumps(t))
                events = []
                while True:
                    text = await ws.recv()
                    ev = json.loads(text)
                    events.append(text if raw else ev)
                    if ev["type"] in (
                        "response.completed",
                        "response.incomplete",
                        "response.failed",
                        "error",
                    ):
                        break
                out.append(events)
            if before_close is not None:
                await asyncio.to_thread(before_close)  # e.g. stop mitmdump with the socket still open
        writer.close()
        assert websockets
        return out

    return asyncio.run(run())


def test_websocket_two_turns(proxy, emu, capsem_home):
    first_req = {"type": "response.create", "model": "gpt-5", "instructions": "Be terse.",
                 "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}],
                 "tools": TOOLS_R, "store": False, "stream": True}  # fmt: skip
    (events1,) = ws_conversation(proxy, [first_req], "tools=2; cache_read=64; reasoning=32")
    done = events1[-1]["response"]
    fcs = [o for o in done["output"] if o["type"] == "function_call"]
    second_req = {
        **first_req,
        "input": first_req["input"]
        + done["output"]
        + [
            {"type": "function_call_output", "call_id": c["call_id"], "output": f"out {i}"}
            for i, c in enumerate(fcs)
        ],
    }
    # the second turn goes over a second connection; the Realtime-style envelope is accepted too
    (events2,) = ws_conversation(proxy, [{"type": "response.create", "response": {
        k: v for k, v in second_req.items() if k != "type"}}], "tools=2; cache_read=64; reasoning=32")  # fmt: skip
    assert events2[-1]["type"] == "response.completed"

    db = finish(proxy, capsem_home)
    exchanges = model_exchanges(emu)
    calls = rows(db, "SELECT * FROM model_calls ORDER BY id")
    assert len(calls) == 2 == len(exchanges)
    for call, ex in zip(calls, exchanges, strict=True):
        exp = ex["expected"]
        assert (call["provider"], call["protocol"], call["host"], call["path"]) == (
            "openai", "openai_responses", "api.openai.com", "/v1/responses")  # fmt: skip
        assert call["model"] == exp["model"] and call["message_id"] == exp["message_id"]
        assert (call["text_content"] or "") == exp["text"]
        assert call["input_tokens"] == exp["input_tokens"] and call["output_tokens"] == exp["output_tokens"]
        assert json.loads(call["usage_details"])["raw"] == exp["usage_raw"]
        assert call["stop_reason"] == "completed" and call["complete"] == 1 and call["stream"] == 1
        assert call["system_prompt_preview"] == "Be terse." and call["tools_count"] == 2
        assert call["ttft_ms"] is not None and call["net_event_id"] is not None
        assert_tool_calls(db, call["id"], ex)
        for direction, logged in (
            ("request", "request_body_decoded_b64"),
            ("response", "response_body_decoded_b64"),
        ):
            shown = CliRunner().invoke(cli, ["show-call", str(call["id"]), f"--{direction}", "--raw"])
            assert shown.stdout_bytes == base64.b64decode(ex[logged]), (
                direction
            )  # the messages as they crossed
    assert calls[0]["trace_id"] == calls[1]["trace_id"]
    assert (calls[0]["items_count"], calls[1]["items_new"]) == (1 + 2 + 1, len(done["output"]) + len(fcs))
    responses = rows(
        db, "SELECT model_call_id, call_id, content_preview, tool_name FROM tool_responses ORDER BY id"
    )
    assert responses == [{"model_call_id": calls[1]["id"], "call_id": c["call_id"], "content_preview": f"out {i}",
                          "tool_name": c["name"]} for i, c in enumerate(fcs)]  # fmt: skip
    first_tools = rows(db, "SELECT transport, status, duration_ms FROM tool_calls WHERE model_call_id = ?",
                       (calls[0]["id"],))  # fmt: skip
    assert len(first_tools) == len(fcs) and all(t["transport"] == "websocket" and t["status"] == "responded"
                                                and t["duration_ms"] >= 0 for t in first_tools)  # fmt: skip
    net = rows(db, "SELECT id, conn_type, status_code, path, method FROM net_events ORDER BY id")
    assert [(n["conn_type"], n["status_code"], n["path"], n["method"]) for n in net] == [
        ("wss", 101, "/v1/responses", "GET")] * 2  # fmt: skip
    assert [c["net_event_id"] for c in calls] == [n["id"] for n in net]


def test_websocket_two_turns_one_connection(proxy, emu, capsem_home):
    req = {"type": "response.create", "model": "gpt-5", "input": "hello", "tools": TOOLS_R}
    follow = {
        "type": "response.create",
        "model": "gpt-5",
        "input": "again please",
        "previous_response_id": "x",
    }
    ev1, ev2 = ws_conversation(proxy, [req, follow], "scenario=text")
    db = finish(proxy, capsem_home)
    exchanges = model_exchanges(emu)
    calls = rows(db, "SELECT * FROM model_calls ORDER BY id")
    assert len(calls) == 2 == len(exchanges)
    for call, ex, events in zip(calls, exchanges, (ev1, ev2), strict=True):
        assert call["text_content"] == ex["expected"]["text"] and call["text_content"]
        assert call["message_id"] == events[0]["response"]["id"]
        assert call["input_tokens"] == ex["expected"]["input_tokens"]
    assert calls[0]["tools_count"] == 2 and calls[1]["tools_count"] == 0
    (net,) = rows(db, "SELECT id, conn_type FROM net_events")
    assert net["conn_type"] == "wss" and {c["net_event_id"] for c in calls} == {net["id"]}


def test_websocket_still_open_at_shutdown_is_recorded(proxy, emu, capsem_home):
    req = {"type": "response.create", "model": "gpt-5", "input": "hello"}
    (events,) = ws_conversation(proxy, [req], "scenario=text", before_close=proxy.stop)
    db = only_session(capsem_home)
    (call,) = rows(db, "SELECT * FROM model_calls")
    assert call["message_id"] == events[0]["response"]["id"] and call["complete"] == 1
    (net,) = rows(db, "SELECT id, conn_type, status_code FROM net_events")
    assert (net["conn_type"], net["status_code"]) == ("wss", 101) and call["net_event_id"] == net["id"]


PROBE = """
import json

class Probe:
    \"\"\"Loaded after capsem: how many messages each WebSocket flow holds when its hooks run.\"\"\"

    def __init__(self):
        self.seen, self.most = {}, {}

    def websocket_message(self, flow):
        self.seen[flow.id] = self.seen.get(flow.id, 0) + 1
        self.most[flow.id] = max(self.most.get(flow.id, 0), len(flow.websocket.messages))

    def websocket_end(self, flow):
        with open(OUT, "a") as out:
            out.write(json.dumps({"seen": self.seen.get(flow.id, 0), "most": self.most.get(flow.id, 0),
                                  "at_end": len(flow.websocket.messages)}) + "\\n")

addons = [Probe()]
"""


def test_a_long_socket_holds_one_message_and_the_client_gets_every_byte(mitmdump, emu, capsem_home, tmp_path):
    """mitmproxy keeps every WebSocket message until the flow ends (its issue #6620); capsem lets
    each go once it has its copy. A script after capsem sees at most one message on the flow, and
    the client receives every message the emulator sent, byte for byte."""
    out = tmp_path / "probe.jsonl"
    probe = tmp_path / "probe.py"
    probe.write_text(f"OUT = {str(out)!r}\n" + PROBE)
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path, args=["-s", str(probe)])
    turns = [{"type": "response.create", "model": "gpt-5", "input": f"turn {n}"} for n in range(40)]
    received = ws_conversation(proxy, turns, "scenario=text", raw=True)
    db = finish(proxy, capsem_home)
    exchanges = model_exchanges(emu)
    assert len(exchanges) == len(received) == 40
    for texts, ex in zip(received, exchanges, strict=True):
        assert "\n".join(texts).encode() == base64.b64decode(ex["response_body_decoded_b64"])
    (socket,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert socket["seen"] == 40 + sum(map(len, received))  # every message, each way, went by
    assert socket["most"] == 1 and socket["at_end"] <= 1
    assert len(rows(db, "SELECT id FROM model_calls WHERE complete = 1")) == 40
