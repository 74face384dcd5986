"""Incremental Content-Encoding decoding of a body copy, that never raises.

The proxy forwards the original bytes untouched; capsem decodes a copy only to parse it.
Supported: gzip (multi-member), deflate (zlib-wrapped or raw, detected from the first bytes),
br, zstd (several independent frames, as some servers emit one per flush), identity, and
stacked encodings (`Content-Encoding: gzip, br` was applied gzip first, so it is decoded br
first). Output appears as soon as the compressor flushed it, so a sync-flushed SSE stream is
parsed event by event.

Broken input is recorded, never raised: a declared encoding that fails before producing any
output is taken as a lie and the body is read as identity; a failure after some output keeps
that output and stops; an unknown encoding passes the bytes through. Decoded output is capped
(`max_output`) and fed to decompressors in slices, so a decompression bomb stays bounded.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import brotli
import zstandard

__all__ = ["BodyDecoder", "decode_body"]

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SLICE = 16 * 1024


class _Stage(Protocol):
    name: str

    def decode(self, data: bytes, limit: int) -> bytes: ...

    def finished(self) -> bool: ...


class _Zlib:
    """gzip (multi-member) or deflate; `wbits` None = detect zlib vs raw deflate."""

    def __init__(self, name: str, gzip: bool) -> None:
        self.name = name
        self._gzip = gzip
        self._obj: zlib._Decompress | None = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzip else None
        self._pending = b""
        self._done = False
        self._tail = b""

    def _start_deflate(self, data: bytes) -> None:
        # zlib header: CMF with CM=8, and (CMF*256 + FLG) % 31 == 0
        zlib_wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
        self._obj = zlib.decompressobj(zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS)

    def decode(self, data: bytes, limit: int) -> bytes:
        data = self._tail + data
        self._tail = b""
        if self._obj is None:
            if len(data) < 2:
                self._tail = data
                return b""
            self._start_deflate(data)
        out = bytearray()
        while data and len(out) < limit:
            assert self._obj is not None
            if self._done:
                if not self._gzip:
                    return bytes(out)  # trailing garbage after a deflate stream: ignore
                if data.startswith(_GZIP_MAGIC) or len(data) < 2:
                    self._obj = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    self._done = False
                    if len(data) < 2:
                        self._tail = data
                        return bytes(out)
                else:
                    return bytes(out)  # padding after the last member
            piece, rest = data[:_SLICE], data[_SLICE:]  # slices: partial output survives a later error
            out += self._obj.decompress(piece, limit - len(out))
            data = self._obj.unconsumed_tail + rest
            if self._obj.eof:
                self._done = True
                data = self._obj.unused_data + data
        if data:
            self._tail = data
        return bytes(out)

    def finished(self) -> bool:
        return self._done or (self._obj is None and not self._tail)


class _Brotli:
    name = "br"

    def __init__(self) -> None:
        self._obj = brotli.Decompressor()

    def decode(self, data: bytes, limit: int) -> bytes:
        out = bytearray()
        for i in range(0, len(data), 1024):
            out += self._obj.process(data[i : i + 1024])
            if len(out) >= limit:
                break
        return bytes(out)

    def finished(self) -> bool:
        return self._obj.is_finished()


class _Zstd:
    name = "zstd"

    def __init__(self) -> None:
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._fresh = True

    def decode(self, data: bytes, limit: int) -> bytes:
        out = bytearray()
        while data and len(out) < limit:
            piece, data = data[:_SLICE], data[_SLICE:]
            out += self._obj.decompress(piece)
            self._fresh = False
            if self._obj.eof:
                rest = self._obj.unused_data + data
                self._obj = self._dctx.decompressobj()
                self._fresh = True
                data = rest
        return bytes(out)

    def finished(self) -> bool:
        return self._fresh


def _stage(name: str) -> _Stage | None:
    if name in ("gzip", "x-gzip"):
        return _Zlib(name, gzip=True)
    if name == "deflate":
        return _Zlib(name, gzip=False)
    if name == "br":
        return _Brotli()
    if name == "zstd":
        return _Zstd()
    return None


class BodyDecoder:
    """Decode one body incrementally; `error`, `applied` and `truncated` say what happened."""

    def __init__(
        self, content_encoding: str | None, *, sniff: bool = False, max_output: int = 256 * 1024 * 1024
    ):
        self.max_output = max_output
        self.error: str | None = None
        self.truncated = False
        self.applied: list[str] = []
        self._stages: list[_Stage] = []
        self._produced = 0
        self._stopped = False
        self._identity = False
        self._sniff_buf: bytes | None = None
        self._held = bytearray()  # raw input kept until the first output, to re-read a lying body
        names = [n.strip().lower() for n in (content_encoding or "").split(",")]
        names = [n for n in names if n and n != "identity"]
        for name in reversed(names):  # the last encoding applied is undone first
            stage = _stage(name)
            if stage is None:
                self.error = f"unsupported content-encoding {name!r}; body read as is"
                self._stages = []
                self._identity = True
                break
            self._stages.append(stage)
        self.applied = [s.name for s in reversed(self._stages)]
        if not names and sniff:
            self._sniff_buf = b""

    def decode(self, chunk: bytes) -> bytes:
        """Decoded bytes available after `chunk` (possibly b"")."""
        if self._stopped or not chunk:
            return b""
        if self._sniff_buf is not None:
            chunk = self._sniff(chunk)
            if not chunk:
                return b""
        if not self._stages:
            return self._cap(chunk)
        if self._produced == 0 and self._held is not None:
            if len(self._held) + len(chunk) <= 1024 * 1024:
                self._held += chunk
            else:
                self._held = None
        try:
            data = chunk
            for stage in self._stages:
                data = stage.decode(data, self.max_output - self._produced + 1)
                if not data:
                    break
            if data:
                self._held = None
            return self._cap(data)
        except Exception as exc:
            return self._fail(chunk, exc)

    def passes(self, size: int) -> bool:
        """Whether `size` more bytes pass through as they are (no encoding to undo or sniff, room
        under the cap): then they are counted as decoded and the caller uses them as they are
        (what `decode` would return); else nothing is counted and each goes through `decode`."""
        if self._stages or self._sniff_buf is not None or self._stopped:
            return False
        if self._produced + size > self.max_output:
            return False
        self._produced += size
        return True

    def _sniff(self, chunk: bytes) -> bytes:
        buf = (self._sniff_buf or b"") + chunk
        if len(buf) < 2 or (len(buf) < 4 and _ZSTD_MAGIC.startswith(buf)):
            self._sniff_buf = buf  # not enough bytes to tell yet
            return b""
        self._sniff_buf = None
        if buf.startswith(_GZIP_MAGIC):
            self._stages = [_Zlib("gzip", gzip=True)]
            self.applied = ["gzip(sniffed)"]
        elif buf.startswith(_ZSTD_MAGIC):
            self._stages = [_Zstd()]
            self.applied = ["zstd(sniffed)"]
        return buf

    def _fail(self, chunk: bytes, exc: Exception) -> bytes:
        what = "+".join(self.applied) or "body"
        if self._produced == 0 and not self._identity and not self._has_magic():
            # Nothing decoded yet: the header lied. Read the whole body as identity.
            self.error = f"content-encoding {what!r} declared but body is not {what}: {exc}; read as identity"
            self._stages = []
            self._identity = True
            held, self._held = self._held, None
            return self._cap(bytes(held) if held is not None else chunk)
        self.error = self.error or f"{what} decoding failed after {self._produced} bytes: {exc}"
        self._stopped = True
        return b""

    def _has_magic(self) -> bool:
        """Whether the held body starts like the outermost declared encoding (so it is not a lie)."""
        held = bytes(self._held or b"")
        outer = self.applied[-1] if self.applied else ""
        if outer in ("gzip", "x-gzip"):
            return held.startswith(_GZIP_MAGIC)
        if outer == "zstd":
            return held.startswith(_ZSTD_MAGIC)
        return False

    def _cap(self, data: bytes) -> bytes:
        room = self.max_output - self._produced
        if len(data) > room:
            data = data[:room]
            self.error = self.error or f"decoded body exceeds {self.max_output} bytes; rest not decoded"
            self._stopped = True
        self._produced += len(data)
        return data

    def flush(self) -> bytes:
        """End of body: return what is left and note a compressed stream cut short."""
        out = b""
        if self._sniff_buf:
            buf, self._sniff_buf = self._sniff_buf, None
            out = self._cap(buf)
        if self._stages and not self._stopped and not all(s.finished() for s in self._stages):
            if self._produced == 0 and self._held:
                what = "+".join(self.applied)
                self.error = f"content-encoding {what!r} declared but body is not {what}; read as identity"
                held, self._held = bytes(self._held), None
                return out + self._cap(held)
            self.truncated = True
            self.error = self.error or f"{'+'.join(self.applied)} stream truncated"
        return out


def decode_body(
    body: bytes, content_encoding: str | None, *, sniff: bool = False, max_output: int = 256 * 1024 * 1024
) -> tuple[bytes, str | None]:
    """Decode a whole body; returns (decoded, error)."""
    if not content_encoding and not sniff and len(body) <= max_output:
        return body, None  # as sent: what the decoder would give, without making one
    decoder = BodyDecoder(content_encoding, sniff=sniff, max_output=max_output)
    data = decoder.decode(body) + decoder.flush()
    return data, decoder.error
