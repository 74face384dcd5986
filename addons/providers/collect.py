"""The one collector: neutral events in, a `ResponseSummary` out, for every protocol.

`Collector` joins text and thinking parts, assembles tool calls by key, keeps the last usage
report (normalized once, at the end), the stop reason, the first id and model, errors and
the parse-error / unknown-event counters, and decides completeness:

- a stream is complete when a `Done` came and no error did (an error event cuts the answer);
- a whole body (`body=True`) is complete when a `Done` came: an error body is a complete
  answer, and the provider only says `Done` for a body it could read to the end.

`collect(events, rules)` is the pure function over a whole list of events. `Stream` is the
stream interpreter every parser returns: it hands each wire event to the provider's wire
reader (`WireReader`), applies the events it gets, ignores everything after a final `Done`,
and never raises: a failure is a counted parse error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import msgspec

from addons.framing import SSEEvent
from addons.providers._common import load_json
from addons.providers.events import (
    Done,
    Error,
    LlmEvent,
    Meta,
    ParseError,
    Stop,
    SummaryRules,
    TextDelta,
    TextDone,
    ThinkingDelta,
    ThinkingDone,
    ToolCallArguments,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UnknownEvent,
    UsageReport,
)
from addons.records import ResponseSummary, ToolCall, Usage

__all__ = ["Collector", "Stream", "WireReader", "collect"]


class WireReader(Protocol):
    """A provider's reader of one streamed response: wire events in, neutral events out."""

    def events(self, ev: SSEEvent) -> Sequence[LlmEvent]:
        """The neutral events one framed wire event means (may raise: `Stream` guards it)."""

    def end(self) -> Sequence[LlmEvent]:
        """The events the end of the stream means (e.g. which tool calls were whole)."""


class Collector:
    """Builds one `ResponseSummary` from neutral events (see the module doc)."""

    __slots__ = ("_args", "_body", "_calls", "_done", "_finished", "_rules", "_text", "_thinking", "_usage",
                 "closed", "summary")  # fmt: skip

    def __init__(self, rules: SummaryRules, *, body: bool = False) -> None:
        self.summary = ResponseSummary()
        """Live view: `content_started`, errors and counters are up to date after every event."""
        self.closed = False
        """True once a final `Done` came: the response is over."""
        self._rules = rules
        self._body = body
        self._text: dict[Any, list[str]] = {}
        self._thinking: dict[Any, list[str]] = {}
        self._calls: dict[Any, ToolCall] = {}
        self._args: dict[Any, list[str]] = {}
        self._usage: UsageReport | None = None
        self._done = False
        self._finished = False

    def add(self, event: LlmEvent) -> None:
        """Apply one event."""
        _APPLY[type(event)](self, event)

    def add_all(self, events: Iterable[LlmEvent]) -> None:
        apply = _APPLY
        for event in events:
            apply[type(event)](self, event)

    def finish(self) -> ResponseSummary:
        """Join the pieces, name unnamed calls, normalize the usage, decide `complete` (idempotent)."""
        s = self.summary
        if self._finished:
            return s
        self._finished = True
        sep = self._rules.part_sep
        s.text = sep.join("".join(pieces) for pieces in self._text.values())
        s.thinking = sep.join("".join(pieces) for pieces in self._thinking.values())
        for key, call in self._calls.items():
            call.arguments = "".join(self._args[key])
            if not call.call_id:
                call.call_id = f"{self._rules.call_id_prefix}_{call.name}_{call.index}"
        if self._usage is not None:
            raw = self._usage.raw
            if type(raw) is msgspec.Raw:  # a typed reader kept the JSON text: decode the last one only
                raw = load_json(bytes(raw))
            try:
                s.usage = self._usage.normalize(raw)
            except Exception:  # a bug in a normalizer: keep the raw object, count it
                s.usage = Usage(raw=raw)
                s.parse_errors += 1
        s.complete = self._done and (self._body or s.error_type is None)
        return s

    # -- one method per event type ----------------------------------------------------------

    def _meta(self, ev: Meta) -> None:
        s = self.summary
        if s.message_id is None and ev.message_id:
            s.message_id = ev.message_id
        if s.model is None and ev.model:
            s.model = ev.model

    def _whole(self, parts: dict[Any, list[str]], text: str, part: Any) -> None:
        if text and "".join(parts.get(part, ())) != text:
            parts[part] = [text]
            self.summary.content_started = True

    def _text_delta(self, ev: TextDelta) -> None:
        if ev.text:  # (the one event of most stream events: kept short)
            pieces = self._text.get(ev.part)
            if pieces is None:
                self._text[ev.part] = [ev.text]
            else:
                pieces.append(ev.text)
            self.summary.content_started = True

    def add_texts(self, texts: list[str], part: Any) -> None:
        """A run of non-empty text deltas of one part: what `_text_delta` does for each."""
        pieces = self._text.get(part)
        if pieces is None:
            self._text[part] = list(texts)
        else:
            pieces.extend(texts)
        self.summary.content_started = True

    def add_thinking(self, texts: list[str], part: Any) -> None:
        """A run of non-empty thinking deltas of one part: what `_thinking_delta` does for each."""
        pieces = self._thinking.get(part)
        if pieces is None:
            self._thinking[part] = list(texts)
        else:
            pieces.extend(texts)
        self.summary.content_started = True

    def _text_done(self, ev: TextDone) -> None:
        self._whole(self._text, ev.text, ev.part)

    def _thinking_delta(self, ev: ThinkingDelta) -> None:
        if ev.text:
            pieces = self._thinking.get(ev.part)
            if pieces is None:
                self._thinking[ev.part] = [ev.text]
            else:
                pieces.append(ev.text)
            self.summary.content_started = True

    def _thinking_done(self, ev: ThinkingDone) -> None:
        self._whole(self._thinking, ev.text, ev.part)

    def _tool_start(self, ev: ToolCallStart) -> None:
        call = self._calls.get(ev.key)
        if call is None:
            call = ToolCall(len(self._calls), ev.call_id, ev.name, complete=False)
            self.summary.tool_calls.append(call)
            self._calls[ev.key] = call
            self._args[ev.key] = []
            self.summary.content_started = True
            return
        if ev.call_id:
            call.call_id = ev.call_id
        if ev.name and not call.name:
            call.name = ev.name

    def _tool_delta(self, ev: ToolCallDelta) -> None:
        pieces = self._args.get(ev.key)
        if pieces is not None and ev.arguments:
            pieces.append(ev.arguments)

    def _tool_arguments(self, ev: ToolCallArguments) -> None:
        if ev.key in self._args:
            self._args[ev.key] = [ev.arguments]

    def _tool_end(self, ev: ToolCallEnd) -> None:
        call = self._calls.get(ev.key)
        if call is not None:
            call.complete = ev.complete

    def _usage_report(self, ev: UsageReport) -> None:
        self._usage = ev

    def _stop(self, ev: Stop) -> None:
        self.summary.stop_reason = ev.reason

    def _error(self, ev: Error) -> None:
        self.summary.error_type = ev.type
        self.summary.error_message = ev.message

    def _done_event(self, ev: Done) -> None:
        self._done = True
        if ev.final:
            self.closed = True

    def _parse_error(self, ev: Any) -> None:
        self.summary.parse_errors += 1

    def _unknown(self, ev: Any) -> None:
        self.summary.unknown_events += 1


_APPLY: dict[type, Callable[[Collector, Any], None]] = {
    Meta: Collector._meta,
    TextDelta: Collector._text_delta,
    TextDone: Collector._text_done,
    ThinkingDelta: Collector._thinking_delta,
    ThinkingDone: Collector._thinking_done,
    ToolCallStart: Collector._tool_start,
    ToolCallDelta: Collector._tool_delta,
    ToolCallArguments: Collector._tool_arguments,
    ToolCallEnd: Collector._tool_end,
    UsageReport: Collector._usage_report,
    Stop: Collector._stop,
    Error: Collector._error,
    Done: Collector._done_event,
    ParseError: Collector._parse_error,
    UnknownEvent: Collector._unknown,
}


def collect(events: Iterable[LlmEvent], rules: SummaryRules, *, body: bool = False) -> ResponseSummary:
    """The summary a sequence of neutral events describes (pure)."""
    collector = Collector(rules, body=body)
    collector.add_all(events)
    return collector.finish()


class Stream:
    """A stream interpreter: a provider's `WireReader` feeding the one `Collector`; never raises."""

    __slots__ = ("_collector", "_ended", "_events", "_run", "_wire")

    def __init__(self, wire: WireReader, rules: SummaryRules) -> None:
        self._wire = wire
        self._events = wire.events
        self._run = getattr(wire, "native_run", None)
        self._collector = Collector(rules)
        self._ended = False

    @property
    def summary(self) -> ResponseSummary:
        """The summary so far (`content_started`, errors and counters are live)."""
        return self._collector.summary

    @property
    def terminal(self) -> bool:
        """True once the response's terminal event came (later events are ignored)."""
        return self._collector.closed

    def event(self, ev: SSEEvent) -> None:
        """Consume one framed event; a failure counts as a parse error."""
        collector = self._collector
        if collector.closed:
            return
        try:
            for event in self._events(ev):
                _APPLY[type(event)](collector, event)
        except Exception:  # a bug must never reach mitmproxy
            collector.summary.parse_errors += 1

    @property
    def native_kind(self) -> int:
        """Which text chunks the compiled framer may hand over as runs (`capsem.native`): the wire
        reader's `NATIVE_KIND`, whose `native_run(collector, run)` applies such a run."""
        return getattr(self._wire, "NATIVE_KIND", 0)

    @property
    def native_state(self) -> Callable[[], Any] | None:
        """The wire reader's state the compiled framer compares chunks with (its `native_state`:
        the (id, model) it last said), or None when it needs none."""
        return getattr(self._wire, "native_state", None)

    def feed(self, evs: list[SSEEvent]) -> None:
        """`event` for each of `evs` in order (a chunk's events in one call, no call per event);
        a list among them is a run of text chunks the compiled framer read (`native_kind`)."""
        collector, read, apply = self._collector, self._events, _APPLY
        for ev in evs:
            if collector.closed:
                return
            if type(ev) is list:  # a run of text chunks the compiled framer read
                self._run(collector, ev)  # type: ignore[misc]
                continue
            try:
                for event in read(ev):
                    apply[type(event)](collector, event)
            except Exception:  # a bug must never reach mitmproxy
                collector.summary.parse_errors += 1

    def read(self, ev: SSEEvent) -> None:
        """`event` without the guard (tests use it to see the bugs the guard would hide)."""
        if self._collector.closed:
            return
        if type(ev) is list:  # a run of text chunks the compiled framer read
            self._run(self._collector, ev)  # type: ignore[misc]
        else:
            self._collector.add_all(self._events(ev))

    def finish(self) -> ResponseSummary:
        """End of stream: the wire reader's last word, then the summary (idempotent)."""
        if not self._ended:
            self._ended = True
            try:
                self._collector.add_all(self._wire.end())
            except Exception:
                self._collector.summary.parse_errors += 1
        return self._collector.finish()
