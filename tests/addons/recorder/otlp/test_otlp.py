"""OTLP export in-process: spans built from a session.db the recorder wrote (a main agent, its
subagent, a tool loop), sent by the SDK's real OTLP/HTTP exporter to a real HTTP receiver on
loopback that decodes the protobuf; the watermark, failures, and the live thread. The end-to-end
test against Phoenix is tests/e2e/test_otlp.py."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from addons.recorder.otlp.live import LiveExport
from addons.recorder.otlp.read import Mark, step
from addons.recorder.otlp.send import Target, export_session, exporter, read_mark, traces_url
from addons.recorder.otlp.spans import Builder, Options
from capsem import settings
from capsem.store.schema import connect, open_main_db
from tests.addons.recorder.test_traces import PROMPT, TASK, reply, result, send
from tests.recording import RecorderHarness

SID = "20261123-120000-abcd"


class Receiver:
    """An OTLP/HTTP traces endpoint: records each request's spans; answers `status`."""

    def __init__(self) -> None:
        self.requests: list[list[dict]] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                if receiver.status == 200:
                    request = ExportTraceServiceRequest.FromString(body)
                    receiver.requests.append([
                        {"name": s.name, "span_id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                         "trace_id": s.trace_id.hex(), "attributes": {a.key: a.value for a in s.attributes},
                         "headers": dict(self.headers)}
                        for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans
                    ])  # fmt: skip
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def spans(self) -> list[dict]:
        return [s for request in self.requests for s in request]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture
def session(tmp_path: Path) -> Path:
    """A main agent starts a subagent (Task), the subagent runs a tool, the main agent gets the
    Task's result, then a new user input (tests/addons/recorder/test_traces.py's session)."""
    rec = RecorderHarness(tmp_path)
    main = [{"role": "user", "content": "Refactor parse()."}]
    send(rec, 0, "main agent", main, reply([TASK], "tool_use"))
    sub = [{"role": "user", "content": PROMPT}]
    use = {"type": "tool_use", "id": "toolu_grep", "name": "Grep", "input": {"pattern": "parse("}}
    send(rec, 1, "subagent", sub, reply([use], "tool_use"))
    sub += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result("toolu_grep")]}]
    send(rec, 2, "subagent", sub, reply([{"type": "text", "text": "a.py:3"}]))
    main += [{"role": "assistant", "content": [TASK]}, {"role": "user", "content": [result("toolu_task")]}]
    send(rec, 3, "main agent", main, reply([{"type": "text", "text": "done"}]))
    main += [{"role": "assistant", "content": [{"type": "text", "text": "done"}]},
             {"role": "user", "content": "Now add a test."}]  # fmt: skip
    send(rec, 4, "main agent", main, reply([{"type": "text", "text": "ok"}]))
    rec.shutdown()
    return rec.db


def build(db: Path, options: Options = Options(), session_id: str = SID) -> list:  # noqa: B008
    conn = connect(db, readonly=True)
    todo = step(conn, session_id, Mark(), finished=True, content=options.content)
    conn.close()
    assert todo is not None and todo.mark.done
    return Builder(session_id, options).spans(todo.rows)


def test_spans_form_a_tree_per_turn_with_the_subagent_under_its_task(session):
    spans = build(session)
    names = sorted(s.name for s in spans)
    assert (
        names
        == ["chat claude-sonnet-4-5"] * 5 + ["execute_tool Grep", "execute_tool Task"] + ["invoke_agent"] * 2
    )
    by_name = {s.name: s for s in spans}
    task, grep = by_name["execute_tool Task"], by_name["execute_tool Grep"]
    turns = [s for s in spans if s.name == "invoke_agent"]
    chats = sorted(
        (s for s in spans if s.name.startswith("chat ")), key=lambda s: s.attributes["capsem.model_call.id"]
    )
    first_turn = next(t for t in turns if t.context.span_id == chats[0].parent.span_id)
    assert [c.parent.span_id for c in chats[:4]] == [first_turn.context.span_id, task.context.span_id,
                                                    task.context.span_id, first_turn.context.span_id]  # fmt: skip
    assert task.parent.span_id == first_turn.context.span_id and grep.parent.span_id == task.context.span_id
    assert (
        chats[4].parent.span_id != first_turn.context.span_id
        and chats[4].context.trace_id != task.context.trace_id
    )
    # inferred from the calls: from the end of the one that asked to the start of the one that answered
    # (the harness's calls are 20 ms long and may overlap: an end before the start is clamped)
    assert task.start_time == chats[0].end_time and task.end_time == max(task.start_time, chats[3].start_time)
    assert all(s.attributes["gen_ai.conversation.id"] == SID for s in spans)


def test_ids_derive_from_capsem_ids_and_names_follow_the_profile(session):
    once, again = build(session), build(session)
    assert [(s.context.trace_id, s.context.span_id) for s in once] == [
        (s.context.trace_id, s.context.span_id) for s in again
    ]
    other = build(session, session_id="another-session")
    assert not {s.context.span_id for s in once} & {s.context.span_id for s in other}
    latest = {k for s in once for k in s.attributes}
    assert "gen_ai.usage.input_tokens" in latest
    assert not {k for k in latest if k.startswith(("llm.", "gen_ai.system", "openinference.", "session.id"))}
    assert not {k for k in latest if "messages" in k or k.endswith(("arguments", "result", "instructions"))}
    compat = build(session, Options(profile="compat"))
    chat = next(s for s in compat if s.name.startswith("chat "))
    assert chat.attributes["gen_ai.usage.prompt_tokens"] == chat.attributes["llm.token_count.prompt"] == 50
    assert chat.attributes["session.id"] == SID and chat.attributes["openinference.span.kind"] == "LLM"
    content = build(session, Options(content=True))
    first = next(s for s in content if s.attributes.get("capsem.model_call.id") == 1)
    assert "Refactor parse()." in first.attributes["gen_ai.input.messages"]
    assert '"tool_call"' in first.attributes["gen_ai.output.messages"]
    assert first.attributes["gen_ai.system_instructions"] == '["main agent"]'


def test_watermark_sends_each_span_once_across_failures(session, receiver, tmp_path, caplog):
    main = open_main_db(tmp_path / "main.db")
    conn = connect(session, readonly=True)
    target = Target(receiver.url, {"authorization": "Bearer t0ken"})
    send = exporter(target, 0.5)
    receiver.status = 503  # the backend refuses: nothing moves
    with caplog.at_level(logging.ERROR):
        sent = export_session(conn, main, SID, target, send, finished=False)
    assert (sent.failed, sent.spans, read_mark(main, SID, receiver.url)) == (True, 0, Mark())
    assert not caplog.records  # the SDK's error lines are silenced: callers count failures
    receiver.status = 200
    sent = export_session(conn, main, SID, target, send, finished=False)  # live: the turns wait
    assert (sent.failed, sent.done, sent.spans) == (False, False, 7)
    sent = export_session(conn, main, SID, target, send, finished=True)  # the session ended
    assert (sent.spans, sent.done) == (2, True)
    assert export_session(conn, main, SID, target, send, finished=True).spans == 0
    ids = [s["span_id"] for s in receiver.spans]
    assert len(ids) == len(set(ids)) == 9 == read_mark(main, SID, receiver.url).spans
    assert receiver.spans[0]["headers"]["authorization"] == "Bearer t0ken"
    assert traces_url(receiver.url) == receiver.url + "/v1/traces" == traces_url(receiver.url + "/v1/traces")


def test_small_steps_cover_the_session_exactly(session):
    conn = connect(session, readonly=True)
    whole = {s.context.span_id for s in build(session)}
    mark, seen = Mark(), []
    while (todo := step(conn, SID, mark, finished=True, limit=1)) is not None:
        seen += [s.context.span_id for s in Builder(SID, Options()).spans(todo.rows)]
        mark = todo.mark
    assert mark.done and sorted(seen) == sorted(whole)


def test_live_export_sends_on_wake_and_leaves_the_rest_when_the_backend_is_down(session, receiver, tmp_path):
    live = LiveExport(Target(receiver.url), SID, session, tmp_path / "main.db").start()
    live.wake()
    live.close(timeout=10)
    assert live.done and len(receiver.spans) == 9 and live.sent == 9
    receiver.server.shutdown()
    receiver.server.server_close()
    again = LiveExport(Target(receiver.url, options=Options(profile="compat")), "other", session,
                       tmp_path / "main.db").start()  # fmt: skip
    for _ in range(100):  # wake-ups never block nor pile up
        again.wake()
    assert again.wakes.qsize() <= 1
    again.close(timeout=0.3)
    assert not again.done and again.sent == 0


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"otlp": {"endpoint": "localhost:4318"}}, "export.otlp.endpoint must be an http:// or https:// URL"),
        ({"otlp": {"profile": "old"}}, "export.otlp.profile must be one of latest, compat, got 'old'"),
        ({"otlp": {"headers": ["x"]}}, "export.otlp.headers must be a mapping of header names to values"),
        ({"otlp": {"contents": True}}, "export.otlp.contents is not a setting (did you mean content?)"),
    ],
)
def test_export_settings_refuse_bad_values_in_one_line(data, error):
    with pytest.raises(settings.SettingsError, match=None) as refused:
        settings.parse({"export": data}, "config.yaml")
    assert str(refused.value).startswith(f"config.yaml: {error}")
