"""Issue 35, item 10: `capsem search` showed Gemini hits as raw JSON (`{"role": "user", "parts":
[{"text": …`) where Anthropic and OpenAI hits read as text. One session through real mitmdump with
the real anthropic, openai and google-genai SDKs against the emulator, each sending a message, a
tool call and a tool result with words of their own; every hit reads as the same plain text, at 80
and 160 columns and in `--json`, also when search.db was written by an older capsem."""

from __future__ import annotations

import json
import re
import shutil
import ssl
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import types

from tests.cli.conftest import run
from tests.cli.test_widths import fits
from tests.shared_proxy import recorded_home

TOOL = {"name": "lookup", "description": "Look a word up",
        "schema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}  # fmt: skip
WORDS = {"anthropic": ("quokkaprompt", "quokkaresult"), "openai": ("wombatprompt", "wombatresult"),
         "gemini": ("numbatprompt", "numbatresult")}  # fmt: skip
"""Per provider: a word of its user message, a word of its tool result."""


def _anthropic(http: httpx.Client, prompt: str, result: str) -> None:
    client = anthropic.Anthropic(api_key="sk-ant-search-00000000000000", http_client=http, max_retries=0)
    tools = [{"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["schema"]}]
    messages: list = [{"role": "user", "content": f"Please find {prompt} for me"}]
    first = client.messages.create(model="claude-sonnet-4-5", max_tokens=256, tools=tools, messages=messages,
                                   extra_headers={"x-emulator": "scenario=tool_call"})  # fmt: skip
    (use,) = [b for b in first.content if b.type == "tool_use"]
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": f"found {result} in the notes"}]}]  # fmt: skip
    client.messages.create(model="claude-sonnet-4-5", max_tokens=256, tools=tools, messages=messages)


def _openai(http: httpx.Client, prompt: str, result: str) -> None:
    client = openai.OpenAI(api_key="sk-proj-search0000000000000000", http_client=http, max_retries=0)
    tools = [{"type": "function", "function": {"name": TOOL["name"], "description": TOOL["description"],
                                               "parameters": TOOL["schema"]}}]  # fmt: skip
    messages: list = [{"role": "user", "content": f"Please find {prompt} for me"}]
    first = client.chat.completions.create(model="gpt-4.1", messages=messages, tools=tools,
                                           extra_headers={"x-emulator": "scenario=tool_call"})  # fmt: skip
    answer = first.choices[0].message
    said = {
        "role": "tool",
        "tool_call_id": answer.tool_calls[0].id,
        "content": f"found {result} in the notes",
    }
    messages += [answer.model_dump(exclude_none=True), said]
    client.chat.completions.create(model="gpt-4.1", messages=messages, tools=tools)


def _gemini(proxy_url: str, trust: ssl.SSLContext, prompt: str, result: str) -> None:
    client = genai.Client(api_key="AIzaSySEARCHtestKEY0000000000000000000", http_options=types.HttpOptions(
        client_args={"proxy": proxy_url, "verify": trust}, headers={"x-emulator": "scenario=tool_call"}))  # fmt: skip
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(
        name=TOOL["name"], description=TOOL["description"],
        parameters=types.Schema(type="OBJECT", properties={"word": types.Schema(type="STRING")},
                                required=["word"]))])  # fmt: skip
    config = types.GenerateContentConfig(tools=[tool])
    contents = [types.Content(role="user", parts=[types.Part(text=f"Please find {prompt} for me")])]
    first = client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)
    call = first.candidates[0].content.parts[-1].function_call
    contents += [first.candidates[0].content, types.Content(role="user", parts=[types.Part(
        function_response=types.FunctionResponse(id=call.id, name=call.name,
                                                 response={"output": f"found {result} in the notes"}))])]  # fmt: skip
    client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)


def _every_provider(proxy) -> None:
    trust = ssl.create_default_context(cafile=proxy.ca_cert)
    with httpx.Client(proxy=proxy.url, verify=trust, timeout=30) as http:
        _anthropic(http, *WORDS["anthropic"])
        _openai(http, *WORDS["openai"])
    _gemini(proxy.url, trust, *WORDS["gemini"])


@pytest.fixture(scope="module")
def recorded(emulator, tmp_path_factory) -> Path:
    """The session, recorded once for the module: a CAPSEM_HOME to copy."""
    return recorded_home(emulator, tmp_path_factory.mktemp("search"), _every_provider)


@pytest.fixture
def searched(recorded, capsem_home) -> Path:
    shutil.copytree(recorded, capsem_home)  # each test's own copy: one rewrites search.db
    return capsem_home


@pytest.mark.parametrize("width", ("80", "160"))
def test_every_providers_hits_read_as_text(searched, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", width)
    for provider, (prompt, result) in WORDS.items():
        said = {}
        for word in (prompt, result):
            hits = json.loads(run("search", word, "--json"))  # the message or tool result, and the answer
            (hit,) = [h for h in hits if h["kind"] in ("message", "tool result")]
            said[word] = hit["snippet"]
            out = run("search", word)
            fits(out, int(width))
            assert not re.search(r'[{}\[\]]|"(?:parts|text|role|output)"', out), (provider, out)
        assert said[prompt] == f"Please find «{prompt}» for me", (provider, said)
        assert said[result] == f"found «{result}» in the notes", (provider, said)


def test_an_index_written_before_is_rebuilt(searched):
    """search.db indexed Gemini items as JSON: an index of another version is indexed again."""
    from capsem.store.schema import connect

    prompt = WORDS["gemini"][0]
    run("search", prompt)
    index = connect(searched / "search.db")
    with index:
        index.execute("""UPDATE docs SET text = '{"role": "user", "parts": [{"text": "' || text || '"}]}'""")
    index.execute("PRAGMA user_version = 0")
    index.close()
    (hit,) = [h for h in json.loads(run("search", prompt, "--json")) if h["kind"] == "message"]
    assert hit["snippet"] == f"Please find «{prompt}» for me"
