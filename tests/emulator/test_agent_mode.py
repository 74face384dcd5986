"""Issue 35, points 4 and 5: the emulator answers real agents as a provider would.

Scenario `agent` (what `capsem run --emulator` selects) answers each API with one call of the
agent's own tool whose arguments match the tool's JSON schema, then a final text once the
result is in; JSON wherever JSON is asked; the same answer for the same prompt. The agents' own
housekeeping requests get the real service's answers; hosts the emulator does not play get a
404 that capsem counts apart from the agent's errors. All in-process, on loopback, with httpx
and websockets as clients.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from rich.console import Console
from websockets.sync.client import connect as ws_connect

from assembler.failures import failures, not_emulated
from assembler.summary import render_session, session_summary
from capsem.emulator import Emulator
from capsem.emulator.agent import CODE_MODE, COMMAND, FILE, GREETING, PATCH, value
from capsem.emulator.housekeeping import NOT_EMULATED_SERVER
from capsem.outcomes import ERRORS_SQL
from capsem.store.schema import open_session_db

# the shell and write tools as Claude Code declares them (draft 2020-12, additionalProperties false)
BASH = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "additionalProperties": False,
        "properties": {"command": {"type": "string"}, "timeout": {"type": "number"},
                       "description": {"type": "string"}, "run_in_background": {"type": "boolean"}},
        "required": ["command"]}  # fmt: skip
WRITE = {"type": "object", "additionalProperties": False, "required": ["file_path", "content"],
         "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}}}  # fmt: skip
AGENT_TOOL = {"type": "object", "required": ["description", "prompt", "subagent_type"],
              "properties": {"description": {"type": "string"}, "prompt": {"type": "string"},
                             "subagent_type": {"type": "string", "enum": ["general-purpose", "Explore"]},
                             "model": {"type": "string", "enum": ["sonnet", "opus", "haiku"]}}}  # fmt: skip
# tools in request order: the shell tool is not first, as in the real CLIs
TOOLS = [("Agent", AGENT_TOOL), ("Bash", BASH), ("Write", WRITE)]
ASK = "Create a file that says hello"


@pytest.fixture(scope="module")
def agent_emu():
    with Emulator(defaults={"scenario": "agent"}) as emu:
        yield emu


def post(
    emu: Emulator, path: str, body: dict[str, Any], host: str = "api.example.com", **kw
) -> httpx.Response:
    return httpx.post(emu.http_url + path, json=body, headers={"host": host}, timeout=10, **kw)


# --- one adapter per API: a request with tools, the tool call it got, the request with the result ----


class Anthropic:
    path = "/v1/messages"

    def first(self, tools, **extra):
        return {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": ASK}],
                "tools": [{"name": n, "description": n, "input_schema": s} for n, s in tools], **extra}  # fmt: skip

    def call(self, answer):
        (use,) = [b for b in answer["content"] if b["type"] == "tool_use"]
        return use["id"], use["name"], use["input"]

    def text(self, answer):
        assert not [b for b in answer["content"] if b["type"] == "tool_use"]
        return "".join(b.get("text", "") for b in answer["content"])

    def second(self, req, answer, call_id, output):
        result = {"type": "tool_result", "tool_use_id": call_id, "content": output}
        messages = [*req["messages"], {"role": "assistant", "content": answer["content"]},
                    {"role": "user", "content": [result]}]  # fmt: skip
        return {**req, "messages": messages}

    def model(self, answer):
        return answer["model"]


class Chat:
    path = "/v1/chat/completions"

    def first(self, tools, **extra):
        return {"model": "gpt-4.1", "messages": [{"role": "user", "content": ASK}],
                "tools": [{"type": "function", "function": {"name": n, "parameters": s}} for n, s in tools],
                **extra}  # fmt: skip

    def call(self, answer):
        (tc,) = answer["choices"][0]["message"]["tool_calls"]
        return tc["id"], tc["function"]["name"], json.loads(tc["function"]["arguments"])

    def text(self, answer):
        message = answer["choices"][0]["message"]
        assert not message.get("tool_calls")
        return message["content"]

    def second(self, req, answer, call_id, output):
        message = answer["choices"][0]["message"]
        tool = {"role": "tool", "tool_call_id": call_id, "content": output}
        return {**req, "messages": [*req["messages"], message, tool]}

    def model(self, answer):
        return answer["model"]


class Responses:
    path = "/v1/responses"

    def first(self, tools, **extra):
        return {"model": "gpt-5", "input": [{"role": "user", "content": ASK}],
                "tools": [{"type": "function", "name": n, "parameters": s} for n, s in tools], **extra}  # fmt: skip

    def _calls(self, answer):
        return [o for o in answer["output"] if o["type"] in ("function_call", "custom_tool_call")]

    def call(self, answer):
        (fc,) = self._calls(answer)
        args = fc["input"] if fc["type"] == "custom_tool_call" else json.loads(fc["arguments"])
        return fc["call_id"], fc["name"], args

    def text(self, answer):
        assert not self._calls(answer)
        return "".join(c["text"] for o in answer["output"] if o["type"] == "message" for c in o["content"])

    def second(self, req, answer, call_id, output):
        kind = "custom_tool_call_output" if self._calls(answer)[0]["type"] == "custom_tool_call" else (
            "function_call_output")  # fmt: skip
        return {
            **req,
            "input": [*req["input"], *answer["output"], {"type": kind, "call_id": call_id, "output": output}],
        }

    def model(self, answer):
        return answer["model"]


class Gemini:
    path = "/v1beta/models/gemini-2.5-flash:generateContent"

    def first(self, tools, **extra):
        decls = [{"name": n, "parametersJsonSchema": s} for n, s in tools]
        return {"contents": [{"role": "user", "parts": [{"text": ASK}]}],
                "tools": [{"functionDeclarations": decls}], **extra}  # fmt: skip

    def _parts(self, answer):
        return answer["candidates"][0]["content"]["parts"]

    def call(self, answer):
        (fc,) = [p["functionCall"] for p in self._parts(answer) if "functionCall" in p]
        return fc.get("id"), fc["name"], fc["args"]

    def text(self, answer):
        assert not [p for p in self._parts(answer) if "functionCall" in p]
        return "".join(p.get("text", "") for p in self._parts(answer) if not p.get("thought"))

    def second(self, req, answer, call_id, output):
        (fc,) = [p["functionCall"] for p in self._parts(answer) if "functionCall" in p]
        reply = {"functionResponse": {"id": call_id, "name": fc["name"], "response": {"output": output}}}
        contents = [*req["contents"], {"role": "model", "parts": self._parts(answer)},
                    {"role": "user", "parts": [reply]}]  # fmt: skip
        return {**req, "contents": contents}

    def model(self, answer):
        return answer["modelVersion"]


APIS = {"anthropic": Anthropic(), "openai_chat": Chat(), "responses": Responses(), "gemini": Gemini()}


@pytest.mark.parametrize("api", APIS)
def test_each_api_calls_the_agents_shell_tool_then_answers_once_the_result_is_in(agent_emu, api):
    a = APIS[api]
    req = a.first(TOOLS)
    first = post(agent_emu, a.path, req)
    assert first.status_code == 200, first.text
    call_id, name, args = a.call(first.json())
    assert name == "Bash"  # the shell tool, not the first declared one
    jsonschema.validate(args, BASH)
    assert args["command"] == COMMAND and "echo" in COMMAND and FILE in COMMAND
    second = post(agent_emu, a.path, a.second(req, first.json(), call_id, GREETING + "\n"))
    text = a.text(second.json())
    assert GREETING in text and FILE in text  # a final text that says what the tool did


@pytest.mark.parametrize("api", APIS)
def test_the_same_prompt_gets_the_same_answer_whatever_else_changes_and_the_model_is_echoed(agent_emu, api):
    """As seen: two identical Claude Code runs differed (fuzz seeded by the whole body, which carries
    per-run session ids). Ids, arguments and text depend on the prompt only."""
    a = APIS[api]
    answers = []
    for session in ("0001", "0002"):
        req = a.first(TOOLS, metadata={"user_id": f"session-{session}"})
        answers.append(post(agent_emu, a.path, req).json())
    assert a.call(answers[0]) == a.call(answers[1])
    assert a.model(answers[0]) == a.model(answers[1]) == (
        {"anthropic": "claude-sonnet-4-5", "openai_chat": "gpt-4.1", "responses": "gpt-5", "gemini": "gemini-2.5-flash"}[api]
    )  # fmt: skip
    other = post(agent_emu, a.path, a.first(TOOLS[1:2]) | {"metadata": {"user_id": "x"}}).json()
    assert a.call(other)[0] != a.call(answers[0])[0]  # another prompt, another call id


def test_a_write_tool_when_there_is_no_shell_and_a_schema_valid_call_of_any_other_tool(agent_emu):
    a = APIS["anthropic"]
    _, name, args = a.call(post(agent_emu, a.path, a.first([TOOLS[0], TOOLS[2]])).json())
    assert name == "Write" and args == {"file_path": FILE, "content": GREETING + "\n"}
    jsonschema.validate(args, WRITE)
    _, name, args = a.call(post(agent_emu, a.path, a.first([TOOLS[0]])).json())
    assert name == "Agent" and args["subagent_type"] == "general-purpose"  # an enum value, not fuzz
    jsonschema.validate(args, AGENT_TOOL)


def test_responses_custom_tools_get_their_freeform_input_over_http_and_websocket(agent_emu):
    """Codex CLI declares `apply_patch` as a custom (freeform) tool, or in code mode one custom
    `exec` tool (JavaScript calling nested tools), inside an `additional_tools` input item."""
    a = APIS["responses"]
    patch = {
        "type": "custom",
        "name": "apply_patch",
        "description": "edit files",
        "format": {"type": "grammar"},
    }
    req = {"model": "gpt-5", "input": [{"role": "user", "content": ASK}], "tools": [patch]}
    _, name, text = a.call(post(agent_emu, a.path, req).json())
    assert (name, text) == ("apply_patch", PATCH)
    code = {
        "type": "custom",
        "name": "exec",
        "description": "Run JavaScript: `await tools.exec_command(...)`.",
    }
    nested = {"type": "additional_tools", "role": "developer",
              "tools": [{"type": "namespace", "name": "functions", "tools": [code]}]}  # fmt: skip
    create = {"type": "response.create", "model": "gpt-5", "stream": True, "input": [nested, *req["input"]]}
    with ws_connect(agent_emu.http_url.replace("http", "ws") + "/v1/responses") as ws:
        ws.send(json.dumps(create))
        events = []
        while not events or events[-1]["type"] != "response.completed":
            events.append(json.loads(ws.recv(timeout=10)))
        (done,) = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
        assert done["input"] == CODE_MODE and "tools.exec_command" in CODE_MODE
        (item,) = [o for o in events[-1]["response"]["output"] if o["type"] == "custom_tool_call"]
        assert item["name"] == "exec" and item["input"] == CODE_MODE
        result = {
            "type": "custom_tool_call_output",
            "call_id": item["call_id"],
            "output": "Output: " + GREETING,
        }
        ws.send(json.dumps({**create, "input": [*create["input"], item, result]}))
        events = []
        while not events or events[-1]["type"] != "response.completed":
            events.append(json.loads(ws.recv(timeout=10)))
    output = events[-1]["response"]["output"]
    assert not [o for o in output if o["type"].endswith("call")]
    assert GREETING in "".join(c["text"] for o in output if o["type"] == "message" for c in o["content"])


def test_a_warm_up_request_generates_nothing(agent_emu):
    """Codex CLI's prewarm (`generate: false`) must not get a tool call it would never run."""
    a = APIS["responses"]
    answer = post(agent_emu, a.path, a.first(TOOLS, generate=False)).json()
    assert answer["status"] == "completed"
    assert not [o for o in answer["output"] if o["type"] in ("message", "function_call")]


# --- JSON when asked ---------------------------------------------------------------------------

CLASSIFIER = {"type": "OBJECT", "required": ["complexity_reasoning", "complexity_score"],
              "properties": {"complexity_reasoning": {"type": "STRING"},
                             "complexity_score": {"type": "INTEGER", "minimum": 1, "maximum": 100}}}  # fmt: skip
NEXT_SPEAKER = {"type": "object", "required": ["reasoning", "next_speaker"],
                "properties": {"reasoning": {"type": "string"},
                               "next_speaker": {"type": "string", "enum": ["user", "model"]}}}  # fmt: skip


def _lower(schema: Any) -> Any:
    """Gemini's upper-case types as JSON Schema's, to validate with jsonschema."""
    if isinstance(schema, dict):
        return {
            k: (v.lower() if k == "type" and isinstance(v, str) else _lower(v)) for k, v in schema.items()
        }
    return schema


@pytest.mark.parametrize("scenario", ["agent", "auto"])
def test_json_is_answered_where_json_is_asked_in_every_api(agent_emu, emu, scenario):
    """As seen: Gemini CLI's routing classifier got prose, retried for a minute and printed two stack
    traces. Both the agent scenario and the default (fuzz) one answer JSON matching the schema."""
    server = agent_emu if scenario == "agent" else emu
    contents = [{"role": "user", "parts": [{"text": "route this"}]}]
    for config, schema in [({"responseMimeType": "application/json", "responseJsonSchema": CLASSIFIER}, CLASSIFIER),
                           ({"responseMimeType": "application/json", "responseSchema": NEXT_SPEAKER}, NEXT_SPEAKER),
                           ({"responseMimeType": "application/json"}, {"type": "object"})]:  # fmt: skip
        answer = post(server, APIS["gemini"].path, {"contents": contents, "generationConfig": config}).json()
        got = json.loads(APIS["gemini"].text(answer))
        jsonschema.validate(got, _lower(schema))
        assert got.get("next_speaker", "user") == "user"  # the first enum value: the agent's turn ends
    chat = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": NEXT_SPEAKER}}}  # fmt: skip
    jsonschema.validate(
        json.loads(APIS["openai_chat"].text(post(server, Chat.path, chat).json())), NEXT_SPEAKER
    )
    resp = {"model": "gpt-5", "input": "hi", "text": {"format": {"type": "json_schema", "name": "n",
                                                                  "schema": NEXT_SPEAKER}}}  # fmt: skip
    jsonschema.validate(
        json.loads(APIS["responses"].text(post(server, Responses.path, resp).json())), NEXT_SPEAKER
    )
    claude = {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}],
              "output_format": {"type": "json_schema", "schema": NEXT_SPEAKER}}  # fmt: skip
    jsonschema.validate(
        json.loads(APIS["anthropic"].text(post(server, Anthropic.path, claude).json())), NEXT_SPEAKER
    )


@pytest.mark.parametrize("scenario", ["agent", "auto"])
def test_a_forced_tool_is_the_tool_called_and_none_means_text(agent_emu, emu, scenario):
    server = agent_emu if scenario == "agent" else emu
    a, c = APIS["anthropic"], APIS["openai_chat"]
    forced = a.first(TOOLS, tool_choice={"type": "tool", "name": "Write"})
    assert a.call(post(server, a.path, forced).json())[1] == "Write"
    forced = c.first(TOOLS, tool_choice={"type": "function", "function": {"name": "Agent"}})
    assert c.call(post(server, c.path, forced).json())[1] == "Agent"
    assert c.text(post(server, c.path, c.first(TOOLS, tool_choice="none")).json())
    g = APIS["gemini"]
    config = {"toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["Write"]}}}
    assert g.call(post(server, g.path, g.first(TOOLS, **config)).json())[1] == "Write"


def test_schema_values_follow_refs_unions_bounds_and_gemini_types():
    schemas = [
        {"type": "object", "$defs": {"Mode": {"type": "string", "enum": ["fast", "slow"]}},
         "properties": {"mode": {"$ref": "#/$defs/Mode"}, "n": {"type": "integer", "minimum": 5, "maximum": 9},
                        "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5},
                        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                        "maybe": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
                        "name": {"type": ["null", "string"], "minLength": 20, "maxLength": 30},
                        "kind": {"const": "x"}}},
        {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                   {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]},
        _lower(CLASSIFIER),
    ]  # fmt: skip
    for schema in schemas:
        jsonschema.validate(value(schema, root=schema), schema)
    assert value(CLASSIFIER, root=CLASSIFIER) == {"complexity_reasoning": GREETING, "complexity_score": 1}
    assert value(schemas[1], root=schemas[1]) == {"a": GREETING, "b": 1}


# --- point 5: the agents' housekeeping ---------------------------------------------------------------


def test_the_agents_housekeeping_gets_the_real_services_answers(emu):
    """As seen: Claude Code's settings and telemetry endpoints and Gemini CLI's Clearcut log got 404s,
    counted as the agent's errors (and Gemini re-sent its log 9 times)."""
    claude = [("GET", "/api/claude_code/settings", 204), ("GET", "/api/claude_code/policy_limits", 200),
              ("POST", "/api/eval/sdk-abc", 200), ("GET", "/api/claude_cli/bootstrap", 200),
              ("GET", "/api/directory/server-urls", 200), ("POST", "/api/event_logging/v2/batch", 200),
              ("GET", "/api/claude_code/organizations/metrics_enabled", 200)]  # fmt: skip
    for method, path, status in claude:
        got = httpx.request(
            method, emu.http_url + path, headers={"host": "api.anthropic.com"}, json={}, timeout=10
        )
        assert got.status_code == status, (path, got.text)
    assert httpx.get(
        emu.http_url + "/api/directory/server-urls", headers={"host": "api.anthropic.com"}
    ).json() == {"urls": []}
    log = httpx.post(emu.http_url + "/log?format=json", headers={"host": "play.googleapis.com"}, json=[{}])
    assert log.status_code == 200 and int(log.json()[0]) <= 0  # Clearcut: next_request_wait_millis
    otlp = httpx.post(emu.http_url + "/otlp/v1/metrics", headers={"host": "ab.chatgpt.com",
                      "content-type": "application/x-protobuf"}, content=b"\x0a\x00")  # fmt: skip
    assert otlp.status_code == 200 and otlp.content == b""


def test_hosts_the_emulator_does_not_play_get_a_marked_404_and_model_apis_their_own(emu):
    repo = httpx.get(emu.http_url + "/openai/plugins.git/info/refs", headers={"host": "github.com"})
    assert repo.status_code == 404 and repo.headers["server"] == NOT_EMULATED_SERVER
    assert repo.json()["error"]["type"] == "not_emulated" and "github.com" in repo.json()["error"]["message"]
    api = httpx.get(emu.http_url + "/v1/nothing-here", headers={"host": "api.anthropic.com"})
    assert api.status_code == 404 and api.headers["server"] == "capsem-emulator"  # an API's 404: an error


def test_what_the_emulator_does_not_play_is_not_counted_as_an_error(tmp_path: Path):
    conn = open_session_db(tmp_path / "session.db")
    conn.execute(
        "INSERT INTO session_meta (key, value) VALUES ('emulated', 'true')"
    )  # as the recorder marks it
    for domain, server in [("github.com", NOT_EMULATED_SERVER), ("api.anthropic.com", "capsem-emulator"),
                           ("example.com", "nginx")]:  # fmt: skip
        conn.execute(
            "INSERT INTO net_events (timestamp, domain, port, method, path, status_code, decision, response_headers)"
            " VALUES ('2025-01-01T00:00:00Z', ?, 443, 'GET', '/x', 404, 'allowed', ?)",
            (domain, json.dumps({"server": server})),
        )
    conn.execute(
        "INSERT INTO net_events (timestamp, domain, decision, response_headers) VALUES ('t', 'a', 'error', 'not json')"
    )
    conn.commit()
    wheres = [f.where for f in failures(conn)]  # an unreadable header column is no reason to skip a row
    assert wheres == ["GET api.anthropic.com:443/x HTTP 404", "GET example.com:443/x HTTP 404", "None a:443"]
    assert [f.where for f in not_emulated(conn)] == ["GET github.com:443/x HTTP 404"]
    assert conn.execute(f"SELECT {ERRORS_SQL}").fetchone()[0] == 3
    conn.close()
    console = Console(width=100, record=True)
    console.print(render_session(session_summary("20250101-000000-abcd", tmp_path / "session.db"), 100))
    shown = " ".join(console.export_text().split())
    assert "· 3 errors · 1 request not emulated" in shown
    assert "Not emulated (not errors; nothing left the machine): GET github.com:443/x HTTP 404" in shown
    assert "Errors (3)" in shown


@pytest.mark.parametrize("marked", [None, "false"])
def test_the_not_emulated_header_of_a_session_not_emulated_is_an_error(tmp_path: Path, marked: str | None):
    """Outside a session answered by the emulator or a replay (an older session.db, or a real
    upstream), `server: not-emulated (capsem)` is a header any server could send: no proof that
    nothing left the machine, and the request's 404 is an error like any other."""
    conn = open_session_db(tmp_path / "session.db")
    if marked is not None:
        conn.execute("INSERT INTO session_meta (key, value) VALUES ('emulated', ?)", (marked,))
    conn.execute(
        "INSERT INTO net_events (timestamp, domain, port, method, path, status_code, decision, response_headers)"
        " VALUES ('2025-01-01T00:00:00Z', 'github.com', 443, 'GET', '/x', 404, 'allowed', ?)",
        (json.dumps({"server": NOT_EMULATED_SERVER}),),
    )
    conn.commit()
    assert [f.where for f in failures(conn)] == ["GET github.com:443/x HTTP 404"] and not not_emulated(conn)
    assert conn.execute(f"SELECT {ERRORS_SQL}").fetchone()[0] == 1
    conn.close()
    console = Console(width=100, record=True)
    console.print(render_session(session_summary("20250101-000000-abcd", tmp_path / "session.db"), 100))
    shown = " ".join(console.export_text().split())
    assert "· 1 error" in shown and "not emulated" not in shown.lower()
