"""Tool rules in the answer, through a real mitmdump (one start): the anthropic, openai (Chat
Completions and Responses) and google-genai SDKs in their own tool loops, with the emulator's
`destroy` scenario asking for a harmless call and `rm -rf capsem-doomed.txt` in parallel, and a
rule denying `rm -rf` (`tool_args: {command: {shell: "rm -rf"}}`).

The tool loop runs every call it gets for real in a workspace: the denied one never runs (the
file is still there), the harmless one does, and each loop ends on a normal end of turn. The
allowed call's bytes reach the client exactly as the upstream sent them (compared with the
emulator's own answer to the same request), and session.db keeps what the model asked for with
each call's decision. Ollama's NDJSON answer is held the same way (httpx: no SDK of its own here).
Pure machines: tests/addons/toolhold/test_hold.py, test_ollama_hold.py.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import ssl
import subprocess
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import types

from addons.eventstream import EventStreamDecoder
from assembler.replay.recording import load
from capsem.emulator.agent import DOOMED, FILE
from capsem.store.bodies import read_body
from tests.addons.toolhold import sdk_parse
from tests.conftest import only_session, rows

RULES = 'policy:\n  rules:\n    - {name: no-rm-rf, action: deny, tool: "*", tool_args: {command: {shell: "rm -rf"}}}\n'
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
CONTROL = "scenario=destroy; tools=2"
ASK = [{"role": "user", "content": "clean up the workspace"}]


def configure(home: Path, rules: str = RULES) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(rules)


def run_shell(command: str, workspace: Path) -> str:
    done = subprocess.run(command, shell=True, cwd=workspace, capture_output=True, text=True, timeout=10)
    return done.stdout + done.stderr


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / DOOMED).write_text("keep me\n")
    return work


def trust(proxy) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=proxy.ca_cert)


def anthropic_loop(proxy, workspace: Path) -> list[Any]:
    client = anthropic.Anthropic(api_key="sk-ant-x", max_retries=0, default_headers={"x-emulator": CONTROL},
                                 http_client=httpx.Client(proxy=proxy.url, verify=trust(proxy), timeout=30))  # fmt: skip
    tools = [{"name": "Bash", "description": "Run a command", "input_schema": SCHEMA}]
    messages: list[Any] = list(ASK)
    answers = []
    for _ in range(4):
        with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=200, tools=tools, messages=messages
        ) as s:
            message = s.get_final_message()
        answers.append(message)
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            assert message.stop_reason == "end_turn"
            return answers
        results = [{"type": "tool_result", "tool_use_id": c.id, "content": run_shell(c.input["command"], workspace)}
                   for c in calls]  # fmt: skip
        messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
                     {"role": "user", "content": results}]  # fmt: skip
    raise AssertionError("the tool loop never ended")


def chat_loop(proxy, workspace: Path, stream: bool) -> list[Any]:
    client = openai.OpenAI(api_key="sk-x", max_retries=0, default_headers={"x-emulator": CONTROL},
                           http_client=httpx.Client(proxy=proxy.url, verify=trust(proxy), timeout=30))  # fmt: skip
    tools = [{"type": "function", "function": {"name": "shell", "description": "Run", "parameters": SCHEMA}}]
    messages: list[Any] = list(ASK)
    answers = []
    for _ in range(4):
        if stream:
            with client.chat.completions.stream(model="gpt-4o", tools=tools, messages=messages) as s:
                for _event in s:
                    pass
                completion = s.get_final_completion()
        else:
            completion = client.chat.completions.create(model="gpt-4o", tools=tools, messages=messages)
        answers.append(completion)
        choice = completion.choices[0]
        if not choice.message.tool_calls:
            assert choice.finish_reason == "stop"
            return answers
        messages.append(choice.message.model_dump(exclude_none=True))
        for call in choice.message.tool_calls:
            command = json.loads(call.function.arguments)["command"]
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": run_shell(command, workspace)}
            )
    raise AssertionError("the tool loop never ended")


def responses_loop(proxy, workspace: Path) -> list[Any]:
    client = openai.OpenAI(api_key="sk-x", max_retries=0, default_headers={"x-emulator": CONTROL},
                           http_client=httpx.Client(proxy=proxy.url, verify=trust(proxy), timeout=30))  # fmt: skip
    tools = [{"type": "function", "name": "shell", "description": "Run", "parameters": SCHEMA}]
    items: list[Any] = list(ASK)
    answers = []
    for _ in range(4):
        with client.responses.stream(model="gpt-5", tools=tools, input=items) as s:
            for _event in s:
                pass
            response = s.get_final_response()
        answers.append(response)
        calls = [i for i in response.output if i.type == "function_call"]
        if not calls:
            assert response.status == "completed"
            return answers
        items += [i.model_dump(exclude_none=True) for i in response.output]
        items += [{"type": "function_call_output", "call_id": c.call_id,
                   "output": run_shell(json.loads(c.arguments)["command"], workspace)} for c in calls]  # fmt: skip
    raise AssertionError("the tool loop never ended")


def gemini_loop(proxy, workspace: Path) -> list[Any]:
    client = genai.Client(api_key="AIza-x", http_options=types.HttpOptions(
        client_args={"proxy": proxy.url, "verify": trust(proxy)}, headers={"x-emulator": CONTROL}))  # fmt: skip
    schema = types.Schema(type=types.Type.OBJECT, properties={"command": types.Schema(type=types.Type.STRING)},
                          required=["command"])  # fmt: skip
    tool = types.Tool(
        function_declarations=[types.FunctionDeclaration(name="run_shell_command", parameters=schema)]
    )
    config = types.GenerateContentConfig(
        tools=[tool], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
    )
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text=ASK[0]["content"])])]
    answers = []
    for _ in range(4):
        parts = []
        for chunk in client.models.generate_content_stream(
            model="gemini-2.5-flash", contents=contents, config=config
        ):
            answers.append(chunk)
            parts += chunk.candidates[0].content.parts or []
        calls = [p.function_call for p in parts if p.function_call]
        if not calls:
            return answers
        contents.append(types.Content(role="model", parts=parts))
        results = [types.FunctionResponse(name=c.name, id=c.id, response={"output": run_shell(c.args["command"], workspace)})
                   for c in calls]  # fmt: skip
        contents.append(types.Content(role="user", parts=[types.Part(function_response=r) for r in results]))
    raise AssertionError("the tool loop never ended")


def said(answers: list[Any]) -> str:
    return json.dumps([a.model_dump(mode="json") for a in answers])


def test_sdk_tool_loops_never_run_the_denied_call(mitmdump, emu, capsem_home, tmp_path):
    configure(capsem_home)
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    loops = {"anthropic": anthropic_loop, "chat": lambda p, w: chat_loop(p, w, True),
             "chat-json": lambda p, w: chat_loop(p, w, False), "responses": responses_loop,
             "gemini": gemini_loop}  # fmt: skip
    for name, loop in loops.items():
        work = tmp_path / name
        work.mkdir()
        (work / DOOMED).write_text("keep me\n")
        answers = loop(proxy, work)
        assert (work / DOOMED).read_text() == "keep me\n", f"{name}: the denied call ran"
        assert (work / FILE).exists(), f"{name}: the allowed call did not run"
        text = said(answers)
        assert "no-rm-rf" in text and "the tool was not run" in text, name
    assert proxy.stop() == 0
    db = only_session(capsem_home)
    decided = rows(db, "SELECT tool_name, decision, decision_rule, arguments FROM tool_calls ORDER BY id")
    denied = [r for r in decided if r["decision"] == "denied"]
    allowed = [r for r in decided if r["decision"] == "allowed"]
    assert len(denied) == len(loops) and all("rm -rf" in r["arguments"] for r in denied), decided
    assert {r["decision_rule"] for r in denied} == {"no-rm-rf"}
    assert len(allowed) == len(loops) and all(r["decision_rule"] is None for r in allowed), decided
    # the record keeps what the model sent, and what the agent received beside it; a replay answers that
    denied_calls = rows(db, "SELECT DISTINCT model_call_id FROM tool_calls WHERE decision = 'denied'")
    conn = sqlite3.connect(db)
    for call in denied_calls:
        sent = read_body(conn, call["model_call_id"], "response")[0]
        got = read_body(conn, call["model_call_id"], "delivered")[0]
        assert b"the tool was not run" not in sent and b"the tool was not run" in got
    assert conn.execute("SELECT count(*) FROM event_body_blobs WHERE direction = 'delivered'").fetchone()[
        0
    ] == len(denied_calls)
    conn.close()
    replayed = [c.answer.body for c in load(db.parent.name).calls]
    assert sum(b"the tool was not run" in body for body in replayed) == len(denied_calls)


REQUESTS = {
    "anthropic": ("https://api.anthropic.com/v1/messages",
                  {"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": True, "messages": ASK,
                   "tools": [{"name": "Bash", "input_schema": SCHEMA}]}),
    "chat": ("https://api.openai.com/v1/chat/completions",
             {"model": "gpt-4o", "stream": True, "messages": ASK,
              "tools": [{"type": "function", "function": {"name": "shell", "parameters": SCHEMA}}]}),
    "responses": ("https://api.openai.com/v1/responses",
                  {"model": "gpt-5", "stream": True, "input": ASK,
                   "tools": [{"type": "function", "name": "shell", "parameters": SCHEMA}]}),
    "gemini-array": ("https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent",
                     {"contents": [{"role": "user", "parts": [{"text": "x"}]}],
                      "tools": [{"functionDeclarations": [{"name": "run_shell_command", "parameters": SCHEMA}]}]}),
    "gemini": ("https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
               {"contents": [{"role": "user", "parts": [{"text": "x"}]}],
                "tools": [{"functionDeclarations": [{"name": "run_shell_command", "parameters": SCHEMA}]}]}),
    "gemini-code-assist": ("https://cloudcode-pa.googleapis.com/v1internal:streamGenerateContent?alt=sse",
                           {"model": "gemini-2.5-flash", "project": "p", "request": {
                               "contents": [{"role": "user", "parts": [{"text": "x"}]}],
                               "tools": [{"functionDeclarations": [{"name": "run_shell_command", "parameters": SCHEMA}]}]}}),
    "ollama": ("http://localhost:11434/api/chat",
               {"model": "qwen3:8b", "messages": ASK,
                "tools": [{"type": "function", "function": {"name": "shell", "parameters": SCHEMA}}]}),
}  # fmt: skip


def test_allowed_calls_arrive_byte_identical(mitmdump, emu, capsem_home):
    configure(capsem_home)
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    through = httpx.Client(proxy=proxy.url, verify=trust(proxy), timeout=30)
    headers = {"x-emulator": "scenario=agent; chunk=5", "x-api-key": "k", "authorization": "Bearer k"}
    for name, (url, body) in REQUESTS.items():
        got = through.post(url, json=body, headers=headers).content
        upstream = base64.b64decode(
            emu.exchanges()[-1]["response_body_b64"]
        )  # exactly what the emulator sent
        assert any(
            m in upstream for m in (b'"tool_use"', b'"tool_calls"', b'"function_call"', b'"functionCall"')
        ), name
        assert got == upstream, name
    destroy = {**headers, "x-emulator": "scenario=destroy; tools=2"}
    url, body = REQUESTS["gemini-array"]
    parts = [
        p
        for r in through.post(url, json=body, headers=destroy).json()
        for p in r["candidates"][0]["content"]["parts"]
    ]
    calls = [p["functionCall"]["args"]["command"] for p in parts if "functionCall" in p]
    assert len(calls) == 1 and "rm -rf" not in calls[0] and any("not run" in p.get("text", "") for p in parts)
    url, body = REQUESTS["gemini-code-assist"]  # the Gemini CLI signed in with Google: {"response": ...}
    sse = through.post(url, json=body, headers=destroy).text
    parts = [p for line in sse.splitlines() if line.startswith("data: ")
             for p in json.loads(line[6:])["response"]["candidates"][0]["content"]["parts"]]  # fmt: skip
    calls = [p["functionCall"]["args"]["command"] for p in parts if "functionCall" in p]
    assert len(calls) == 1 and "rm -rf" not in calls[0] and any("not run" in p.get("text", "") for p in parts)
    url, body = REQUESTS["ollama"]  # NDJSON lines: the line with the calls keeps the harmless one
    lines = [json.loads(line) for line in through.post(url, json=body, headers=destroy).content.splitlines()]
    held = [m for m in (line["message"] for line in lines) if "tool_calls" in m or "not run" in m["content"]]
    assert len(held) == 1 and len(held[0]["tool_calls"]) == 1 and lines[-1]["done"] is True
    assert "rm -rf" not in json.dumps(held[0]["tool_calls"]) and "no-rm-rf" in held[0]["content"]
    # Bedrock's binary event stream: allowed, the frames as the emulator sent them; denied, new frames
    bedrock = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 100, "messages": ASK,
               "tools": [{"name": "Bash", "input_schema": SCHEMA}]}  # fmt: skip
    got = through.post(BEDROCK, json=bedrock, headers=headers).content
    assert got == base64.b64decode(emu.exchanges()[-1]["response_body_b64"]) and b"\x00" in got[:4]
    events = [json.loads(e.data) for e in EventStreamDecoder().feed(through.post(BEDROCK, json=bedrock,
                                                                                headers=destroy).content)]  # fmt: skip
    uses = [
        e["content_block"]["input"] for e in events if e.get("content_block", {}).get("type") == "tool_use"
    ]
    deltas = [e["delta"] for e in events if e.get("type") == "content_block_delta"]
    said, args = ("".join(d.get(k, "") for d in deltas) for k in ("text", "partial_json"))
    assert len(uses) == 1 and "no-rm-rf" in said and "tee capsem-hello" in args and "rm -rf" not in args
    assert proxy.stop() == 0
    decided = rows(only_session(capsem_home), "SELECT decision FROM tool_calls")
    assert [r["decision"] for r in decided] == (
        ["allowed"] * len(REQUESTS) + ["allowed", "denied"] * 3 + ["allowed"] + ["allowed", "denied"]
    )


BEDROCK = "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke-with-response-stream"


ASK_RULES = 'policy:\n  rules:\n    - {name: ask-rm, action: ask, tool: "*", tool_args: {command: {shell: "rm -rf"}}}\n'


def test_an_asked_call_waits_for_a_person_approved_from_the_cli_denied_from_the_view(
    mitmdump, emu, capsem_home, tmp_path
):
    from tests.cli.conftest import run
    from tests.e2e.test_ask import Background, deny_in_chromium, view_server, waiting

    configure(capsem_home, ASK_RULES)
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    approved, refused = tmp_path / "approved", tmp_path / "refused"
    for work in (approved, refused):
        work.mkdir()
        (work / DOOMED).write_text("keep me\n")
    held = Background(lambda: anthropic_loop(proxy, approved))
    (item,) = waiting(1)
    assert item["tool"] == "Bash" and "rm -rf" in json.dumps(item["arguments"]) and item["rule"] == "ask-rm"
    assert item["target"] == "tool Bash in POST api.anthropic.com/v1/messages"
    assert held.thread.is_alive() and (approved / DOOMED).exists()  # nothing reached the agent yet
    assert f"approved {item['id']}" in run("approve", item["id"])
    answers = held.join()
    assert not isinstance(answers, Exception), answers
    assert not (approved / DOOMED).exists() and (approved / FILE).exists()  # approved: it ran

    held = Background(lambda: chat_loop(proxy, refused, stream=True))
    (item,) = waiting(1)
    with view_server(capsem_home) as base:
        deny_in_chromium(base, item["id"], tmp_path / "chromium")
    answers = held.join()
    assert not isinstance(answers, Exception), answers
    assert (refused / DOOMED).read_text() == "keep me\n" and (refused / FILE).exists()
    assert "ask-rm" in said(answers) and "the tool was not run" in said(answers)
    assert proxy.stop() == 0
    db = only_session(capsem_home)
    decided = rows(
        db, "SELECT tool_name, decision, decision_rule FROM tool_calls WHERE arguments LIKE '%rm -rf%'"
    )
    assert decided == [{"tool_name": "Bash", "decision": "approved", "decision_rule": "ask-rm"},
                       {"tool_name": "shell", "decision": "denied", "decision_rule": "ask-rm"}]  # fmt: skip
    answered = rows(db, "SELECT tool, decision, decided_by, reason FROM approvals ORDER BY id")
    assert answered == [{"tool": "Bash", "decision": "approved", "decided_by": "cli", "reason": None},
                        {"tool": "shell", "decision": "denied", "decided_by": "view", "reason": "not today"}]  # fmt: skip


def test_a_compressed_answer_is_read_whole_and_encoded_again_only_when_a_call_is_denied(
    mitmdump, emu, capsem_home
):
    """Bytes of a compressed stream do not line up with its events: capsem reads it whole, and
    gives the upstream's bytes unchanged unless a call is denied (then encoded the same way)."""
    configure(capsem_home)
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    client = httpx.Client(proxy=proxy.url, verify=trust(proxy), timeout=30)
    url, body = REQUESTS["chat"]
    for encoding in ("gzip", "br", "zstd"):
        for scenario in ("agent", "destroy"):
            headers = {"x-emulator": f"scenario={scenario}; encoding={encoding}", "authorization": "Bearer k"}
            with client.stream("POST", url, json=body, headers=headers) as response:
                raw = b"".join(response.iter_raw())
                assert response.headers["content-encoding"] == encoding
            upstream = base64.b64decode(emu.exchanges()[-1]["response_body_b64"])
            decoded = httpx.Response(200, headers={"content-encoding": encoding}, content=raw).content
            if scenario == "agent":
                assert raw == upstream and b'"tool_calls"' in decoded, encoding
            else:
                assert (
                    raw != upstream and b'"tool_calls"' not in decoded and b"the tool was not run" in decoded
                )
                assert sdk_parse.chat_final(decoded).choices[0].finish_reason == "stop", encoding
    assert proxy.stop() == 0
