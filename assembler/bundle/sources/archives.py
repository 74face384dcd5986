"""Zip archives into `files`: workspace archives (weakincentives `archive_filesystem`, one entry
per file) and weakincentives debug-bundle zips (`debug_bundle/` root), whose logs and session
snapshots are imported as such.

Hostile archives lose only their bad entries, each with a warning: absolute paths, drive letters
and `..` components, symbolic links, encrypted entries and decompression bombs (a ratio above
`max_compression_ratio` past 1 MiB) are refused; at most `max_archive_entries` entries and
`max_archive_bytes` uncompressed bytes are read. Contents above `max_file_bytes` are kept as
metadata (size, sha256) only. Text is scrubbed of secrets; binary stays in the `data` BLOB.
"""

from __future__ import annotations

import hashlib
import json
import re
import stat
import zipfile
import zlib
from typing import IO, Any

from assembler.bundle.sources.base import SourceContext
from assembler.bundle.sources.logs import import_logs
from assembler.bundle.sources.snapshots import import_snapshots

DEBUG_ROOT = "debug_bundle/"
BOMB_MIN_BYTES = 1024 * 1024
_DRIVE = re.compile(r"^[A-Za-z]:")


def unsafe_reason(info: zipfile.ZipInfo) -> str | None:
    """Why an entry must not be imported, or None when it is a plain, safe file."""
    name = info.filename
    parts = re.split(r"[\\/]", name)
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        return "absolute path"
    if ".." in parts:
        return "path with '..'"
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if mode and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode) and stat.S_IFMT(mode):
        return "not a regular file"
    if info.flag_bits & 0x1:
        return "encrypted entry"
    return None


class _Budget:
    def __init__(self, total: int) -> None:
        self.left = total


def _read(zf: zipfile.ZipFile, info: zipfile.ZipInfo, keep: int, budget: _Budget) -> tuple[bytes, str, int]:
    """(first `keep`+1 bytes, sha256 of all, size read) of an entry, counted against the budget."""
    digest = hashlib.sha256()
    kept = bytearray()
    size = 0
    with zf.open(info) as f:
        while chunk := f.read(1 << 20):
            size += len(chunk)
            budget.left -= len(chunk)
            if budget.left < 0:
                raise OverflowError("archive budget exhausted")
            digest.update(chunk)
            if len(kept) <= keep:
                kept += chunk[: keep + 1 - len(kept)]
    return bytes(kept), digest.hexdigest(), size


def import_archive(ctx: SourceContext, stream: IO[bytes]) -> None:
    """Every safe entry of the zip at `ctx.path`."""
    del stream  # zipfile needs a seekable file; it opens the path itself
    try:
        zf = zipfile.ZipFile(ctx.path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        ctx.malformed(None, f"not a readable zip ({exc})")
        return
    with zf:
        infos = zf.infolist()
        if len(infos) > ctx.limits.max_archive_entries:
            ctx.warn(f"{len(infos)} entries; only the first {ctx.limits.max_archive_entries} are read")
            infos = infos[: ctx.limits.max_archive_entries]
        is_debug_bundle = any(i.filename.startswith(DEBUG_ROOT) for i in infos)
        manifest = _manifest(ctx, zf) if is_debug_bundle else {}
        archive_id = str(manifest.get("bundle_id") or ctx.path.stem)
        request = manifest.get("request") if isinstance(manifest.get("request"), dict) else {}
        session_id = request.get("session_id") if isinstance(request.get("session_id"), str) else None
        budget = _Budget(ctx.limits.max_archive_bytes)
        snapshot_member = _snapshot_member(infos) if is_debug_bundle else None
        for info in infos:
            if info.is_dir():
                continue
            why = unsafe_reason(info)
            if (
                why is None
                and info.file_size > BOMB_MIN_BYTES
                and (info.file_size > ctx.limits.max_compression_ratio * max(info.compress_size, 1))
            ):
                why = f"decompression bomb ({info.file_size} bytes from {info.compress_size})"
            if why:
                ctx.malformed(None, f"entry {info.filename!r} refused: {why}")
                continue
            try:
                _import_entry(ctx, zf, info, budget, archive_id, session_id, is_debug_bundle, snapshot_member)
            except OverflowError:
                ctx.warn(
                    f"stopped at {info.filename!r}: more than {ctx.limits.max_archive_bytes} bytes uncompressed"
                )
                return
            except (
                zipfile.BadZipFile,
                zlib.error,
                EOFError,
                OSError,
                NotImplementedError,
                RuntimeError,
            ) as exc:
                ctx.malformed(None, f"entry {info.filename!r} cannot be read ({exc})")


def _manifest(ctx: SourceContext, zf: zipfile.ZipFile) -> dict[str, Any]:
    try:
        info = zf.getinfo(DEBUG_ROOT + "manifest.json")
        if info.file_size > ctx.limits.max_document_bytes:
            return {}
        doc = json.loads(zf.read(info))
    except (KeyError, ValueError, RecursionError, zipfile.BadZipFile, zlib.error, OSError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _snapshot_member(infos: list[zipfile.ZipInfo]) -> str | None:
    """The debug bundle's final snapshot (`session/after.jsonl`, else `before.jsonl`)."""
    names = {i.filename for i in infos}
    for name in ("session/after.jsonl", "session/before.jsonl"):
        if DEBUG_ROOT + name in names:
            return DEBUG_ROOT + name
    return None


def _import_entry(
    ctx: SourceContext, zf: zipfile.ZipFile, info: zipfile.ZipInfo, budget: _Budget, archive_id: str,
    session_id: str | None, is_debug_bundle: bool, snapshot_member: str | None,
) -> None:  # fmt: skip
    name = info.filename
    if is_debug_bundle and (name == snapshot_member or re.fullmatch(r"debug_bundle/logs/[^/]+\.jsonl", name)):
        budget.left -= info.file_size  # a bomb was refused above, so the declared size holds
        if budget.left < 0:
            raise OverflowError("archive budget exhausted")
        importer = import_snapshots if name == snapshot_member else import_logs
        with zf.open(info) as member:  # streamed line by line, never read whole
            importer(ctx, member)
        return
    path = name.removeprefix(DEBUG_ROOT + "filesystem/") if is_debug_bundle else name
    keep = ctx.limits.max_file_bytes
    data, digest, size = _read(zf, info, keep, budget)
    truncated = size > keep
    content: str | None = None
    blob: bytes | None = None
    is_binary = b"\x00" in data[:keep]
    if not is_binary:
        try:
            text = data[:keep].decode("utf-8")
        except UnicodeDecodeError:
            is_binary = True
        else:
            content = None if truncated else text
    if is_binary and not truncated:
        blob = data
    y, mo, d, h, mi, s = info.date_time
    ctx.insert("files", {
        "archive_id": archive_id, "session_id": session_id, "path": path, "size_bytes": size, "content": content,
        "is_binary": int(is_binary), "data": blob, "sha256": digest,
        "modified_at": f"{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}", "truncated": int(truncated),
        "source_id": ctx.source_id, "correlation": "explicit" if session_id else None,
    })  # fmt: skip
    if truncated:
        ctx.warn(f"{path}: {size} bytes, above max_file_bytes={keep}; stored without content")
