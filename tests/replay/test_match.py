"""The replay matcher, pure: what it tolerates, what it never does (answer a request with another
request's answer), and how it names the first difference."""

from __future__ import annotations

import json

from assembler.replay.match import Endpoint, Hit, Matcher, Miss, Recorded, Shaper, first_difference, shape

MESSAGES = Endpoint("http", "POST", "api.anthropic.com", "/v1/messages")
CHAT = Endpoint("http", "POST", "api.openai.com", "/v1/chat/completions")


def body(**fields) -> bytes:
    return json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 100, **fields}).encode()


def matcher(*bodies: bytes, endpoint: Endpoint = MESSAGES, workspace: str | None = None) -> Matcher:
    calls = [Recorded(n, endpoint, shape(b, "/home/rec/ws")) for n, b in enumerate(bodies, 1)]
    return Matcher(calls, Shaper(workspace))


def number(found: Hit | Miss) -> int | None:
    return found.call.number if isinstance(found, Hit) else None


def test_identical_requests_in_a_row_get_their_own_answers_in_order():
    same = body(messages=[{"role": "user", "content": "hi"}])
    m = matcher(same, same, body(messages=[{"role": "user", "content": "bye"}]))
    assert [number(m.match(MESSAGES, same)) for _ in range(2)] == [1, 2]
    third = m.match(MESSAGES, same)  # used up: never answered with call 3's answer
    assert isinstance(third, Miss) and third.expected.number == 3
    assert third.difference == 'messages[0].content: recorded "bye", now "hi"'


def test_parallel_conversations_interleave():
    a1, b1 = (
        body(messages=[{"role": "user", "content": "a"}]),
        body(messages=[{"role": "user", "content": "b"}]),
    )
    m = matcher(a1, b1)
    assert [number(m.match(MESSAGES, b1)), number(m.match(MESSAGES, a1))] == [2, 1]


def test_what_changes_every_run_is_tolerated():
    def claude_code(billing: str, date: str, session: str, workspace: str) -> bytes:
        line = f"x-anthropic-billing-header: cc_version=2.0.1.{billing}; cch={billing};"
        return body(system=[{"type": "text", "text": line},
                            {"type": "text", "text": f"Working directory: {workspace}/src\nToday's date is {date}.\n"
                             f"Memory: ~/.claude/projects/{workspace.replace('/', '-')}/memory, "
                             f"temp: /root/.gemini/tmp/{workspace.rsplit('/', 1)[1]}/x"}],
                    metadata={"user_id": f"user_abc_account__session_{session}"},
                    messages=[{"role": "user",
                               "content": f"it is {date}T10:11:12Z, Wednesday, November 25, 2026"}])  # fmt: skip

    recorded = claude_code("a1b", "2026-11-25", "3f8e2a4c-1b2d-4c3e-9f00-112233445566", "/home/rec/ws")
    m = matcher(recorded, workspace="/tmp/other")
    now = claude_code("ffe", "2027-01-02", "0a0b0c0d-1111-2222-3333-444455556666", "/tmp/other")
    assert number(m.match(MESSAGES, now)) == 1


def test_a_path_that_only_ends_like_the_workspace_is_text_on_both_sides():
    """Issue 35, item 10: `/home/dev/proj` was read as `<workspace>` in a replay run in `/tmp/proj`
    and not in a recording made in `/home/rec/ws`: the replay missed."""
    said = body(messages=[{"role": "user", "content": "diff /home/dev/proj/a.py and /srv/ws/b.py"}])
    assert number(matcher(said, workspace="/tmp/proj").match(MESSAGES, said)) == 1
    in_workspace = body(messages=[{"role": "user", "content": "read /home/rec/ws/a.py"}])
    now = body(messages=[{"role": "user", "content": "read /tmp/proj/a.py"}])
    assert number(matcher(in_workspace, workspace="/tmp/proj").match(MESSAGES, now)) == 1


def test_ids_map_one_to_one_over_the_replay():
    def turn(call_id: str, text: str = "go") -> bytes:
        return body(messages=[{"role": "user", "content": text},
                              {"role": "assistant",
                               "content": [{"type": "tool_use", "id": call_id, "name": "x", "input": {}}]},
                              {"role": "user",
                               "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "ok"}]}])  # fmt: skip

    m = matcher(
        turn("toolu_01AAAA1111"), turn("toolu_01AAAA1111", "again"), turn("toolu_01BBBB2222", "third")
    )
    assert number(m.match(MESSAGES, turn("toolu_99ZZZZ0000"))) == 1  # the agent minted another id
    assert m.ids == {"toolu_01AAAA1111": "toolu_99ZZZZ0000"}
    clash = m.match(MESSAGES, turn("toolu_77YYYY0000", "again"))  # the same recorded id, another new one
    assert (
        isinstance(clash, Miss)
        and "toolu_01AAAA1111 of the recording was toolu_99ZZZZ0000" in clash.difference
    )
    assert number(m.match(MESSAGES, turn("toolu_99ZZZZ0000", "again"))) == 2
    taken = m.match(MESSAGES, turn("toolu_99ZZZZ0000", "third"))  # a new id already standing for another
    assert isinstance(taken, Miss) and "stands for toolu_01AAAA1111" in taken.difference


def test_a_changed_request_is_a_miss_naming_the_first_differing_item():
    recorded = body(tools=[{"name": "read"}], messages=[{"role": "user", "content": "write the notes"}])
    m = matcher(recorded)
    changed = m.match(MESSAGES, body(tools=[{"name": "read"}, {"name": "write"}],
                                     messages=[{"role": "user", "content": "write the notes"}]))  # fmt: skip
    assert isinstance(changed, Miss)
    assert changed.difference == 'tools[1]: not recorded, now {"name":"write"} (1 items recorded, 2 now)'
    model = m.match(MESSAGES, body(model="claude-opus-4-1", tools=[{"name": "read"}],
                                   messages=[{"role": "user", "content": "write the notes"}]))  # fmt: skip
    assert isinstance(model, Miss) and model.difference.startswith(
        'model: recorded "claude-sonnet-4-5", now "claude-opus'
    )


def test_another_endpoint_never_answers():
    same = body(messages=[{"role": "user", "content": "hi"}])
    m = matcher(same)
    miss = m.match(CHAT, same)
    assert isinstance(miss, Miss) and miss.expected is None
    assert (
        miss.difference
        == "the recording has no more calls to POST api.openai.com/v1/chat/completions (it has 0)"
    )
    assert number(m.match(MESSAGES, same)) == 1


def test_a_body_that_is_not_json_is_compared_as_text():
    m = matcher(b"plain text 2026-11-25", b"{not json")
    assert number(m.match(MESSAGES, b"plain text 2027-02-03")) == 1
    assert number(m.match(MESSAGES, b"{not json")) == 2


def test_first_difference_words():
    assert first_difference({"a": [1, 2]}, {"a": [1, 2]}) is None
    assert first_difference({"a": 1}, {}) == "a: recorded 1, now absent"
    assert first_difference([1], {"x": 1}) == 'the body: recorded [1], now {"x":1}'
    long = "x" * 100
    said = first_difference({"t": long + "a"}, {"t": long + "b"})
    assert said.startswith('t: recorded "' + "x" * 20) and said.endswith("(from character 100)")


def test_a_miss_is_compared_with_the_recorded_call_most_like_it():
    title = body(model="claude-haiku-4-5", messages=[{"role": "user", "content": "a title for: fix it"}])
    main = body(
        system="You are a coding agent.",
        tools=[{"name": "Bash"}],
        messages=[{"role": "user", "content": "fix it"}],
    )
    m = matcher(title, main)
    miss = m.match(MESSAGES, body(system="You are a coding agent.", tools=[{"name": "Bash"}],
                                  messages=[{"role": "user", "content": "fix it now"}]))  # fmt: skip
    assert isinstance(miss, Miss) and miss.expected.number == 2
    assert miss.difference == 'messages[0].content: recorded "fix it", now "fix it now" (from character 6)'


def test_a_unix_time_with_a_fraction_inside_text_is_a_date():
    """Codex puts `create_time` floats into JSON it sends as text: the whole number is the time."""
    from assembler.replay.match import run_invariant

    def item(at: float) -> str:
        return json.dumps({"create_time": at, "turn_id": "01a21513-6d60-7e50-8685-781227deb2d5"}, indent=2)

    assert run_invariant(item(1795649924.5580246)) == run_invariant(item(1795649926.9138227))
    assert "<date>" in run_invariant(item(1795649924.5580246))
    assert run_invariant("version 1795649924 and 42.5") == "version <date> and 42.5"
