"""A scripted agent whose model asks to destroy a file: tool loops with a shell tool that run every
call they get for real in the working directory, against the emulator's `destroy` scenario (a
harmless call and `rm -rf capsem-doomed.txt` in parallel), with the anthropic SDK (streamed) and a
Responses WebSocket as Codex sends it. Configured only by the environment `capsem run` and
`capsem replay` give it (proxy, CA). Prints each section's final text; exits 0."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys

import anthropic

CONTROL = {"x-emulator": "scenario=destroy; tools=2"}
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
ASK = "clean up the workspace"


def run_shell(command: str) -> str:
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=10)
    return done.stdout + done.stderr


def anthropic_loop() -> str:
    client = anthropic.Anthropic(max_retries=0, default_headers=CONTROL)
    tools = [{"name": "Bash", "description": "Run a command", "input_schema": SCHEMA}]
    messages: list = [{"role": "user", "content": ASK}]
    for _ in range(4):
        with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=200, tools=tools, messages=messages
        ) as s:
            message = s.get_final_message()
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            return " ".join(b.text for b in message.content if b.type == "text")
        messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": c.id,
                                                   "content": run_shell(c.input["command"])} for c in calls]}]  # fmt: skip
    raise SystemExit("the tool loop never ended")


def websocket_loop() -> str:
    """A tool loop on one Responses WebSocket, as Codex runs it."""
    from websockets.asyncio.client import connect

    async def run() -> str:
        host, port = os.environ["HTTPS_PROXY"].rsplit("//", 1)[1].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n")
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        sock = writer.get_extra_info("socket").dup()
        writer.transport.pause_reading()
        ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
        items: list = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": ASK}]}]
        tools = [
            {"type": "function", "name": "shell", "description": "Run", "strict": False, "parameters": SCHEMA}
        ]
        async with connect("wss://api.openai.com/v1/responses", sock=sock, ssl=ctx, server_hostname="api.openai.com",
                           additional_headers={"authorization": "Bearer sk-x", **CONTROL}) as ws:  # fmt: skip
            for _ in range(4):
                await ws.send(
                    json.dumps({"type": "response.create", "model": "gpt-5", "input": items, "tools": tools})
                )
                while (event := json.loads(await ws.recv()))["type"] not in ("response.completed", "error"):
                    pass
                if event["type"] == "error":
                    return "error: " + event["error"]["message"]
                output = event["response"]["output"]
                calls = [o for o in output if o["type"] == "function_call"]
                if not calls:
                    writer.close()
                    return " ".join(p["text"] for o in output if o["type"] == "message" for p in o["content"])
                items += output + [{"type": "function_call_output", "call_id": c["call_id"],
                                    "output": run_shell(json.loads(c["arguments"])["command"])} for c in calls]  # fmt: skip
        raise SystemExit("the tool loop never ended")

    return asyncio.run(run())


SECTIONS = {"anthropic": anthropic_loop, "websocket": websocket_loop}

if __name__ == "__main__":
    for name in sys.argv[1:] or SECTIONS:
        print(f"{name}: {SECTIONS[name]()}", flush=True)
