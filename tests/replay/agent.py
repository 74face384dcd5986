"""A scripted agent for the replay tests: tool loops with the real SDKs (anthropic streamed,
Claude Code-shaped, openai chat and Responses, a Responses WebSocket like Codex's, google-genai)
and an MCP tool call (the server at `MCP_URL`), each tool call writing a file in the workspace,
configured only by the environment `capsem run` and `capsem replay` give it (proxy, CA).

Environment: `PROMPT` changes the first user prompt (a changed prompt), `RUN_DATE` the date in the
Claude Code-shaped system prompt; the billing line and session id are new on every run, as Claude
Code's are. Prints each section's final text; exits 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import ssl
import sys
import uuid

# each section imports the SDK it uses (anthropic and openai cost ~1.5 s of CPU each to import)
CONTROL = {"x-emulator": "scenario=auto"}
TOOL_A = [{"name": "write_file", "description": "write a file", "input_schema": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]  # fmt: skip
TOOL_O = [{"type": "function", "function": {"name": "write_file", "description": "write a file", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]  # fmt: skip
TOOL_R = [{"type": "function", "name": "write_file", "description": "write a file", "strict": False, "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]  # fmt: skip
PROMPT = os.environ.get("PROMPT", "write the notes")


def write(name: str, text: str) -> str:
    pathlib.Path(name).write_text(text)
    return f"wrote {name}"


def anthropic_loop() -> str:
    import anthropic

    client = anthropic.Anthropic(max_retries=0, default_headers=CONTROL)
    messages = [{"role": "user", "content": PROMPT}]
    with client.messages.stream(
        model="claude-sonnet-4-5", max_tokens=200, tools=TOOL_A, messages=messages
    ) as s:
        first = s.get_final_message()
    uses = [b for b in first.content if b.type == "tool_use"]
    results = [{"type": "tool_result", "tool_use_id": u.id, "content": write(f"a-{n}.txt", json.dumps(u.input))}
               for n, u in enumerate(uses)]  # fmt: skip
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": results}]  # fmt: skip
    final = client.messages.create(model="claude-sonnet-4-5", max_tokens=200, tools=TOOL_A, messages=messages)
    return final.content[0].text


def claude_code_shaped() -> str:
    """As Claude Code sends it: a billing line new on every request, a session id in metadata, the
    date and the workspace in the system prompt."""
    import anthropic

    client = anthropic.Anthropic(max_retries=0, default_headers=CONTROL)
    session = str(uuid.uuid4())
    date = os.environ.get("RUN_DATE", "2026-11-25")

    def system() -> list[dict]:
        new = uuid.uuid4().hex
        billing = (
            f"x-anthropic-billing-header: cc_version=2.0.50.{new[:3]}; cc_entrypoint=cli; cch={new[3:8]};"
        )
        return [{"type": "text", "text": billing},
                {"type": "text", "text": f"Working directory: {os.getcwd()}\nToday's date is {date}."}]  # fmt: skip

    meta = {"user_id": f"user_{'ab' * 32}_account__session_{session}"}
    messages = [{"role": "user", "content": "fix the test"}]
    first = client.messages.create(model="claude-haiku-4-5", max_tokens=200, tools=TOOL_A, system=system(),
                                   metadata=meta, messages=messages)  # fmt: skip
    uses = [b for b in first.content if b.type == "tool_use"]
    results = [{"type": "tool_result", "tool_use_id": u.id, "content": write(f"cc-{n}.txt", json.dumps(u.input))}
               for n, u in enumerate(uses)]  # fmt: skip
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": results}]  # fmt: skip
    final = client.messages.create(model="claude-haiku-4-5", max_tokens=200, tools=TOOL_A, system=system(),
                                   metadata=meta, messages=messages)  # fmt: skip
    return final.content[0].text


def chat_loop() -> str:
    import openai

    client = openai.OpenAI(max_retries=0, default_headers=CONTROL)
    messages: list[dict] = [{"role": "user", "content": "write the chat notes"}]
    stream = client.chat.completions.create(model="gpt-4.1", tools=TOOL_O, messages=messages, stream=True)
    calls: dict[int, dict] = {}
    for chunk in stream:
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            entry = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
            entry["name"] += tc.function.name or ""
            entry["arguments"] += tc.function.arguments or ""
    messages.append({"role": "assistant", "tool_calls": [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in calls.values()]})  # fmt: skip
    for n, c in enumerate(calls.values()):
        messages.append(
            {"role": "tool", "tool_call_id": c["id"], "content": write(f"chat-{n}.txt", c["arguments"])}
        )
    texts = []
    for n in range(2):  # the same request twice in a row (answered with another text)
        final = client.chat.completions.create(model="gpt-4.1", tools=TOOL_O, messages=messages,
                                               extra_headers={"x-emulator": f"scenario=auto; text=answer {n}"})  # fmt: skip
        texts.append(final.id)
    return " ".join(texts)


def responses_loop() -> str:
    import openai

    client = openai.OpenAI(max_retries=0, default_headers=CONTROL)
    items: list = [{"role": "user", "content": "write the response notes"}]
    first = client.responses.create(model="gpt-5", tools=TOOL_R, input=items, stream=False)
    calls = [o for o in first.output if o.type == "function_call"]
    items += [o.model_dump(exclude_none=True) for o in first.output]
    items += [{"type": "function_call_output", "call_id": c.call_id, "output": write(f"r-{n}.txt", c.arguments)}
              for n, c in enumerate(calls)]  # fmt: skip
    final = None
    for event in client.responses.create(model="gpt-5", tools=TOOL_R, input=items, stream=True):
        if event.type == "response.completed":
            final = event.response
    return final.output_text if final else ""


def websocket_loop() -> str:
    """Two turns on one WebSocket, as Codex sends them."""
    from websockets.asyncio.client import connect

    async def run() -> str:
        proxy = os.environ["HTTPS_PROXY"].rsplit("//", 1)[1]
        host, port = proxy.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n")
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        sock = writer.get_extra_info("socket").dup()
        writer.transport.pause_reading()
        ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
        items: list = [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go ws"}]}
        ]
        text, cache_key = "", str(uuid.uuid4())  # one per run, as Codex's session id
        async with connect("wss://api.openai.com/v1/responses", sock=sock, ssl=ctx, server_hostname="api.openai.com",
                           additional_headers={"authorization": "Bearer sk-x", **CONTROL}) as ws:  # fmt: skip
            for _turn in range(2):
                await ws.send(json.dumps({"type": "response.create", "model": "gpt-5", "input": items,
                                          "tools": TOOL_R, "prompt_cache_key": cache_key}))  # fmt: skip
                while True:
                    event = json.loads(await ws.recv())
                    if event["type"] in ("response.completed", "error"):
                        break
                if event["type"] == "error":
                    return "error: " + event["error"]["message"]
                output = event["response"]["output"]
                calls = [o for o in output if o["type"] == "function_call"]
                results = [{"type": "function_call_output", "call_id": c["call_id"],
                            "output": write(f"ws-{n}.txt", c["arguments"])} for n, c in enumerate(calls)]  # fmt: skip
                items = items + output + results
                text = "".join(
                    p.get("text", "") for o in output if o["type"] == "message" for p in o["content"]
                )
        writer.close()
        return text

    return asyncio.run(run())


def gemini_loop() -> str:
    from google import genai
    from google.genai import types

    client = genai.Client(api_key="capsem", http_options=types.HttpOptions(headers=CONTROL))
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(
        name="write_file", description="write a file",
        parameters=types.Schema(type="OBJECT", properties={"text": types.Schema(type="STRING")}))])  # fmt: skip
    config = types.GenerateContentConfig(
        tools=[tool], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
    )
    contents = [types.Content(role="user", parts=[types.Part(text="write the gemini notes")])]
    first = None
    for chunk in client.models.generate_content_stream(
        model="gemini-2.5-flash", contents=contents, config=config
    ):
        first = first or (chunk if chunk.function_calls else None)
    calls = first.function_calls if first else []
    contents.append(first.candidates[0].content)
    contents.append(types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        name=c.name, response={"result": write(f"g-{n}.txt", json.dumps(c.args))}))
        for n, c in enumerate(calls)]))  # fmt: skip
    final = client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)
    return final.text or ""


def mcp_call() -> str:
    """An MCP tool call over Streamable HTTP (the server at `MCP_URL`), its result written."""
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def run() -> str:
        async with (
            httpx.AsyncClient(proxy=os.environ["HTTP_PROXY"], timeout=30) as http,
            streamable_http_client(os.environ["MCP_URL"], http_client=http) as (reads, writes, _),
            ClientSession(reads, writes) as session,
        ):
            await session.initialize()
            result = await session.call_tool("read_note", {"name": "groceries"})
            return write("mcp.txt", result.content[0].text)

    return asyncio.run(run())


SECTIONS = {"mcp": mcp_call, "anthropic": anthropic_loop, "claude_code": claude_code_shaped, "chat": chat_loop,
            "responses": responses_loop, "websocket": websocket_loop, "gemini": gemini_loop}  # fmt: skip

if __name__ == "__main__":
    for name in sys.argv[1:] or SECTIONS:
        print(f"{name}: {SECTIONS[name]()}", flush=True)
