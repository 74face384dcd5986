"""The live part of `capsem replay --from N --live`: a request passed on to the real provider.

The request goes out as it came (its head and body; `--model M` rewrites the model it asks for),
with `connection: close`, directly over TLS or through an HTTP proxy (`Options.via`, CONNECT), and
the provider's answer is passed back byte for byte. A WebSocket is passed on whole (its upgrade,
then both directions as they come).
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from assembler.replay.server import Options
    from capsem.emulator.server import Incoming

_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "transfer-encoding",
                  "content-length", "te", "upgrade"})  # fmt: skip
_GEMINI_MODEL = re.compile(r"(/models/)([^/:]+)(:)")


def with_model(path: str, body: bytes, model: str) -> tuple[str, bytes]:
    """`path` and JSON `body` asking for `model` instead (the body's `model`, Gemini's path)."""
    path = _GEMINI_MODEL.sub(lambda m: m.group(1) + model + m.group(3), path)
    try:
        obj = json.loads(body) if body else None
    except ValueError:
        return path, body
    if isinstance(obj, dict):
        if isinstance(obj.get("response"), dict) and "model" in obj["response"]:
            obj["response"]["model"] = model
        elif "model" in obj:
            obj["model"] = model
        else:
            return path, body
        return path, json.dumps(obj, ensure_ascii=False).encode()
    return path, body


async def _open(host: str, port: int, scheme: str, options: Options) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    context = ssl.create_default_context(cafile=options.via_ca) if scheme == "https" else None
    if options.via is None:
        return await asyncio.open_connection(host, port, ssl=context, server_hostname=host if context else None)
    proxy = options.via.split("://", 1)[-1].rstrip("/")
    proxy_host, _, proxy_port = proxy.rpartition(":")
    reader, writer = await asyncio.open_connection(proxy_host, int(proxy_port))
    if context is None:
        return reader, writer
    writer.write(f"CONNECT {host}:{port} HTTP/1.1\r\nhost: {host}:{port}\r\n\r\n".encode())
    await writer.drain()
    answer = await reader.readuntil(b"\r\n\r\n")
    if b" 200 " not in answer.split(b"\r\n", 1)[0] + b" ":
        raise ConnectionError(f"the proxy {options.via} refused CONNECT {host}:{port}")
    await writer.start_tls(context, server_hostname=host)
    return reader, writer


def _head(request: Incoming, path: str, extra: list[str]) -> bytes:
    lines = request.head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    if target.startswith(("http://", "https://")):
        query = target.partition("?")[2]
    else:
        query = target.partition("?")[2]
    keep = [line for line in lines[1:] if line and line.split(":", 1)[0].strip().lower() not in _HOP]
    first = f"{method} {path}{'?' + query if query else ''} {version}"
    return ("\r\n".join([first, *keep, *extra]) + "\r\n\r\n").encode("latin-1")


async def forward(client: asyncio.StreamWriter, request: Incoming, host: str, port: int, scheme: str,
                  options: Options) -> None:  # fmt: skip
    """Send `request` to the real `host` and pass its answer back to `client` as it comes."""
    from capsem.emulator.encoding import decode_request

    path = request.target
    if path.startswith(("http://", "https://")):
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    path = path.partition("?")[0]
    body = request.body
    drop_encoding = False
    if options.model:
        try:
            decoded = decode_request(body, request.headers.get("content-encoding"))
        except Exception:
            decoded = None
        if decoded is not None:
            path, body = with_model(path, decoded, options.model)
            drop_encoding = True
    head = _head(request, path, [f"content-length: {len(body)}", "connection: close"])
    if drop_encoding:
        head = re.sub(rb"(?im)^content-encoding:[^\r\n]*\r\n", b"", head)
    try:
        reader, writer = await _open(host, port, scheme, options)
    except (OSError, ConnectionError, ssl.SSLError) as exc:
        message = json.dumps({"error": {"type": "api_error", "message": f"capsem replay: the live call to {host} "
                                        f"failed: {exc}"}}).encode()  # fmt: skip
        client.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\n"
                     + f"content-length: {len(message)}\r\nconnection: close\r\n\r\n".encode() + message)  # fmt: skip
        await client.drain()
        return
    try:
        writer.write(head + body)
        await writer.drain()
        while data := await reader.read(65536):
            client.write(data)
            await client.drain()
    finally:
        writer.close()


async def tunnel(reader: asyncio.StreamReader, client: asyncio.StreamWriter, request: Incoming, host: str,
                 port: int, scheme: str, options: Options) -> None:  # fmt: skip
    """A WebSocket passed on whole: its upgrade request, then both directions until either ends."""
    path = request.target.partition("?")[0]
    if "://" in path:
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    up_reader, up_writer = await _open(host, port, scheme, options)
    up_writer.write(request.head + b"\r\n")
    await up_writer.drain()

    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            try:
                dst.close()
            except Exception:
                pass

    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, client))
