"""Whole bodies, stored once: exact back, scrubbed, linear in the conversation, links bounded."""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import time
from dataclasses import fields

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from addons.items import item
from addons.messages import Route
from addons.recorder import bodies
from addons.recorder.bodies import FRAME_BYTES, Body, BodyStore
from benchmarks.bodies import claude_code, conversation
from capsem.redact import Scrubber
from capsem.store.bodies import MAX_PIECE, _blob, _keys, pieces, read_body
from capsem.store.rows import BodyChunk, ContentFrame, IdMinter, ItemContent
from capsem.store.schema import SESSION_MIGRATIONS, migrate
from tests.recording import RecorderHarness, ended, head, response


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4000) | st.text(max_size=3000).map(str.encode))
def test_pieces_put_back_together_are_the_body(body):
    parts = pieces(body)
    assert b"".join(parts) == body and all(0 < len(p) <= MAX_PIECE for p in parts)


def test_a_json_string_is_never_cut():
    """The cut marks cannot occur inside a JSON string (its quotes are escaped there)."""
    body = json.dumps(
        {"messages": [{"role": "user", "content": 'say {"role": "x"} and {"type": 1}'}]}
    ).encode()
    for part in pieces(body):
        text = part.decode()
        assert (text.count('"') - text.count('\\"')) % 2 == 0  # no string is left open
    assert any(b'say {\\"role\\": \\"x\\"} and {\\"type\\": 1}' in p for p in pieces(body))


def call(rec: RecorderHarness, n: int, body: bytes, answer: bytes, at: float) -> None:
    req = head(f"f{n}", started=at)
    rec.close(ended(req, resp=response(200, started=at), body=answer, request_body=body, at=at + 0.1,
                    route=Route("anthropic", "anthropic")))  # fmt: skip


ANSWER = json.dumps({"id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                     "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                     "usage": {"input_tokens": 5, "output_tokens": 1}}).encode()  # fmt: skip


def stored_bytes(rec: RecorderHarness) -> int:
    return rec.writer.conn.execute("SELECT COALESCE(SUM(LENGTH(data)), 0) FROM content_frames").fetchone()[0]


def test_every_body_of_a_long_conversation_reads_back_exactly_and_costs_what_is_new(tmp_path):
    rec = RecorderHarness(tmp_path)
    bodies = conversation(80)
    growth = []
    for n, body in enumerate(bodies):
        before = stored_bytes(rec)
        call(rec, n, body, ANSWER, time.time())
        rec.writer.commit()
        after = stored_bytes(rec)
        growth.append(after - before)
    for n, body in enumerate(bodies, start=1):
        request, blob = read_body(rec.writer.conn, n)
        assert request == body and blob["size"] == len(body)
        assert read_body(rec.writer.conn, n, "response")[0] == ANSWER
    # the first turn stores system prompt and tools; each later one only its new messages
    assert growth[0] > 10 * max(growth[1:])
    assert max(growth[-10:]) < 2 * max(growth[1:11])  # flat, not growing with the history
    rec.shutdown()


def test_a_secret_in_a_body_is_stored_redacted(tmp_path):
    rec = RecorderHarness(tmp_path)
    secret = "sk-ant-api03-" + "Q" * 40
    body = json.dumps(
        {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": f"key {secret}"}]}
    )
    call(rec, 0, body.encode(), ANSWER, time.time())
    rec.writer.commit()
    stored, _ = read_body(rec.writer.conn, 1)
    assert secret.encode() not in stored and b"[redacted hash:" in stored
    frames = [zstandard.decompress(r[0]) for r in rec.writer.conn.execute("SELECT data FROM content_frames")]
    assert frames and not any(b"QQQQQQQQQQ" in f for f in frames)  # nor in the items stored beside the body
    rec.shutdown()


@pytest.mark.parametrize("direction", ["request", "response"])
def test_a_key_or_private_key_across_a_64_kib_cut_is_redacted_whole(direction):
    """One JSON string longer than a piece: the store cuts it every 64 KiB, after it is scrubbed."""
    key = "sk-ant-api03-Zq8vB2nR4tY6uI0oP3aS5dF7gH9jK1lX"
    pem = (
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIPEMbodyAcrossTheCut0000000000000000000000TailOfThePEM\n"
        "-----END EC PRIVATE KEY-----"
    )
    for secret, needle in ((key, key[-12:]), (pem, "TailOfThePEM")):  # what lies past the cut
        prefix = "x" * (MAX_PIECE - len('{"messages": [{"content": "') - len(secret) // 2)
        body = json.dumps({"messages": [{"content": prefix + secret + " end"}]}).encode()
        assert body.index(secret.encode()[:10]) < MAX_PIECE < body.index(secret.encode()[:10]) + len(secret)
        store = BodyStore(Scrubber(), IdMinter())
        written = store.keep(owner="a", source_table="model_calls", row_id=1, bodies=[Body(direction, body)])
        frames = b"".join(zstandard.decompress(r.data) for r in written if isinstance(r, ContentFrame))
        assert needle.encode() not in frames and b"[redacted hash:" in frames


def test_a_segment_stored_before_a_credential_was_learned_is_scrubbed_again():
    scrubber = Scrubber()
    store = BodyStore(scrubber, IdMinter())
    body = json.dumps({"messages": [{"role": "user", "content": "use internal-credential-77"}]}).encode()
    store.keep(owner="a", source_table="model_calls", row_id=1, bodies=[Body("request", body)])
    scrubber.learn("internal-credential-77")  # a later flow's header shows it is a credential
    written = store.keep(owner="b", source_table="model_calls", row_id=2, bodies=[Body("request", body)])
    frames = b"".join(zstandard.decompress(r.data) for r in written if isinstance(r, ContentFrame))
    assert b"use [redacted hash:" in frames and b"internal-credential-77" not in frames


def _depths(conn) -> list[int]:
    """Links each request body's list follows, as its runs say."""
    depths: dict[int, int] = {}
    for blob_id, found in conn.execute(
        "SELECT id, runs FROM event_body_blobs WHERE direction = 'request' ORDER BY id"
    ):
        bases = [run[0] for run in json.loads(found) if isinstance(run, list)]
        depths[blob_id] = 1 + max((depths[b] for b in bases), default=-1)
    return list(depths.values())


def test_lists_follow_at_most_max_depth_links(tmp_path, monkeypatch):
    monkeypatch.setattr(bodies, "MAX_DEPTH", 12)
    rec = RecorderHarness(tmp_path)
    conversation = claude_code(40)
    for n, body in enumerate(conversation):
        call(rec, n, body, ANSWER, time.time())
    rec.writer.commit()
    conn = rec.writer.conn
    depths = _depths(conn)
    assert max(depths) == 12 and depths.count(0) >= 2  # the first, and a whole list once chains are long
    (blob_id,) = conn.execute("SELECT MAX(id) FROM event_body_blobs WHERE direction = 'request'").fetchone()
    assert _keys(conn, _blob(conn, "id = ?", (blob_id,))) == [
        hashlib.sha256(p).digest()[:16] for p in pieces(conversation[-1])
    ]
    rec.shutdown()


def test_a_turn_changed_in_the_middle_lists_only_its_new_pieces(tmp_path):
    """Claude Code's shape: the change of every turn lies before the unchanged system and tools."""
    rec = RecorderHarness(tmp_path)
    conversation = claude_code(12)
    for n, body in enumerate(conversation):
        call(rec, n, body, ANSWER, time.time())
    rec.writer.commit()
    conn = rec.writer.conn
    rows = conn.execute(
        "SELECT LENGTH(chunks) + LENGTH(runs) FROM event_body_blobs WHERE direction = 'request' ORDER BY id"
    ).fetchall()
    assert rows[0][0] > 600 * 16  # the first lists every piece of system and tools
    assert max(r[0] for r in rows[1:]) < 200  # later ones a few runs and their handful of new pieces
    for n, body in enumerate(conversation, start=1):
        assert read_body(conn, n)[0] == body
    rec.shutdown()


def _edit(rng: random.Random, body: list[str], kind: str) -> list[str]:
    """`body` (a list of JSON blocks) changed the way a conversation changes between calls."""
    new = [f'{{"type": "text", "text": "n{rng.random()}"}}' for _ in range(rng.randint(1, 3))]
    at = {"start": 0, "end": len(body), "middle": len(body) // 2, "anywhere": rng.randint(0, len(body))}
    if kind in at:
        return body[: at[kind]] + new + body[at[kind] :]
    if kind == "shrink" and body:
        a = rng.randrange(len(body))
        return body[:a] + body[a + rng.randint(1, 4) :]
    if kind == "repeat" and body:
        a = rng.randrange(len(body))
        return body + body[a : a + rng.randint(1, 6)] * rng.randint(1, 3)
    if kind == "swap" and len(body) > 2:
        a, b = sorted(rng.sample(range(len(body)), 2))
        return [*body[:a], body[b], *body[a + 1 : b], body[a], *body[b + 1 :]]
    return new


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["start", "middle", "end", "anywhere", "shrink", "repeat", "swap", "anew"]),
                min_size=1, max_size=30), st.integers(0, 2**32))  # fmt: skip
def test_every_body_of_any_sequence_of_edits_reads_back_byte_identical(edits, seed):
    """Change at the start, middle or end, repeated, shrinking, reordered, replaced: each request is
    the runs of earlier ones plus its new pieces, and reads back exactly."""
    rng = random.Random(seed)
    store = BodyStore(Scrubber(), IdMinter())
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn, SESSION_MIGRATIONS)
    blocks = [f'{{"type": "text", "text": "b{i}"}}' for i in range(rng.randint(0, 40))]
    sent = []
    for n, kind in enumerate(["anew", *edits], start=1):
        blocks = _edit(rng, blocks, kind)
        body = ("[" + ", ".join(blocks) + "]").encode()
        rows = store.keep(owner=f"o{n}", source_table="model_calls", row_id=n, bodies=[Body("request", body)])
        for row in rows:
            names = [f.name for f in fields(row)]
            conn.execute(f"INSERT INTO {row.TABLE} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                         [getattr(row, name) for name in names])  # fmt: skip
        sent.append(body)
    for n, body in enumerate(sent, start=1):
        assert read_body(conn, n)[0] == body
    conn.close()


def test_answers_new_repeated_or_sharing_pieces_read_back_and_list_what_is_new():
    """An answer whose pieces are all new lists them as one count (no earlier body can hold one);
    the same answer again is one run of the first; one that repeats a piece in itself or shares
    some with an earlier one is runs and keys as a request's: each reads back exactly."""
    store = BodyStore(Scrubber(), IdMinter())
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn, SESSION_MIGRATIONS)
    rng = random.Random(7)
    block = lambda: bytes(rng.choice(b"abcdefgh ") for _ in range(MAX_PIECE))  # noqa: E731
    a, b, c = block(), block(), block()
    answers = [a + b, a + b, c + c + block(), a + b + block()]
    runs = []
    for n, body in enumerate(answers, start=1):
        rows = store.keep(
            owner=f"o{n}", source_table="model_calls", row_id=n, bodies=[Body("response", body)]
        )
        for row in rows:
            names = [f.name for f in fields(row)]
            conn.execute(f"INSERT INTO {row.TABLE} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                         [getattr(row, name) for name in names])  # fmt: skip
            if type(row).__name__ == "BodyBlob":
                runs.append(json.loads(row.runs))
    for n, body in enumerate(answers, start=1):
        assert read_body(conn, n, "response")[0] == body
    assert runs[0] == [len(pieces(a + b))] and runs[1] == [[1, 0, len(pieces(a + b))]]
    assert runs[2] == [3] and runs[3] == [[2, 0, 2], 1]  # (c twice: as a request's) the last a + b, one new
    conn.close()


def test_an_mcp_call_keeps_its_request_and_answer(tmp_path):
    rec = RecorderHarness(tmp_path)
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read", "arguments": {}}}
    answer = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}).encode()
    now = time.time()
    req = head("p1", started=now, scheme="http", host="127.0.0.1", port=8000, path="/mcp")
    rec.close(ended(req, resp=response(200, started=now), body=answer, request_body=json.dumps(message).encode(),
                    mcp=True))  # fmt: skip
    (row,) = rec.rows("SELECT id FROM mcp_calls")
    assert read_body(rec.writer.conn, row["id"], "request", "mcp_calls")[0] == json.dumps(message).encode()
    assert read_body(rec.writer.conn, row["id"], "response", "mcp_calls")[0] == answer
    rec.shutdown()


def test_the_store_keys_pieces_by_their_bytes_once(tmp_path):
    store = BodyStore(Scrubber(), IdMinter())
    body = json.dumps({"messages": [{"role": "user", "content": "same"}] * 3}).encode()
    first = store.keep(owner="a", source_table="model_calls", row_id=1, bodies=[Body("request", body)])
    second = store.keep(owner="b", source_table="model_calls", row_id=2, bodies=[Body("request", body)])
    assert sum(type(r).__name__ == "BodyChunk" for r in first) == len(set(pieces(body)))
    assert [type(r).__name__ for r in second] == ["BodyBlob"]  # nothing new to store, no frame


def test_a_calls_new_items_and_pieces_share_frames_no_larger_than_the_bound():
    store = BodyStore(Scrubber(), IdMinter())
    text = random.Random(3).randbytes(350_000).hex()  # no piece repeats another
    items = [item("message", {"role": "user", "content": text}), item("system", "be brief")]
    body = json.dumps({"system": "be brief", "messages": [{"role": "user", "content": text[::-1]}]}).encode()
    rows = store.keep(owner="a", source_table="model_calls", row_id=1, items=items,
                      bodies=[Body("request", body), Body("response", b"ok")])  # fmt: skip
    frames = {r.id: zstandard.decompress(r.data) for r in rows if isinstance(r, ContentFrame)}
    assert len(frames) == 2 and all(len(f) <= FRAME_BYTES for f in frames.values())
    stored = {r.hash: frames[r.frame][r.start : r.start + r.size] for r in rows if isinstance(r, ItemContent)}
    assert stored == {i.hash: i.content.encode() for i in items}
    keys = [r for r in rows if isinstance(r, BodyChunk)]
    assert b"".join(frames[r.frame][r.start : r.start + r.size] for r in keys) == body + b"ok"
