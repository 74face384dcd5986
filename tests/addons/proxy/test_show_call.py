"""`capsem show-call` and inspect-session's input summary on a session recorded by the addon in-process."""

from __future__ import annotations

import json

from click.testing import CliRunner
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from addons.proxy.capture import Capsem
from addons.recorder.thread import RecorderThread
from assembler.cli import cli
from tests.addons.proxy.conftest import Chain
from tests.addons.recorder.test_breakdown import SYSTEM, TOOLS, answer

REQUEST = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": SYSTEM, "tools": TOOLS,
           "messages": [{"role": "user", "content": "fix the parser"}]}  # fmt: skip


def record_one_call(reply: bytes) -> None:
    capture = Capsem(recorder=RecorderThread)
    addon = Chain(capture)
    with taddons.context(capture) as tctx:
        tctx.configure(capture)
        addon.running()
        headers = http.Headers(content_type="application/json")
        req = tutils.treq(host="api.anthropic.com", port=443, scheme="https", method=b"POST", path=b"/v1/messages",
                          content=json.dumps(REQUEST).encode(), headers=headers)  # fmt: skip
        resp = tutils.tresp(headers=http.Headers(content_type="application/json"), content=reply)
        flow = tflow.tflow(req=req, resp=resp)
        for hook in (addon.requestheaders, addon.request, addon.responseheaders, addon.response):
            hook(flow)
        addon.done()


def test_show_call_readable_raw_and_errors(capsem_home):
    reply = answer(900, 400, tool=False)
    record_one_call(reply)
    runner = CliRunner()
    raw = runner.invoke(cli, ["show-call", "1", "--response", "--raw"], catch_exceptions=False)
    assert raw.exit_code == 0 and raw.stdout_bytes == reply
    for args in (["--json"], ["--request", "--json"], ["--request"], ["--response", "--json"]):
        shown = runner.invoke(cli, ["show-call", "1", *args], catch_exceptions=False, env={"COLUMNS": "80"})
        document = json.loads(shown.output)  # one JSON document, nothing before or after it
        assert document["call"]["id"] == 1 and document["call"]["model"] == "claude-sonnet-4-5"
        assert ("request" in document) == ("--response" not in args)
        assert ("response" in document) == ("--request" not in args)
    whole = json.loads(runner.invoke(cli, ["show-call", "1", "--json"]).output)
    assert whole["request"]["body"] == REQUEST and whole["request"]["truncated"] is False
    assert whole["response"]["body"] == json.loads(reply) and whole["response"]["size"] == len(reply)
    for columns in ("80", "160"):  # readable: what the call page shows, folded to the terminal
        shown = runner.invoke(cli, ["show-call", "1"], catch_exceptions=False, env={"COLUMNS": columns})
        assert shown.exit_code == 0, shown.output
        lines = shown.output.splitlines()
        assert max(map(len, lines)) <= int(columns), max(lines, key=len)
        assert lines[0].startswith("model call 1 · anthropic claude-sonnet-4-5") and "status 200" in lines[0]
        assert "input tokens by source (estimated, scaled to the reported total):" in lines
        assert any(line.startswith("+ system") for line in lines)  # the first call: everything new
        assert sum(line.startswith("+ tool ") for line in lines) == len(TOOLS)
        assert "+ user" in lines and "    fix the parser" in lines
        assert "answer:" in lines and '"max_tokens": 100' not in shown.output  # no raw JSON by default
    missing = runner.invoke(cli, ["show-call", "99"])
    assert missing.exit_code == 1 and "has no model call 99" in missing.output
    assert runner.invoke(cli, ["show-call", "1", "--raw"]).exit_code == 2  # --raw needs one body
    inspected = runner.invoke(cli, ["inspect-session"], catch_exceptions=False, env={"COLUMNS": "200"})
    assert "of this session's input cost" in inspected.output and "Input by source" in inspected.output


def test_show_call_json_reads_a_stream_as_its_events():
    from assembler.show_call import StoredBody, body_value

    def value(data: bytes, content_type: str | None = None) -> object:
        return body_value(StoredBody("response", data, content_type, False, len(data)))

    sse = b'event: message_start\ndata: {"type":"message_start"}\n\ndata: [DONE]\n\n'
    assert value(sse, "text/event-stream") == [
        {"event": "message_start", "data": {"type": "message_start"}, "id": None},
        {"event": None, "data": "[DONE]", "id": None},
    ]
    assert value(b'{"a":1}\n{"b":2}\n', "application/x-ndjson") == [{"a": 1}, {"b": 2}]
    assert value(b"plain words", "text/plain") == "plain words"
    assert value(b'[{"candidates":[]}]', "application/json") == [{"candidates": []}]
