"""Content-Encoding in the emulator: responses encoded per event (flushed, or as several
gzip members / zstd frames), and request bodies decoded.

The request decoder is the emulator's own, straight from the compression libraries, and
strict (a body that does not decode is an error): it must not share code, and so bugs, with
capsem's tolerant decoder that the emulator helps to test.
"""

from __future__ import annotations

import zlib

import brotli
import zstandard

SUPPORTED = ("gzip", "gzip-multi", "deflate", "deflate-raw", "br", "zstd", "zstd-frames")


def header_value(encoding: str) -> str | None:
    """The Content-Encoding header for an emulator encoding spec (None for identity)."""
    names = [_wire_name(e) for e in _parts(encoding)]
    return ", ".join(names) or None


def _parts(encoding: str) -> list[str]:
    return [e.strip() for e in (encoding or "").split(",") if e.strip() and e.strip() != "identity"]


def _wire_name(name: str) -> str:
    return {"gzip-multi": "gzip", "deflate-raw": "deflate", "zstd-frames": "zstd"}.get(name, name)


class _One:
    """One encoding step; `step(data)` returns bytes decodable up to here, `end()` the tail."""

    def __init__(self, name: str) -> None:
        if name not in SUPPORTED:
            raise ValueError(f"unknown encoding {name!r}; use one of {', '.join(SUPPORTED)}")
        self.name = name
        self._new()

    def _new(self) -> None:
        n = self.name
        if n in ("gzip", "gzip-multi"):
            self._c = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
        elif n == "deflate":
            self._c = zlib.compressobj()
        elif n == "deflate-raw":
            self._c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        elif n == "br":
            self._c = brotli.Compressor()
        else:
            self._c = zstandard.ZstdCompressor().compressobj()

    def step(self, data: bytes) -> bytes:
        n = self.name
        if n in ("gzip-multi", "zstd-frames"):  # each step is a complete member / frame
            out = self._c.compress(data) + self._c.flush()
            self._new()
            return out
        if n == "br":
            return self._c.process(data) + self._c.flush()
        if n in ("zstd",):
            return self._c.compress(data) + self._c.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        return self._c.compress(data) + self._c.flush(zlib.Z_SYNC_FLUSH)

    def end(self) -> bytes:
        n = self.name
        if n in ("gzip-multi", "zstd-frames"):
            return b""
        if n == "br":
            return self._c.finish()
        return self._c.flush()


class Encoder:
    """Stacked encodings applied in order; `step` per event, `end` once."""

    def __init__(self, encoding: str) -> None:
        self.steps = [_One(e) for e in _parts(encoding)]

    def step(self, data: bytes) -> bytes:
        for s in self.steps:
            data = s.step(data)
        return data

    def end(self) -> bytes:
        out = b""
        for i, s in enumerate(self.steps):
            out = s.step(out) if out and i else out
            out += s.end()
        return out

    def whole(self, data: bytes) -> bytes:
        return self.step(data) + self.end()


MAX_DECODED = 64 * 1024 * 1024
_SLICE = 1024  # compressed bytes per step, so output is checked against the cap as it grows


def decode_request(body: bytes, content_encoding: str | None, limit: int = MAX_DECODED) -> bytes:
    """Undo a request's Content-Encoding (the last encoding listed first); raises ValueError
    naming the encoding when the body does not decode, is cut short, or exceeds `limit`.
    An empty body stays empty."""
    if not body:
        return body
    for name in reversed([e.strip().lower() for e in (content_encoding or "").split(",")]):
        if name in ("", "identity"):
            continue
        try:
            body = _DECODERS[name](body, limit)
        except KeyError:
            raise ValueError(f"unsupported request content-encoding {name!r}") from None
        except (zlib.error, brotli.error, zstandard.ZstdError, EOFError) as exc:
            raise ValueError(f"request body is not valid {name}: {exc}") from exc
    return body


def _inflate(data: bytes, wbits: int, limit: int, members: bool) -> bytes:
    out = bytearray()
    while True:
        obj = zlib.decompressobj(wbits)
        out += obj.decompress(data, limit + 1 - len(out))
        if len(out) > limit:
            raise ValueError(f"decoded request body exceeds {limit} bytes")
        if not obj.eof:
            raise EOFError("compressed stream cut short")
        data = obj.unused_data
        if not data:
            return bytes(out)
        if not members:
            raise EOFError(f"{len(data)} bytes after the end of the stream")


def _gzip(data: bytes, limit: int) -> bytes:
    return _inflate(data, 16 + zlib.MAX_WBITS, limit, members=True)  # RFC 1952 allows several members


def _deflate(data: bytes, limit: int) -> bytes:
    try:
        return _inflate(data, zlib.MAX_WBITS, limit, members=False)  # RFC 9110: zlib format
    except zlib.error:
        return _inflate(data, -zlib.MAX_WBITS, limit, members=False)  # raw deflate, which some clients send


def _brotli(data: bytes, limit: int) -> bytes:
    obj, out = brotli.Decompressor(), bytearray()
    for i in range(0, len(data), _SLICE):
        out += obj.process(data[i : i + _SLICE])
        if len(out) > limit:
            raise ValueError(f"decoded request body exceeds {limit} bytes")
    if not obj.is_finished():
        raise EOFError("compressed stream cut short")
    return bytes(out)


def _zstd(data: bytes, limit: int) -> bytes:
    out = bytearray()
    while data:  # one or more frames
        obj = zstandard.ZstdDecompressor().decompressobj()
        rest = b""
        for i in range(0, len(data), _SLICE):
            out += obj.decompress(data[i : i + _SLICE])
            if len(out) > limit:
                raise ValueError(f"decoded request body exceeds {limit} bytes")
            if obj.eof:
                rest = obj.unused_data + data[i + _SLICE :]
                break
        if not obj.eof:
            raise EOFError("compressed stream cut short")
        data = rest
    return bytes(out)


_DECODERS = {"gzip": _gzip, "x-gzip": _gzip, "deflate": _deflate, "br": _brotli, "zstd": _zstd}
