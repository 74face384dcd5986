"""OpenTelemetry export end to end: sessions recorded through a real mitmdump (the anthropic SDK,
the emulator, a real MCP server) with live export to a real Arize Phoenix (installed from PyPI
into .tools/phoenix by `make test-backends`, run offline on SQLite), read back from Phoenix's REST
API: one span per call with its tokens, tool, MCP and subagent spans under the right parents,
nothing sent twice by a later backfill, no planted secret in any span; and with the backend down
for part of a run, the backfill delivers exactly what live export missed."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path

import anthropic
import httpx
import pytest
import yaml

from tests import backends
from tests.cli.conftest import run
from tests.conftest import only_session, rows
from tests.e2e.test_capture_sdk import ANTHROPIC_KEY, TOOLS_A, http_client
from tests.e2e.test_mcp import free_port, serve, session_calls

NEEDLE = "OTLPSECRET"
SECRET = f"sk-ant-api03-{NEEDLE}planted00000000000000"
TASK = {"name": "Task", "description": "Start a subagent",
        "input_schema": {"type": "object", "properties": {"description": {"type": "string"},
                                                          "prompt": {"type": "string"}},
                         "required": ["description", "prompt"]}}  # fmt: skip
MCP_TOOL = {"name": "mcp__files__read_note", "description": "Read a note (MCP)",
            "input_schema": {"type": "object", "properties": {"name": {"type": "string"}},
                             "required": ["name"]}}  # fmt: skip


@pytest.fixture(scope="module")
def phoenix() -> str:
    """The run's Phoenix server (started early by tests/conftest.py)."""
    if not backends.PHOENIX.exists():
        pytest.fail(f"Arize Phoenix is not installed at {backends.PHOENIX.parent.parent}: run `make test-backends`",
                    pytrace=False)  # fmt: skip
    return backends.phoenix().wait()


class Gate:
    """A loopback TCP relay in front of the backend that can be shut: while down, connections to
    its port are refused, as by a backend that is not running."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.port = free_port()
        self.server: socket.socket | None = None
        self.open: list[socket.socket] = []

    def up(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(16)
        self.server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def down(self) -> None:
        """Refuse new connections and cut the open ones (the exporter keeps its connection alive)."""
        if self.server is not None:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
            self.server.close()
            self.server = None
        for s in self.open:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.open.clear()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def claude(proxy, emu, control: str = "") -> anthropic.Anthropic:
    """The anthropic SDK through mitmdump to the emulator's plain HTTP port (mitmdump runs without
    an upstream proxy: the MCP server on loopback is reached directly)."""
    return anthropic.Anthropic(api_key=ANTHROPIC_KEY, base_url=emu.http_url, http_client=http_client(proxy),
                               max_retries=0, default_headers={"x-emulator": control} if control else {})  # fmt: skip


def configure(home: Path, endpoint: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    config = {"export": {"otlp": {"endpoint": endpoint, "content": True, "profile": "compat"}}}
    (home / "config.yaml").write_text(yaml.safe_dump(config))


def phoenix_spans(url: str, session_id: str, want: int | None = None) -> list[dict]:
    """The session's spans in Phoenix (ingestion is asynchronous: waits for `want` of them)."""
    deadline = time.monotonic() + 20
    while True:
        data, cursor = [], None
        while True:
            params = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
            page = httpx.get(f"{url}/v1/projects/default/spans", params=params, timeout=10).json()
            data += page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        mine = [s for s in data if s["attributes"].get("gen_ai.conversation.id") == session_id]
        if want is None or len(mine) >= want or time.monotonic() > deadline:
            return mine
        time.sleep(0.2)


def expected_spans(db: Path) -> int:
    """Spans a session makes: its calls, MCP calls, answered tool calls, and turns."""
    n = rows(db, "SELECT (SELECT COUNT(*) FROM model_calls) + (SELECT COUNT(*) FROM mcp_calls) + "
                 "(SELECT COUNT(*) FROM tool_calls WHERE status != 'observed') + "
                 "(SELECT COUNT(DISTINCT COALESCE(turn_id, trace_id, event_id)) FROM model_calls) AS n")  # fmt: skip
    return n[0]["n"]


def watermark(home: Path, session_id: str) -> dict:
    (mark,) = rows(home / "main.db", "SELECT * FROM otlp_exports WHERE session_id = ?", (session_id,))
    return mark


def record_agent_session(proxy, emu) -> None:
    """A main agent asks for three tools (a subagent's Task, an MCP tool, a native one), the
    subagent runs, the MCP tool runs on a real server, the results go back (one an error), then a
    call fails with 429. A planted key sits in a message and a tool result."""
    client = claude(proxy, emu, "tools=3")
    tools = [TASK, MCP_TOOL, TOOLS_A[0]]
    messages: list[dict] = [{"role": "user", "content": f"Refactor parse(); my key is {SECRET}"}]
    first = client.messages.create(model="claude-sonnet-4-5", max_tokens=512, tools=tools, messages=messages)
    uses = {b.name: b for b in first.content if b.type == "tool_use"}
    assert set(uses) == {"Task", "mcp__files__read_note", "read_file"}
    # the subagent: a new conversation whose first message is the Task's prompt
    sub = claude(proxy, emu).messages.create(model="claude-haiku-4-5", max_tokens=256, system="You are a subagent.",
                                        messages=[{"role": "user", "content": uses["Task"].input["prompt"]}])  # fmt: skip
    with serve(json_response=False) as (url, _):
        (note,) = asyncio.run(session_calls(url, proxy, [
            lambda s: s.call_tool("read_note", dict(uses["mcp__files__read_note"].input))]))  # fmt: skip
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": uses["Task"].id, "content": sub.content[0].text},
            {"type": "tool_result", "tool_use_id": uses["mcp__files__read_note"].id, "content": note.content[0].text},
            {"type": "tool_result", "tool_use_id": uses["read_file"].id, "is_error": True,
             "content": f"PGPASSWORD={NEEDLE}pg denied"}]},
    ]  # fmt: skip
    client.messages.create(model="claude-sonnet-4-5", max_tokens=512, tools=tools, messages=messages)
    with pytest.raises(anthropic.RateLimitError):
        claude(proxy, emu, "scenario=error; status=429").messages.create(
            model="claude-haiku-4-5", max_tokens=16, messages=[{"role": "user", "content": "again"}]
        )


def test_live_export_to_phoenix_then_backfill_sends_nothing_twice(phoenix, mitmdump, emu, capsem_home):
    configure(capsem_home, phoenix)
    proxy = mitmdump()
    record_agent_session(proxy, emu)
    assert proxy.stop() == 0, proxy.log()[-3000:]
    db = only_session(capsem_home)
    sid = db.parent.name
    want = expected_spans(db)
    spans = phoenix_spans(phoenix, sid, want)
    assert len(spans) == want
    assert watermark(capsem_home, sid)["spans"] == want and watermark(capsem_home, sid)["done"] == 1
    by_id = {s["context"]["span_id"]: s for s in spans}
    assert len(by_id) == want

    # one chat span per model call, with the call's tokens and cost
    calls = rows(db, "SELECT * FROM model_calls ORDER BY id")
    chats = {s["attributes"]["capsem.model_call.id"]: s for s in spans if s["name"].startswith("chat ")}
    assert sorted(chats) == [c["id"] for c in calls]
    for call in calls:
        span = chats[call["id"]]
        attributes = span["attributes"]
        assert span["span_kind"] == "LLM" and span["name"] == f"chat {call['model']}"
        assert attributes.get("gen_ai.usage.input_tokens") == call["input_tokens"]
        assert attributes.get("gen_ai.usage.output_tokens") == call["output_tokens"]
        assert (
            attributes["gen_ai.provider.name"] == "anthropic" and attributes["gen_ai.system"] == "anthropic"
        )
        assert attributes.get("llm.token_count.prompt") == call["input_tokens"]
        assert attributes["session.id"] == sid
    failed = chats[calls[-1]["id"]]
    assert failed["status_code"] == "ERROR" and failed["attributes"]["error.type"] == "rate_limit_error"
    assert chats[calls[0]["id"]]["attributes"]["gen_ai.usage.cost.total_usd"] == pytest.approx(
        calls[0]["estimated_cost_usd"]
    )

    # tools under the turn, the subagent under its Task, the MCP call under its model tool call
    tools = {s["attributes"]["gen_ai.tool.name"]: s for s in spans if s["name"].startswith("execute_tool ")}
    assert set(tools) == {"Task", "mcp__files__read_note", "read_file"}
    turn = by_id[chats[calls[0]["id"]]["parent_id"]]
    assert turn["name"] == "invoke_agent" and turn["parent_id"] is None
    assert {t["parent_id"] for t in tools.values()} == {turn["context"]["span_id"]}
    assert tools["read_file"]["status_code"] == "ERROR"
    assert tools["Task"]["attributes"]["capsem.span.inferred"] is True
    (sub_call,) = [c for c in calls if c["parent_tool_call_id"]]
    assert chats[sub_call["id"]]["parent_id"] == tools["Task"]["context"]["span_id"]
    (mcp_tool,) = [s for s in spans if s["name"] == "tools/call read_note"]
    assert mcp_tool["parent_id"] == tools["mcp__files__read_note"]["context"]["span_id"]
    assert mcp_tool["attributes"]["mcp.method.name"] == "tools/call"
    assert mcp_tool["attributes"]["jsonrpc.request.id"] and mcp_tool["attributes"]["mcp.protocol.version"]
    assert len({s["context"]["trace_id"] for s in spans if s["name"] != "invoke_agent"} - {
        t["context"]["trace_id"] for t in spans if t["name"] == "invoke_agent"}) == 0  # fmt: skip
    # content was on: the messages are there, the planted secrets are not
    assert "Refactor parse()" in chats[calls[0]["id"]]["attributes"]["gen_ai.input.messages"]
    assert NEEDLE not in json.dumps(spans)

    # a backfill finds nothing left to send; Phoenix holds each span once
    out = run("export", "otlp", "--endpoint", phoenix, sid)
    assert f"{sid}  up to date" in out and "0 spans sent" in out
    assert watermark(capsem_home, sid)["spans"] == want
    assert len(phoenix_spans(phoenix, sid)) == want


def test_backend_down_for_part_of_the_run_then_backfill_delivers_the_rest(
    phoenix, mitmdump, emu, capsem_home
):
    gate = Gate(int(phoenix.rsplit(":", 1)[1]))
    configure(capsem_home, f"http://127.0.0.1:{gate.port}")
    proxy = mitmdump()
    client = claude(proxy, emu, "tools=1")
    messages: list[dict] = [{"role": "user", "content": "Read the README"}]
    first = client.messages.create(
        model="claude-sonnet-4-5", max_tokens=256, tools=TOOLS_A, messages=messages
    )
    gate.up()  # the backend comes back: live export catches up
    (use,) = [b for b in first.content if b.type == "tool_use"]
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "hi"}]}]  # fmt: skip
    client.messages.create(model="claude-sonnet-4-5", max_tokens=256, tools=TOOLS_A, messages=messages)
    db = only_session(capsem_home)
    sid = db.parent.name
    deadline = time.monotonic() + 15
    while not rows(capsem_home / "main.db", "SELECT 1 FROM otlp_exports WHERE session_id = ? AND model_call_id = 2",
                   (sid,)):  # fmt: skip
        assert time.monotonic() < deadline, "live export did not catch up once the backend was back"
        time.sleep(0.1)
    gate.down()  # and goes away again: the last call and the turn are not delivered live
    claude(proxy, emu).messages.create(model="claude-haiku-4-5", max_tokens=16,
                                  messages=[{"role": "user", "content": "And a summary?"}])  # fmt: skip
    assert proxy.stop() == 0, proxy.log()[-3000:]
    assert "capsem export otlp" in proxy.log()  # the recorder said what is left to do
    want = expected_spans(db)
    mark = watermark(capsem_home, sid)
    assert mark["model_call_id"] == 2 and mark["done"] == 0 and 0 < mark["spans"] < want
    assert len(phoenix_spans(phoenix, sid, mark["spans"])) == mark["spans"]

    out = run("export", "otlp", "--endpoint", f"http://127.0.0.1:{gate.port}", "--timeout", "0.5", code=1)
    assert f"{sid}  failed" in out and "could not be sent" in out
    gate.up()
    out = run("export", "otlp", "--endpoint", f"http://127.0.0.1:{gate.port}", "--since", "today")
    assert f"{sid}  sent  {want - mark['spans']} spans" in out
    spans = phoenix_spans(phoenix, sid, want)
    assert len(spans) == len({s["context"]["span_id"] for s in spans}) == want
    assert watermark(capsem_home, sid)["spans"] == want and watermark(capsem_home, sid)["done"] == 1
    assert "0 spans sent" in run("export", "otlp", "--endpoint", f"http://127.0.0.1:{gate.port}")
    gate.down()
