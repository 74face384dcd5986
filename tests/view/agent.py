"""A scripted coding agent for the `capsem view` end-to-end test, run under `capsem run`: a tool
loop with thinking, a failed tool, a tool run by an MCP server, a subagent (Claude Code's Task
tool) and a file change, then a second turn. It knows capsem only through its environment."""

import asyncio
import os
import pathlib

import anthropic
import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

SYSTEM = "VIEWSYSTEM: you are a careful notes agent. Never delete anything."
TOOLS = [
    {"name": "read_file", "description": "Read a file",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "mcp__files-server__read_note", "description": "Read a note",
     "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
    {"name": "Task", "description": "Start a subagent",
     "input_schema": {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}},
]  # fmt: skip
MCP_URL, PROVIDER_URL = os.environ["VIEW_MCP_URL"], os.environ["VIEW_PROVIDER_URL"]


def client(control: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-ant-api03-VIEWSECRET00000000000000", max_retries=0,
                               base_url=PROVIDER_URL, default_headers={"x-emulator": control})  # fmt: skip


async def read_note(arguments: dict) -> str:
    async with (
        httpx.AsyncClient(proxy=os.environ["CAPSEM_PROXY"], timeout=30, follow_redirects=True) as http,
        streamable_http_client(MCP_URL, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool("read_note", arguments)
        return result.content[0].text


messages = [{"role": "user", "content": "Summarize my notes into notes.md"}]
first = client("scenario=thinking; tools=3").messages.create(
    model="claude-sonnet-4-5", max_tokens=512, system=SYSTEM, tools=TOOLS, messages=messages,
    thinking={"type": "enabled", "budget_tokens": 1024})  # fmt: skip
results = []
for use in [b for b in first.content if b.type == "tool_use"]:
    if use.name == "read_file":
        results.append({"type": "tool_result", "tool_use_id": use.id, "is_error": True,
                        "content": "permission denied: VIEWFAILED secrets.txt"})  # fmt: skip
    elif use.name == "Task":
        sub = client("scenario=text").messages.create(
            model="claude-haiku-4-5",
            max_tokens=256,
            messages=[{"role": "user", "content": use.input["prompt"]}],
        )
        results.append({"type": "tool_result", "tool_use_id": use.id, "content": sub.content[0].text})
    else:
        note = asyncio.run(read_note(use.input))
        results.append({"type": "tool_result", "tool_use_id": use.id, "content": f"VIEWRESULT {note}"})
pathlib.Path("notes.md").write_text("# Notes\nbuy milk\n")
messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
             {"role": "user", "content": results}]  # fmt: skip
second = client("scenario=thinking").messages.create(
    model="claude-sonnet-4-5", max_tokens=512, system=SYSTEM, tools=TOOLS, messages=messages,
    thinking={"type": "enabled", "budget_tokens": 1024})  # fmt: skip
messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in second.content]},
             {"role": "user", "content": "Thanks. Now say it in one line."}]  # fmt: skip
client("scenario=text").messages.create(model="claude-sonnet-4-5", max_tokens=128, system=SYSTEM, tools=TOOLS,
                                        messages=messages)  # fmt: skip
print("agent done")
