"""`capsem demo`: a scripted agent, a real mitmdump with capsem, the local provider emulator.

Nothing leaves the machine: mitmdump runs in upstream mode towards the emulator, which plays
api.anthropic.com and api.openai.com. The agent is the real anthropic and openai SDKs running
a two-turn tool loop each (ask, get a tool call, run the tool, send the result, get the
answer); the session is then ended and summarized.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from typing import Any

import httpx
from rich.console import Console

from assembler.summary import print_session
from capsem.ids import new_session_id
from capsem.mitm import start_mitmdump
from capsem.paths import capsem_home, session_dir
from capsem.private import private_dir

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name", "examples": ["Paris"]}},
        "required": ["city"],
    },
}
PROMPT = "What's the weather in Paris right now? Use the tool."
SYSTEM = "You are a terse weather assistant."


def get_weather(arguments: dict[str, Any]) -> str:
    """The demo's local tool."""
    return f"18°C and cloudy in {arguments.get('city', 'somewhere')}"


def anthropic_loop(http_client: httpx.Client, say: Callable[[str], None], system: str = SYSTEM,
                   tool: dict[str, Any] = WEATHER_TOOL) -> None:  # fmt: skip
    """Claude-style tool loop with the real anthropic SDK, streamed (`system` and `tool` are what
    the agent is given: tests change them)."""
    import anthropic

    client = anthropic.Anthropic(
        api_key="sk-ant-demo-0000000000000000", http_client=http_client, max_retries=0
    )
    tools = [{"name": tool["name"], "description": tool["description"],
              "input_schema": tool["schema"]}]  # fmt: skip
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    for turn in (1, 2):
        with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=1024, system=system,
            tools=tools, messages=messages,
        ) as stream:  # fmt: skip
            final = stream.get_final_message()
        say(
            f"anthropic turn {turn}: stop_reason={final.stop_reason}, {final.usage.output_tokens} output tokens"
        )
        if final.stop_reason != "tool_use":
            return
        messages.append(
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]}
        )
        results = [
            {"type": "tool_result", "tool_use_id": b.id, "content": get_weather(b.input)}
            for b in final.content
            if b.type == "tool_use"
        ]
        messages.append({"role": "user", "content": results})


def openai_loop(http_client: httpx.Client, say: Callable[[str], None], system: str = SYSTEM,
                tool: dict[str, Any] = WEATHER_TOOL) -> None:  # fmt: skip
    """The same loop with the real openai SDK, non-streamed then streamed."""
    import openai

    client = openai.OpenAI(api_key="sk-proj-demo00000000000000000000", http_client=http_client, max_retries=0)
    tools = [{"type": "function", "function": {"name": tool["name"],
              "description": tool["description"], "parameters": tool["schema"]}}]  # fmt: skip
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": PROMPT},
    ]
    first = client.chat.completions.create(model="gpt-4.1", messages=messages, tools=tools)
    choice = first.choices[0]
    say(f"openai turn 1: finish_reason={choice.finish_reason}, {first.usage.completion_tokens} output tokens")
    messages.append(choice.message.model_dump(exclude_none=True))
    for call in choice.message.tool_calls or []:
        result = get_weather(json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    stream = client.chat.completions.create(
        model="gpt-4.1", messages=messages, tools=tools, stream=True, stream_options={"include_usage": True}
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    say(f"openai turn 2 (streamed): {len(text)} characters of answer")


def run_demo(console: Console | None = None) -> str:
    """Run the whole demo; return the session id. It leaves nothing in /tmp: mitmproxy's CA lives
    in $CAPSEM_HOME/mitmproxy (as for `capsem run`) and the mitmdump log beside the session."""
    from capsem.emulator import FRIENDLY_TEXT, Emulator

    console = console or Console()
    say = lambda msg: console.print(f"[dim]•[/dim] {msg}")  # noqa: E731
    session_id = new_session_id()
    folder = session_dir(session_id)
    private_dir(folder)
    with Emulator(defaults={"text": FRIENDLY_TEXT}) as emu:
        say(f"provider emulator listening at {emu.http_url} (plays api.anthropic.com and api.openai.com)")
        proxy = start_mitmdump(
            confdir=capsem_home() / "mitmproxy",
            log_path=folder / "mitmdump.log",
            args=["--mode", f"upstream:{emu.proxy_url}", "--set", f"ssl_verify_upstream_trusted_ca={emu.ca_path}",
                  "--set", f"capsem_session_id={session_id}", "--set", "capsem_mode=demo", "--set", "capsem_emulated=true",
                  "--set", "capsem_command=capsem demo"],
        )  # fmt: skip
        say(f"mitmdump with the capsem addon listening at {proxy.url} (log: {proxy.log_path})")
        try:
            trust = ssl.create_default_context(cafile=proxy.ca_cert)
            with httpx.Client(proxy=proxy.url, verify=trust, timeout=30) as http_client:
                anthropic_loop(http_client, say)
                openai_loop(http_client, say)
        finally:
            proxy.stop()
    say(f"mitmdump stopped; session {session_id} rolled up into {capsem_home() / 'main.db'}")
    console.print()
    print_session(session_id, console)
    return session_id
