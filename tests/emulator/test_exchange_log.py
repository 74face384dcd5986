"""The emulator's request decoder and the exact bytes its exchange log keeps per exchange:
request head and body as received and decoded, response body as sent and decoded (for every
encoding in test_emulator.py's `test_logged_bytes_are_the_wire_bytes`)."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import socket
import zlib

import brotli
import httpx
import pytest
import zstandard
from websockets.asyncio.client import connect

from capsem.emulator.encoding import decode_request

from .test_emulator import GPT, HI, last

PAYLOAD = json.dumps({"model": GPT, "messages": HI}).encode()
ZSTD = zstandard.ZstdCompressor()


def b64(ex: dict, key: str) -> bytes | None:
    return None if ex[key] is None else base64.b64decode(ex[key])


# -- decode_request ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "encoding,packed",
    [
        ("gzip", gzip.compress(PAYLOAD)),
        ("gzip", gzip.compress(PAYLOAD[:9]) + gzip.compress(PAYLOAD[9:])),  # two members
        ("x-gzip", gzip.compress(PAYLOAD)),
        ("deflate", zlib.compress(PAYLOAD)),
        ("deflate", zlib.compress(PAYLOAD)[2:-4]),  # raw deflate, as some clients send
        ("br", brotli.compress(PAYLOAD)),
        ("zstd", ZSTD.compress(PAYLOAD)),
        ("zstd", ZSTD.compress(PAYLOAD[:9]) + ZSTD.compress(PAYLOAD[9:])),  # two frames
        ("gzip, br", brotli.compress(gzip.compress(PAYLOAD))),  # applied gzip first
        ("identity", PAYLOAD),
        (None, PAYLOAD),
    ],
)
def test_decode_request(encoding, packed):
    assert decode_request(packed, encoding) == PAYLOAD


@pytest.mark.parametrize(
    "encoding,packed,message",
    [
        ("gzip", PAYLOAD, "not valid gzip"),
        ("gzip", gzip.compress(PAYLOAD)[:-5], "not valid gzip: compressed stream cut short"),
        ("gzip", gzip.compress(PAYLOAD) + b"junk", "not valid gzip"),
        ("deflate", b"\x00not deflate", "not valid deflate"),
        ("br", brotli.compress(PAYLOAD)[:-3], "not valid br"),
        ("zstd", ZSTD.compress(PAYLOAD)[:-3], "not valid zstd: compressed stream cut short"),
        ("zstd", b"not zstd", "not valid zstd"),
        ("compress", PAYLOAD, "unsupported request content-encoding 'compress'"),
    ],
)
def test_decode_request_refuses_bad_bodies(encoding, packed, message):
    with pytest.raises(ValueError, match=message):
        decode_request(packed, encoding)


@pytest.mark.parametrize(
    "encoding,pack",
    [("gzip", gzip.compress), ("br", brotli.compress), ("zstd", ZSTD.compress), ("deflate", zlib.compress)],
)
def test_decode_request_bounds_output(encoding, pack):
    bomb = pack(b"\x00" * 5_000_000)
    assert len(decode_request(bomb, encoding)) == 5_000_000
    with pytest.raises(ValueError, match="exceeds 1000000 bytes"):
        decode_request(bomb, encoding, limit=1_000_000)


# -- the log -------------------------------------------------------------------------------------


def test_request_bytes_as_received_and_decoded(emu):
    packed = brotli.compress(gzip.compress(PAYLOAD))
    headers = {"content-encoding": "gzip, br", "content-type": "application/json"}
    resp = httpx.post(emu.http_url + "/v1/chat/completions", content=packed, headers=headers)
    assert resp.status_code == 200
    ex = last(emu)
    assert b64(ex, "request_body_b64") == packed and b64(ex, "request_body_decoded_b64") == PAYLOAD
    head = b64(ex, "request_head_b64")
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and head.endswith(b"\r\n")
    assert b"\r\ncontent-encoding: gzip, br\r\n" in head and not head.endswith(b"\r\n\r\n")
    # chunked transfer framing is not part of the body
    resp = httpx.post(
        emu.http_url + "/v1/chat/completions", content=iter([packed[:5], packed[5:]]), headers=headers
    )
    assert resp.status_code == 200
    ex = last(emu)
    assert b"transfer-encoding: chunked" in b64(ex, "request_head_b64").lower()
    assert b64(ex, "request_body_b64") == packed and b64(ex, "request_body_decoded_b64") == PAYLOAD


def test_undecodable_request_is_a_clear_error(emu):
    resp = httpx.post(
        emu.http_url + "/v1/chat/completions", content=PAYLOAD, headers={"content-encoding": "gzip"}
    )
    assert resp.status_code == 400
    assert "request body is not valid gzip" in resp.json()["error"]["message"]
    ex = last(emu)
    assert b64(ex, "request_body_b64") == PAYLOAD and ex["request_body_decoded_b64"] is None


def test_cut_response_has_no_decoded_body(emu):
    body = {"model": GPT, "messages": HI, "stream": True}
    with pytest.raises(httpx.RemoteProtocolError), httpx.Client() as client, client.stream(
        "POST", emu.http_url + "/v1/chat/completions", json=body, headers={"x-emulator": "truncate=100"}
    ) as resp:  # fmt: skip
        resp.read()
    ex = last(emu)
    assert len(b64(ex, "response_body_b64")) == 100 and ex["response_body_decoded_b64"] is None


def test_websocket_turn_bytes(emu):
    message = json.dumps(
        {"type": "response.create", "model": "gpt-4.1", "input": "héllo"}, ensure_ascii=False
    )

    async def turn() -> list[str]:
        url = emu.http_url.replace("http://", "ws://") + "/v1/responses"
        async with connect(url) as ws:
            await ws.send(message)
            got = []
            while not got or json.loads(got[-1])["type"] not in ("response.completed", "error"):
                got.append(await ws.recv())
            return got

    got = asyncio.run(turn())
    ex = last(emu)
    assert ex["method"] == "WS" and ex["complete"]
    assert b64(ex, "request_body_b64") == b64(ex, "request_body_decoded_b64") == message.encode()
    assert b64(ex, "response_body_decoded_b64") == "\n".join(got).encode()  # one message a line (NDJSON)
    frames = b64(ex, "response_body_b64")
    assert all(text.encode() in frames for text in got)  # unmasked server frames carry the text


def test_admin_endpoint_serves_the_same_bytes(emu):
    httpx.post(emu.http_url + "/v1/chat/completions", content=gzip.compress(PAYLOAD),
               headers={"content-encoding": "gzip"})  # fmt: skip
    port = int(emu.http_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)):
        pass  # a connection that sends nothing is not an exchange
    logged = httpx.get(emu.http_url + "/_emulator/exchanges").json()
    assert logged == emu.exchanges()
    assert base64.b64decode(logged[-1]["request_body_decoded_b64"]) == PAYLOAD
