"""The neutral event layer: one collector builds every summary from the same small set of events."""

from __future__ import annotations

import pytest

from addons.framing import SSEEvent
from addons.providers.collect import Collector, Stream, collect
from addons.providers.events import (
    PARSE_ERROR,
    UNKNOWN_EVENT,
    Done,
    Error,
    Meta,
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
    UsageReport,
)
from addons.records import ToolCall, Usage

RULES = SummaryRules(call_id_prefix="p", part_sep="\n\n")


def test_parts_are_joined_in_first_seen_order_and_a_done_part_replaces_its_pieces():
    s = collect(
        [
            TextDelta("Hel", "a"),
            ThinkingDelta("think", 1),
            TextDelta("", "empty"),  # an empty piece starts no part
            TextDelta("lo", "a"),
            TextDelta("second", "b"),
            TextDone("Hello!", "a"),  # deltas were lost: the whole part wins
            TextDone("second", "b"),  # the same text: nothing changes
            ThinkingDone("more", 2),
        ],
        RULES,
    )
    assert (s.text, s.thinking, s.content_started) == ("Hello!\n\nsecond", "think\n\nmore", True)
    assert collect([TextDelta("a"), TextDelta("b")], SummaryRules("p")).text == "ab"


def test_tool_calls_by_key_named_at_the_end_when_they_came_without_id():
    s = collect(
        [
            ToolCallStart("x", "", ""),
            ToolCallDelta("x", '{"a":'),
            ToolCallStart("x", "", "read"),  # a later fragment names it
            ToolCallStart("y", "call_2", "grep"),
            ToolCallDelta("x", "1}"),
            ToolCallArguments("y", "{}"),
            ToolCallEnd("y"),
            ToolCallDelta("unknown", "ignored"),
        ],
        RULES,
    )
    assert s.tool_calls == [
        ToolCall(0, "p_read_0", "read", '{"a":1}', complete=False),
        ToolCall(1, "call_2", "grep", "{}"),
    ]


def test_usage_last_report_wins_and_is_normalized_once():
    seen = []

    def normalize(raw):
        seen.append(raw)
        return Usage(input_tokens=raw["n"], raw=raw)

    s = collect([UsageReport({"n": 1}, normalize), UsageReport({"n": 2}, normalize)], RULES)
    assert (s.usage.input_tokens, seen) == (2, [{"n": 2}])


@pytest.mark.parametrize(
    ("events", "body", "complete"),
    [
        ([Done()], False, True),
        ([Error("overloaded", "x"), Done()], False, False),  # an error cuts a stream
        ([Error("overloaded", "x"), Done()], True, True),  # an error body is a whole answer
        ([Stop("end_turn")], False, False),  # no Done: not complete
    ],
)
def test_completeness(events, body, complete):
    assert collect(events, RULES, body=body).complete is complete


def test_meta_first_non_empty_wins_stop_last_wins_counters():
    s = collect(
        [Meta(None, "m1"), Meta("id1", "m2"), Stop("a"), Stop("b"), PARSE_ERROR, UNKNOWN_EVENT, PARSE_ERROR],
        RULES,
    )
    assert (s.message_id, s.model, s.stop_reason, s.parse_errors, s.unknown_events) == (
        "id1",
        "m1",
        "b",
        2,
        1,
    )


class _Wire:
    """A toy wire format: `t:` text, `x` a bug, `end` the terminal event; end() says the call is whole."""

    def events(self, ev: SSEEvent):
        if ev.data == "x":
            raise ValueError("a bug")
        if ev.data == "end":
            return [Done()]
        return [TextDelta(ev.data[2:]), ToolCallStart(0, "c", "f")]

    def end(self):
        return [ToolCallEnd(0)]


def test_stream_guards_ignores_after_the_end_and_keeps_a_live_summary():
    stream = Stream(_Wire(), RULES)
    stream.event(SSEEvent(None, "t:hi"))
    assert stream.summary.content_started and not stream.terminal
    stream.event(SSEEvent(None, "x"))  # a failure is counted, never raised
    stream.event(SSEEvent(None, "end"))
    stream.event(SSEEvent(None, "t:late"))  # after the terminal event: ignored
    s = stream.finish()
    assert stream.terminal and stream.finish() is s
    assert (s.text, s.parse_errors, s.complete, s.tool_calls[0].complete) == ("hi", 1, True, True)
    with pytest.raises(ValueError):
        Stream(_Wire(), RULES).read(SSEEvent(None, "x"))  # the unguarded path shows the bug


def test_collector_is_live_and_finish_is_idempotent():
    c = Collector(RULES)
    c.add(TextDelta("a"))
    assert c.summary.content_started and c.summary.text == ""  # joined at the end
    assert c.finish().text == "a" and c.finish() is c.summary
