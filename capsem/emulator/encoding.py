"""Content-Encoding for emulated responses: per-event flushing, multi-member/frame variants."""

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
