"""Session lifecycle through a real mitmdump: running → stopped, crash recovery, commits."""

from __future__ import annotations

import gzip
import json
import sqlite3
import time

import pytest
import zstandard
from click.testing import CliRunner

from assembler.cli import cli
from tests.conftest import only_session, rows
from tests.e2e.test_capture_sdk import ANTHROPIC_KEY, http_client
from tests.shared_proxy import SharedProxy, assert_clean_log

MESSAGES = "https://api.anthropic.com/v1/messages"


def post(proxy, body: dict, headers: dict | None = None, content: bytes | None = None):
    with http_client(proxy) as client:
        if content is not None:
            return client.post(
                MESSAGES, content=content, headers={"content-type": "application/json", **(headers or {})}
            )
        return client.post(MESSAGES, json=body, headers={"x-api-key": ANTHROPIC_KEY, **(headers or {})})


def wait_for_rows(db, sql: str, n: int, timeout: float = 10.0) -> list[dict]:
    """Poll a live session.db (as a concurrent reader) until `sql` returns n rows."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = rows(db, sql)
        except sqlite3.OperationalError:
            got = []
        if len(got) >= n or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def main_rows(home) -> list[dict]:
    return rows(home / "main.db", "SELECT * FROM sessions ORDER BY created_at")


SIMPLE = {"model": "claude-haiku-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}


def test_running_then_stopped_with_rows_visible_while_running(mitmdump, emu, capsem_home):
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    assert [r["status"] for r in main_rows(capsem_home)] == ["running"]
    post(proxy, SIMPLE)
    db = only_session(capsem_home)
    # rows are committed shortly after the flow ends, while mitmdump keeps running
    assert len(wait_for_rows(db, "SELECT id FROM model_calls", 1)) == 1
    assert proxy.stop() == 0
    assert_clean_log(proxy.log())
    (session,) = main_rows(capsem_home)
    assert session["status"] == "stopped" and session["stopped_at"] and session["total_model_calls"] == 1
    assert session["total_requests"] == 1 and session["total_input_tokens"] > 0
    assert not db.with_name("session.db-wal").exists() or db.with_name("session.db-wal").stat().st_size == 0
    usage = rows(capsem_home / "main.db", "SELECT * FROM ai_usage")
    assert [(u["provider"], u["model"], u["call_count"]) for u in usage] == [
        ("anthropic", "claude-haiku-4-5", 1)
    ]


def test_kill_9_is_recovered_as_crashed_at_next_start(mitmdump, emu, capsem_home):
    first = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    post(first, SIMPLE)
    post(first, SIMPLE)
    db = only_session(capsem_home)
    assert len(wait_for_rows(db, "SELECT id FROM model_calls", 2)) == 2
    first.kill()
    second = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    # the dead session's own recorder (seeing its input end) or the next start marks it crashed;
    # either runs beside the proxy, never before it accepts traffic
    deadline = time.monotonic() + 10
    while (statuses := [r["status"] for r in main_rows(capsem_home)]) != ["crashed", "running"]:
        assert time.monotonic() < deadline, statuses
        time.sleep(0.05)
    crashed = main_rows(capsem_home)[0]
    assert (
        crashed["total_model_calls"] == 2
        and crashed["total_requests"] == 2
        and crashed["total_input_tokens"] > 0
    )
    second.stop()
    assert [r["status"] for r in main_rows(capsem_home)] == ["crashed", "stopped"]


@pytest.fixture(scope="module")
def shared(emulator, tmp_path_factory) -> SharedProxy:
    """The two tests below through one mitmdump, each a scenario of its own; stopped."""
    shared = SharedProxy(emulator, tmp_path_factory.mktemp("lifecycle"))
    try:
        shared.run("compressed", compressed_traffic)
        shared.run("retried", retried_traffic)
    finally:
        shared.stop()
    return shared


COMPRESSED = json.dumps({**SIMPLE, "system": "compressed request"}).encode()


def compressed_traffic(proxy) -> None:
    post(proxy, SIMPLE, {"content-encoding": "zstd", "x-api-key": ANTHROPIC_KEY},
         content=zstandard.ZstdCompressor().compress(COMPRESSED))  # fmt: skip
    post(
        proxy,
        SIMPLE,
        {"content-encoding": "gzip", "x-api-key": ANTHROPIC_KEY},
        content=gzip.compress(COMPRESSED),
    )


def test_compressed_request_bodies_are_parsed(shared, monkeypatch):
    s = shared.scenario("compressed")
    calls = shared.model_calls(s, "id, model, system_prompt_preview, messages_count, request_bytes, "
                                  "request_body_preview")  # fmt: skip
    monkeypatch.setenv("CAPSEM_HOME", str(shared.home))
    for call in calls:  # the whole request, decoded from zstd and gzip, exactly
        shown = CliRunner().invoke(
            cli, ["show-call", str(call["id"]), "--request", "--raw"], catch_exceptions=False
        )
        assert shown.stdout_bytes == COMPRESSED
    assert len(calls) == 2
    for call in calls:
        assert (call["model"], call["system_prompt_preview"], call["messages_count"]) == (
            "claude-haiku-4-5",
            "compressed request",
            1,
        )
        assert (
            call["request_bytes"] < len(COMPRESSED) + 30
            and '"compressed request"' in call["request_body_preview"]
        )


TOOLS = [{"name": "ls", "description": "list", "input_schema": {"type": "object", "properties": {}}}]


def retried_traffic(proxy) -> dict:
    """A tool call, then the turn with its result twice (an error, then the SDK's retry); the tool use."""
    first = post(proxy, {**SIMPLE, "tools": TOOLS}).json()
    (use,) = [b for b in first["content"] if b["type"] == "tool_use"]
    turn2 = {**SIMPLE, "tools": TOOLS, "messages": [
        SIMPLE["messages"][0], {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "a b c"}]}]}  # fmt: skip
    post(proxy, turn2, {"x-emulator": "scenario=error; status=529"})  # the agent's SDK retries this one
    post(proxy, turn2)
    return use


def test_retried_request_does_not_record_tool_results_twice(shared):
    s = shared.scenario("retried")
    use = s.result
    calls = shared.model_calls(s, "id, status_code, trace_id")
    assert [c["status_code"] for c in calls] == [200, 529, 200]
    assert len({c["trace_id"] for c in calls}) == 1
    ids = ",".join(str(c["id"]) for c in calls)
    responses = rows(shared.db, "SELECT model_call_id, call_id, content_preview, tool_name FROM tool_responses "
                                f"WHERE model_call_id IN ({ids})")  # fmt: skip
    assert responses == [{"model_call_id": calls[1]["id"], "call_id": use["id"], "content_preview": "a b c",
                          "tool_name": "ls"}]  # fmt: skip
    assert len(s.exchanges) == 3


def test_an_idle_recorder_does_not_hold_the_write_lock(mitmdump, capsem_home):
    """Before any flow, other writers (the fs watcher, process diagnostics) can write session.db."""
    proxy = mitmdump()
    db = only_session(capsem_home)
    conn = sqlite3.connect(db, timeout=10, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")  # waits up to 10 s for the recorder's start-up commit
        conn.execute("INSERT INTO fs_events (timestamp, action, path) VALUES ('t', 'created', 'x')")
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert proxy.stop() == 0
    assert rows(db, "SELECT path FROM fs_events") == [{"path": "x"}]
