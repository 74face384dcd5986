"""Driving the recorder without mitmproxy: message builders and a recorder on a temporary session.db."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from addons.messages import Chunk, FlowEnded, Message, RequestHead, ResponseHead, Route, StreamOpened
from addons.recorder.recorder import Recorder
from addons.spec import RecorderSpec, spec_of
from capsem.redact import Scrubber
from capsem.settings import CaptureSettings, defaults
from capsem.store.writer import SessionWriter
from tests.conftest import rows

if TYPE_CHECKING:
    from addons.proxy.handover import RecorderProcess
    from addons.recorder.thread import RecorderThread


def head(key: str, *, started: float, scheme: str = "https", host: str = "api.anthropic.com", port: int = 443,
         method: str = "POST", path: str = "/v1/messages", query: str = "",
         headers: list[tuple[str, str]] | tuple = (("content-type", "application/json"),),
         conn: str | None = None) -> RequestHead:  # fmt: skip
    return RequestHead(key=key, conn=conn, started=started, scheme=scheme, host=host, port=port, method=method,
                       path=path, query=query, http_version="HTTP/1.1", headers=tuple(headers))  # fmt: skip


def response(status: int = 200, content_type: str | None = "application/json", *, started: float | None = None,
             headers: list[tuple[str, str]] | tuple = ()) -> ResponseHead:  # fmt: skip
    base = (("content-type", content_type),) if content_type else ()
    return ResponseHead(status, (*base, *headers), started)


def ended(request: RequestHead, *, resp: ResponseHead | None = None, body: bytes | None = None,
          request_body: bytes | None = None, at: float | None = None, **fields: Any) -> FlowEnded:  # fmt: skip
    """A `FlowEnded`; `body` is a non-streamed response body (its size is the response size)."""
    fields.setdefault("response_size", len(body or b""))
    return FlowEnded(request=request, ended=at if at is not None else request.started + 0.02, response=resp,
                     response_body=body, request_body=request_body, request_size=len(request_body or b""),
                     **fields)  # fmt: skip


class RecorderHarness:
    """A `Recorder` with its `SessionWriter` on `tmp_path/session.db`; `rows()` commits and reads."""

    def __init__(self, tmp_path: Path, settings: CaptureSettings | None = None) -> None:
        self.db = tmp_path / "session.db"
        self.writer = SessionWriter(self.db, Scrubber())
        self.recorder = Recorder(self.writer, settings or defaults().capture)

    @property
    def mcp(self):
        return self.recorder.mcp

    def feed(self, *messages: Message) -> None:
        for message in messages:
            self.recorder.handle(message)

    def open(self, request: RequestHead, resp: ResponseHead, route: Route | None, framing: str | None,
             mcp_stream: bool = False) -> None:  # fmt: skip
        self.feed(StreamOpened(request, resp, route, framing, mcp_stream))

    def chunk(self, key: str, at: float, data: bytes) -> None:
        self.feed(Chunk(key, at, data))

    def close(self, flow: FlowEnded) -> None:
        self.feed(flow)

    def rows(self, sql: str, params: tuple = ()) -> list[dict]:
        assert self.writer.commit()
        return rows(self.db, sql, params)

    def shutdown(self) -> None:
        self.recorder.close()
        self.writer.close()


def recorder_spec(session_dir: Path) -> RecorderSpec:
    """The spec of a recorder for `session_dir/session.db` (main.db beside it), as mitmdump makes it."""
    from capsem.ids import new_session_id

    session_dir.mkdir(parents=True, exist_ok=True)
    return spec_of(defaults().capture, session_id=new_session_id(), db_path=str(session_dir / "session.db"),
                   main_db_path=str(session_dir / "main.db"), mode="run")  # fmt: skip


@contextmanager
def recorder_thread(session_dir: Path) -> Iterator[RecorderThread]:
    """The recorder's own loop on a thread of this process, on `session_dir/session.db`; stopped on exit."""
    from addons.proxy.outbox import Outbox
    from addons.recorder.thread import RecorderThread

    recorder = RecorderThread(Outbox(), recorder_spec(session_dir))
    recorder.start()
    try:
        yield recorder
    finally:
        assert recorder.stop() is None


@contextmanager
def recorder_process(session_dir: Path) -> Iterator[RecorderProcess]:
    """The recorder process as mitmdump runs it (restarted when it dies), on `session_dir/session.db`."""
    import msgspec

    from addons.proxy.handover import RecorderProcess
    from addons.proxy.outbox import Outbox

    recorder = RecorderProcess(Outbox(), msgspec.json.encode(recorder_spec(session_dir)))
    recorder.start()
    assert recorder.ready.wait(30) and recorder.exit_reason is None
    try:
        yield recorder
    finally:
        assert recorder.stop() is None
