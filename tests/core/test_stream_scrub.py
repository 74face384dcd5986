"""A secret split across a stream's deltas is cut from every delta that carries part of it."""

from __future__ import annotations

import json

import pytest

from capsem.markers import hash_value, redacted
from capsem.redact import Scrubber
from capsem.stream_scrub import BLANK_KEEP, marker_spans, scrub_stream

KEY = "sk-ant-api03-Zq8vB2nR4tY6uI0oP3aS5dF7gH9jK1lX"


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def anthropic_sse(parts: list[str], field: str = "text", kind: str = "text_delta") -> str:
    events = ['event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1"}}\n\n']
    for p in parts:
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": kind, field: p}}
        events.append(f"event: content_block_delta\ndata: {json.dumps(delta)}\n\n")
    return "".join(events) + 'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def openai_chat_sse(parts: list[str]) -> str:
    chunks = [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in parts]
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def responses_sse(parts: list[str]) -> str:
    return "".join(
        f"data: {json.dumps({'type': 'response.output_text.delta', 'delta': p})}\n\n" for p in parts
    )


def gemini_sse(parts: list[str]) -> str:
    chunks = [{"candidates": [{"content": {"parts": [{"text": p}], "role": "model"}}]} for p in parts]
    return "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in chunks)


def ollama_ndjson(parts: list[str]) -> str:
    return "".join(json.dumps({"model": "llama3", "response": p, "done": False}) + "\n" for p in parts)


def deltas_of(body: str, field: str) -> str:
    """The stream's text as a client assembles it."""
    out = []
    for line in body.splitlines():
        line = line.removeprefix("data: ")
        if line.startswith("{"):
            obj = json.loads(line)
            stack = [obj]
            while stack:
                node = stack.pop(0)
                if isinstance(node, dict):
                    out += [v for k, v in node.items() if k == field and isinstance(v, str)]
                    stack += [v for v in node.values() if isinstance(v, dict | list)]
                elif isinstance(node, list):
                    stack += node
    return "".join(out)


@pytest.mark.parametrize(
    ("build", "field"),
    [(anthropic_sse, "text"), (openai_chat_sse, "content"), (responses_sse, "delta"), (gemini_sse, "text"),
     (ollama_ndjson, "response")],
)  # fmt: skip
@pytest.mark.parametrize("size", [1, 3, 8])
def test_a_key_in_pieces_of_any_size_is_gone_from_every_delta(build, field, size):
    said = f'Use "{KEY}" — café — then restart.'
    body = build(pieces(said, size))
    stored = Scrubber().scrub_stream(body)
    assert "Zq8vB2nR4tY6uI0oP3aS5dF7gH9jK1lX"[:6] not in stored.replace("\\", "")
    assert KEY[13:21] not in stored
    assembled = deltas_of(stored, field)
    assert assembled == f'Use "[redacted {hash_value(KEY)}]" — café — then restart.'
    assert stored.count("[redacted ") == 1  # the marker once, where the key began


def test_tool_arguments_split_across_partial_json_deltas():
    arguments = json.dumps({"command": f"export ANTHROPIC_API_KEY={KEY}", "timeout": 5})
    body = anthropic_sse(pieces(arguments, 5), field="partial_json", kind="input_json_delta")
    stored = Scrubber().scrub_stream(body)
    assert json.loads(deltas_of(stored, "partial_json"))["command"].startswith(
        "export ANTHROPIC_API_KEY=[redacted"
    )


def test_the_joined_deltas_are_read_as_ascii():
    """A channel's joined text is read with each non-ASCII character as one that ends a word, as
    the body's view reads `\\u00e9` and gitleaks' RE2 patterns read `é`: a key glued to a letter
    that only a Unicode `\\w` would call a word character is still found across deltas."""
    key = "AKIAQ3ZT7XW2PL9RN4VB"
    body = anthropic_sse(pieces(f"the id is é{key} — done", 3))
    stored = Scrubber().scrub_stream(body)
    assert deltas_of(stored, "text") == f"the id is é[redacted {hash_value(key)}] — done"


def test_a_non_ascii_credential_learned_from_a_header_is_cut_from_the_deltas_that_spell_it():
    secret = "pässwört-Geheimnis-42"
    scrubber = Scrubber()
    scrubber.learn(secret)
    stored = scrubber.scrub_stream(anthropic_sse(pieces(f"the cookie is {secret}, ok", 3)))
    assert deltas_of(stored, "text") == f"the cookie is [redacted {hash_value(secret)}], ok"


def test_a_name_at_a_deltas_end_does_not_take_the_next_events_json():
    """A delta's text is read as what it says, not as escaped JSON cut off where the delta ends:
    `token =` closing one delta, its value in the next, is code, and the stream is left as it was
    (read as JSON, the name's value ran from the delta's closing quote over the next event's
    framing, and the stored stream no longer parsed)."""
    body = anthropic_sse(
        ["    def next(self):\n        token =", " self._tokens.pop() + 1\n        return token\n"]
    )
    assert Scrubber().scrub_stream(body) == body


def test_a_secret_in_the_framing_is_redacted_and_the_deltas_left_as_they_are():
    """The body's other fields are scrubbed with the deltas' values blanked out: a key in them is
    redacted in place, and the deltas beside it are left byte for byte."""
    said = "Nothing to hide in the text."
    body = anthropic_sse(pieces(said, 5)).replace('"id":"msg_1"', f'"id":"msg_1","note":"{KEY}"')
    stored = Scrubber().scrub_stream(body)
    assert KEY not in stored and f"[redacted {hash_value(KEY)}]" in stored
    assert deltas_of(stored, "text") == said and stored.count("content_block_delta") == body.count(
        "content_block_delta"
    )


def test_a_redaction_of_the_framing_that_reaches_into_a_delta_scrubs_the_whole_body_instead():
    """Should the scrub of the blanked body redact over a delta's value, that redaction is not
    written back over the delta: the whole body is scrubbed instead, then its channels."""
    body = anthropic_sse(["hello ", "world"])
    read: list[str] = []

    def scrub(text: str) -> str:
        read.append(text)
        if "hello" in text:  # the whole body: nothing to redact
            return text
        at = text.index('"text": "') + len('"text": ') - 2  # over the quote, into the blanks
        return text[:at] + redacted(text[at : at + 6]) + text[at + 6 :]

    assert scrub_stream(body, scrub, lambda joined: []) == body
    # the blanked body, again with its values' blanks in full (to place what it redacts), then whole
    assert ["hello" in text for text in read] == [False, False, True]


def test_the_framing_is_read_with_at_most_blank_keep_blanks_a_value_and_its_secrets_placed():
    """A flood's deltas of a KiB each leave `BLANK_KEEP` blanks each in the text the framing is
    scrubbed in; a secret of the framing is still redacted where it is in the body, the deltas
    left byte for byte."""
    long_parts = ["x" * 1000 + f" {i}" for i in range(20)]
    body = anthropic_sse(long_parts).replace('"id":"msg_1"', f'"id":"{KEY}"')
    read: list[str] = []
    scrubber = Scrubber()

    def scrub(text: str) -> str | None:
        read.append(text)
        return scrubber.scrub(text)

    out = scrub_stream(body, scrub, scrubber.secret_spans)
    assert out == body.replace(KEY, redacted(KEY))
    assert " " * (BLANK_KEEP + 1) not in read[0] and " " * BLANK_KEEP in read[0]
    assert len(read[0]) < len(body) - 20 * (1000 - BLANK_KEEP)
    assert " " * 1000 in read[1]  # it redacted: read again with the blanks in full, to place it


def test_a_private_key_around_long_blanked_values_is_still_found():
    """gitleaks' `private-key` asks for 64 characters or more between its `BEGIN` and `END`
    lines: with values blanked to `BLANK_KEEP`, a key whose lines lie in the fields either side of
    a long delta is still one match (the whole body is then scrubbed)."""
    line = {"model": "-----BEGIN RSA PRIVATE KEY-----", "response": "y" * 500, "k": "KEY-----"}
    body = json.dumps(line, separators=(",", ":")) + "\n"
    assert len('","response":"' + " " * 16 + '","k":"') < 64  # (with 16 blanks it would not match)
    assert Scrubber().scrub_stream(body) != body


def test_a_stream_without_secrets_is_left_byte_for_byte():
    body = anthropic_sse(pieces("Nothing to hide here, just tokens: 12 input, 40 output.", 4))
    assert Scrubber().scrub_stream(body) == body


def test_marker_spans_place_each_redaction_exactly():
    scrub = Scrubber().scrub
    text = f"a {KEY} b postgres://app:hunter2hunter2@db/x [redacted hash:0123456789ab] {KEY}"
    spans = marker_spans(text, scrub(text))
    assert [text[s:e] for s, e in spans] == [KEY, "hunter2hunter2", KEY]
    assert marker_spans("abc", "xyz") is None


@pytest.mark.parametrize("secret", ["tok" + "a" * 80 + "Z", "tok" + "a" * 300 + "END and more" + "Z"])
def test_marker_spans_find_a_secret_whose_end_the_text_after_it_begins_like(secret):
    """The text after a marker is looked for by its first characters, then compared whole (and
    hashed where it occurs more than once): a secret holding those characters is placed whole."""
    after = "a" * 300 + "END and more"
    original = "x " + secret + after
    assert marker_spans(original, f"x [redacted {hash_value(secret)}]{after}") == [(2, 2 + len(secret))]
