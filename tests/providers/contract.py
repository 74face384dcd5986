"""What every provider parser promises, stated once (`test_contract.py` runs it for each): its
recorded streams parse to the expected summary however the bytes are split and compressed, its
whole bodies too, a stream and the same answer whole agree, and random bytes after a real stream
never raise, with the parser's guards off (a bug the guard would hide fails). Each provider's test
module declares its `CONTRACT`: the parser, its fixtures and the expected summaries."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

from addons.body import ResponseReader
from addons.framing import SSEDecoder, SSEEvent
from addons.providers.base import GuardedParser
from addons.providers.collect import Stream
from addons.records import ResponseSummary

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@dataclass(frozen=True)
class Contract:
    """One provider's part: its parser, fixture folder and expected summaries by fixture name."""

    parser: GuardedParser
    folder: str
    streams: dict[str, ResponseSummary]
    bodies: dict[str, ResponseSummary]
    pairs: list[tuple[str, str]] = field(default_factory=list)
    """(stream fixture, body fixture) pairs holding the same answer."""
    fuzz_prefix: str = ""
    """A stream fixture whose start the fuzz test puts before its random bytes."""

    def fixture(self, name: str) -> bytes:
        return (FIXTURES / self.folder / name).read_bytes()

    def read(self, chunks: list[bytes], *, framing: str | None = "sse", encoding: str | None = None,
             guarded: bool = True) -> ResponseSummary:  # fmt: skip
        """The summary capture's `ResponseReader` makes of these chunks."""
        with nullcontext() if guarded else unguarded():
            reader = ResponseReader(self.parser, framing=framing, content_encoding=encoding, status=200)
            for chunk in chunks:
                reader.feed(chunk)
            return reader.finish()


@contextmanager
def unguarded() -> Iterator[None]:
    """The parsers without the guards around their entry points, which turn a bug into a counted
    parse error: under test, a bug the guard would hide fails."""
    with (
        mock.patch.object(Stream, "event", Stream.read),
        mock.patch.object(Stream, "feed", lambda self, evs: [self.read(ev) for ev in evs]),
        mock.patch.object(GuardedParser, "parse_request", lambda self, body: self.request_fn(body)),
        mock.patch.object(GuardedParser, "parse_response", GuardedParser.read_response),
    ):
        yield


def run_events(parser: GuardedParser, events: list[SSEEvent]) -> ResponseSummary:
    """A parser's summary of framed events, through its (guarded) stream."""
    interp = parser.stream()
    for ev in events:
        interp.event(ev)
    return interp.finish()


def decode(chunks: list[bytes]) -> list[SSEEvent]:
    """`chunks` framed by capture's SSE decoder."""
    decoder = SSEDecoder()
    events = [ev for chunk in chunks for ev in decoder.feed(chunk)]
    return events + decoder.flush()


def same_answer(a: ResponseSummary, b: ResponseSummary) -> tuple:
    """What a stream and the same answer whole must share (ids and raw chunks may differ)."""
    calls = [(c.index, c.call_id, c.name, json.loads(c.arguments or "{}"), c.complete) for c in a.tool_calls]
    other = [(c.index, c.call_id, c.name, json.loads(c.arguments or "{}"), c.complete) for c in b.tool_calls]
    return (a.text, a.thinking, a.stop_reason, a.usage, calls), (
        b.text,
        b.thinking,
        b.stop_reason,
        b.usage,
        other,
    )


def split_everywhere(contract: Contract, name: str) -> None:
    body = contract.fixture(name)
    expected = contract.streams[name]
    assert contract.read([body]) == expected
    for cut in range(1, len(body)):
        assert contract.read([body[:cut], body[cut:]]) == expected, cut
    assert contract.read([body[i : i + 1] for i in range(len(body))]) == expected
    assert contract.read([gzip.compress(body)], encoding="gzip") == expected
