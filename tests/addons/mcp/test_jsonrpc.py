"""Which requests are MCP (addons/mcp/jsonrpc.py): parsed, not sniffed. Each body below escaped
the first version, which looked for the bytes `"jsonrpc"` in a body's first 2 KB."""

from __future__ import annotations

import gzip
import json

import brotli
import pytest
import zstandard

from addons.mcp.jsonrpc import Kind, classify, read_request

CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "run", "arguments": {"c": "ls"}},
}
LATE_KEY = json.dumps(
    {
        "method": "tools/call",
        "params": {"name": "run", "arguments": {"c": "x" * 5000}},
        "id": 1,
        "jsonrpc": "2.0",
    }
).encode()  # the TypeScript SDK's key order: `jsonrpc` after large arguments


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(CALL).encode(),
        LATE_KEY,
        b'{"\\u006asonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run"}}',
        b'{"jsonrpc":"2\\u002e0","id":1,"method":"tools\\/call"}',
        json.dumps({**CALL, "model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}).encode(),
        json.dumps([{"model": "x"}, CALL]).encode(),  # a batch with one message
        b'{"id":1,"method":"tools/call","params":{"name":"run"}}',  # no `jsonrpc`, an MCP method
        b'{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}',  # any JSON-RPC 2.0 message
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"n":NaN}}}',  # json, not msgspec
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"s":"\\ud800"}}}',
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"}, 5]',
        b'{"method":"ping","method":"tools/call","jsonrpc":"1.0","jsonrpc":"2.0"}',  # the last key wins
        b"\xef\xbb\xbf" + json.dumps(CALL).encode(),  # a BOM
        json.dumps(CALL).encode("utf-16"),
        json.dumps(CALL).encode("utf-32-le"),
        b"  \n" + json.dumps(CALL).encode(),
    ],
    ids=lambda b: b[:40].decode("latin-1"),
)
def test_json_rpc_in_any_form_is_mcp(body):
    assert classify(body) is Kind.MCP


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b"[1, 2]",
        b'"jsonrpc"',
        b'{"jsonrpc":"1.0","id":1,"method":"eth_call"}',
        b'{"model":"gpt-4o","messages":[{"role":"user","content":"what is jsonrpc?"}]}',
        b'{"model":"gpt-4o","method":"x"}',
        b'{"jsonrpc":"2.0",',  # broken, not cut: refused by any server
    ],
)
def test_other_bodies_are_not(body):
    assert classify(body) is Kind.NOT_MCP


def test_a_body_deeper_than_the_parsers_go_is_unreadable():
    deep = (
        b'{"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"a":'
        + b"[" * 5000
        + b"]" * 5000
        + b"}}}"
    )
    assert classify(deep) is Kind.UNREADABLE


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("br", brotli.compress),
        ("zstd", zstandard.ZstdCompressor().compress),
        ("deflate", lambda b: __import__("zlib").compress(b)),
        ("gzip, br", lambda b: brotli.compress(gzip.compress(b))),
    ],
)
@pytest.mark.parametrize("content_type", ["application/json", "text/plain", None])
def test_any_content_encoding_and_type(encoding, encode, content_type):
    headers = [("Content-Encoding", encoding)] + ([("Content-Type", content_type)] if content_type else [])
    kind, body = read_request(headers, "POST", encode(LATE_KEY), 1 << 20)
    assert kind is Kind.MCP and body == LATE_KEY


def test_a_header_makes_a_post_mcp_and_a_body_past_the_limit_is_unreadable():
    assert read_request([("Mcp-Method", "tools/call")], "POST", b"", 100) == (Kind.MCP, b"")
    assert read_request([("Mcp-Method", "tools/call")], "GET", b"", 100) == (Kind.NOT_MCP, None)
    assert read_request([], "PUT", json.dumps(CALL).encode(), 1000)[0] is Kind.MCP  # any method with a body
    kind, _ = read_request([], "POST", LATE_KEY, 1000)  # cut at the limit, `jsonrpc` past it
    assert kind is Kind.UNREADABLE
    kind, _ = read_request([("Content-Encoding", "gzip")], "POST", gzip.compress(LATE_KEY), 1000)
    assert kind is Kind.UNREADABLE
    assert read_request([], "POST", b"x" * 2000, 1000) == (Kind.NOT_MCP, None)  # not JSON at all
    assert (
        read_request([], "POST", LATE_KEY[:1000], 1 << 20, cut=True)[0] is Kind.UNREADABLE
    )  # a streamed copy
