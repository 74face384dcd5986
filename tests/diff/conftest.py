"""Three sessions recorded through real mitmdump with the real anthropic and openai SDKs against
the emulator (its answers seeded, so the same request gets the same answer in every run): `base`,
`again` (the same agent run again) and `changed` (another system prompt and another description of
its tool, each of the same length, so every token count stays the same: the change is the only one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from assembler.demo import SYSTEM, WEATHER_TOOL, anthropic_loop, openai_loop
from capsem.emulator import Emulator
from capsem.ids import new_session_id
from tests.conftest import emulated_client, environ

CHANGED_SYSTEM = SYSTEM.replace("terse", "brief")
CHANGED_TOOL = {**WEATHER_TOOL, "description": "Today's weather for a city"}
assert len(CHANGED_SYSTEM) == len(SYSTEM) and len(CHANGED_TOOL["description"]) == len(
    WEATHER_TOOL["description"]
)


@dataclass(frozen=True)
class Recorded:
    home: Path
    base: str
    again: str
    changed: str


def _record(emu: Emulator, work: Path, system: str, tool: dict) -> str:
    session_id = new_session_id()
    with emulated_client(emu, work, session_id) as client:
        anthropic_loop(client, lambda _msg: None, system, tool)
        openai_loop(client, lambda _msg: None, system, tool)
    return session_id


@pytest.fixture(scope="session")
def recorded_runs(tmp_path_factory) -> Recorded:
    home = tmp_path_factory.mktemp("diff-home")
    work = tmp_path_factory.mktemp("diff-work")
    with environ(CAPSEM_HOME=str(home)), Emulator(defaults={"seed": "capsem-diff"}) as emu:
        ids = [_record(emu, work, SYSTEM, WEATHER_TOOL), _record(emu, work, SYSTEM, WEATHER_TOOL),
               _record(emu, work, CHANGED_SYSTEM, CHANGED_TOOL)]  # fmt: skip
    return Recorded(home, *ids)


@pytest.fixture
def runs(recorded_runs, monkeypatch) -> Recorded:
    """The recorded sessions, with CAPSEM_HOME pointing at them."""
    monkeypatch.setenv("CAPSEM_HOME", str(recorded_runs.home))
    return recorded_runs


AGENT_TOOL = {"name": "Agent", "description": "Start a subagent on a task",
              "input_schema": {"type": "object", "required": ["prompt"], "properties": {"prompt": {
                  "type": "string", "examples": ["Read every file under src/ and list the functions that open a "
                                                 "network connection, with the file and line of each one, then "
                                                 "say which of them retry on failure and which do not"]}}}}  # fmt: skip
"""Claude Code's subagent tool (a short name beside long arguments: the name must stay whole)."""
RESULT = ("The subagent read 14 files under src/ and found 6 functions that open a connection: "
          "fetch_page, open_socket, post_report, sync_cache, upload_blob and ping_host; only fetch_page "
          "and upload_blob retry on failure, the other four give up at once. ")  # fmt: skip


@dataclass(frozen=True)
class AgentRuns:
    home: Path
    a: str
    """A tool loop whose tool result is an error, a request that got HTTP 404, and a call to a model
    with no known price."""
    b: str
    """The same tool loop with another (successful) tool result, nothing else."""


def _tool_session(emu: Emulator, work: Path, *, failing: bool) -> str:
    import anthropic

    session_id = new_session_id()
    with emulated_client(emu, work, session_id) as http:
        client = anthropic.Anthropic(api_key="sk-ant-diff-0000000000000000", http_client=http, max_retries=0)
        messages: list[dict] = [{"role": "user", "content": "Which functions open a connection?"}]
        first = client.messages.create(model="claude-sonnet-4-5", max_tokens=512, tools=[AGENT_TOOL],
                                       messages=messages,
                                       extra_headers={"x-emulator": "scenario=tool_call"})  # fmt: skip
        (use,) = [b for b in first.content if b.type == "tool_use"]
        result = ("subagent failed: " if failing else "") + RESULT * 2
        messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                   "content": result, "is_error": failing}]}]  # fmt: skip
        client.messages.create(model="claude-sonnet-4-5", max_tokens=512, tools=[AGENT_TOOL], messages=messages,
                               extra_headers={"x-emulator": "scenario=text"})  # fmt: skip
        if failing:
            client.messages.create(model="capsem-unpriced-model-1", max_tokens=64,
                                   messages=[{"role": "user", "content": "And a summary?"}],
                                   extra_headers={"x-emulator": "scenario=text"})  # fmt: skip
            missing = http.get("https://api.anthropic.com/v1/capsem-test/no-such-endpoint")
            assert missing.status_code == 404
    return session_id


@pytest.fixture(scope="session")
def agent_runs(tmp_path_factory) -> AgentRuns:
    home = tmp_path_factory.mktemp("diff-agent-home")
    work = tmp_path_factory.mktemp("diff-agent-work")
    with environ(CAPSEM_HOME=str(home)), Emulator(defaults={"seed": "capsem-diff"}) as emu:
        ids = [_tool_session(emu, work, failing=True), _tool_session(emu, work, failing=False)]
    return AgentRuns(home, *ids)
