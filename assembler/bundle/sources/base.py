"""What every reader shares: the import context, safe line reading, time and JSON helpers.

A reader gets one `SourceContext` per input file. It inserts rows through `ctx.insert`, which
runs every text value through capsem's `Scrubber` (secrets are redacted again on the way in,
whatever the producer did), counts records, and turns problems into warnings: a malformed line
is counted in `sources.errors`, logged, and skipped; the rest of the file is still imported.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from assembler.bundle.schema import quote
from capsem.ids import rfc3339
from capsem.redact import Scrubber

logger = logging.getLogger("assembler.bundle")

GZIP_MAGIC = b"\x1f\x8b"
MAX_WARNINGS_KEPT = 50


@dataclass(frozen=True)
class Limits:
    """Size caps that keep a hostile or huge input from exhausting memory or disk."""

    max_line_bytes: int = 8 * 1024 * 1024
    """A JSON line longer than this is skipped as malformed."""
    max_file_bytes: int = 1024 * 1024
    """File contents above this (from an archive) are stored as metadata only."""
    max_archive_bytes: int = 512 * 1024 * 1024
    """Total uncompressed bytes read from one archive; the rest of it is skipped."""
    max_archive_entries: int = 20_000
    max_compression_ratio: int = 200
    """An archive entry that inflates more than this (and past 1 MiB) is refused as a bomb."""
    max_document_bytes: int = 16 * 1024 * 1024
    """A whole-file JSON document (summary.json...) above this is not parsed."""


@dataclass
class SourceContext:
    """One input being imported: where rows go and what went wrong."""

    conn: sqlite3.Connection
    scrubber: Scrubber
    source_id: int
    path: Path
    limits: Limits
    siblings: Mapping[str, list[Path]] = field(default_factory=dict)
    """Every input of the build by detected kind (a reader may look up related files)."""
    records: int = 0
    errors: int = 0
    warnings: list[str] = field(default_factory=list)
    warning_count: int = 0

    def warn(self, message: str) -> None:
        """Record a warning for this source (kept in `sources.warnings` and the build report, and
        logged)."""
        self.warning_count += 1
        message = self.scrubber.scrub(message) or message  # names and errors may quote a secret too
        logger.warning("%s: %s", self.path, message)
        if len(self.warnings) < MAX_WARNINGS_KEPT:
            self.warnings.append(message)

    def malformed(self, line: int | None, why: str) -> None:
        """Count a record that could not be used and warn about it."""
        self.errors += 1
        self.warn(f"line {line}: {why}; skipped" if line is not None else f"{why}; skipped")

    def scrub(self, value: Any) -> Any:
        return self.scrubber.scrub(value) if isinstance(value, str) else value

    def insert(
        self, table: str, row: Mapping[str, Any], *, or_ignore: bool = False, count: bool = True
    ) -> int:
        """Insert one row (text values scrubbed); return its rowid (0 when ignored)."""
        names = list(row)
        sql = (
            f"INSERT {'OR IGNORE ' if or_ignore else ''}INTO {quote(table)} "
            f"({', '.join(quote(n) for n in names)}) VALUES ({', '.join('?' * len(names))})"
        )
        cur = self.conn.execute(sql, [self.scrub(row[n]) for n in names])
        if cur.rowcount == 0:
            return 0
        if count:
            self.records += 1
        return cur.lastrowid or 0

    def ensure_session(self, session_id: str, created_at: str | None, kind: str, **extra: Any) -> None:
        """Make sure `sessions` has a row for `session_id`; fields it already has are kept, empty ones
        are filled (a child seen first as an event owner gets its parent from its own line later)."""
        row = {"session_id": session_id, "created_at": created_at or "", "kind": kind,
               "source_id": self.source_id, **extra}  # fmt: skip
        names = list(row)
        keep = ", ".join(f"{quote(n)} = COALESCE(NULLIF(sessions.{quote(n)}, ''), excluded.{quote(n)})"
                         for n in names[1:])  # fmt: skip
        self.conn.execute(
            f"INSERT INTO sessions ({', '.join(quote(n) for n in names)}) VALUES ({', '.join('?' * len(names))}) "
            f"ON CONFLICT(session_id) DO UPDATE SET {keep}",
            [self.scrub(row[n]) for n in names],
        )


def open_binary(path: Path) -> IO[bytes]:
    """The file's bytes, transparently gunzipped."""
    with path.open("rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == GZIP_MAGIC else path.open("rb")


def json_lines(ctx: SourceContext, stream: IO[bytes]) -> Iterator[tuple[int, Any, str]]:
    """(line number, parsed value, text) of each JSON line; bad lines are counted and skipped.

    A line longer than `limits.max_line_bytes` is never held in memory whole.
    """
    limit = ctx.limits.max_line_bytes
    number = 0
    while True:
        try:
            chunk = stream.readline(limit + 1)
        except (OSError, EOFError) as exc:  # a truncated or damaged gzip stream
            ctx.malformed(number + 1, f"cannot read further: {exc}")
            return
        if not chunk:
            return
        number += 1
        if len(chunk) > limit and not chunk.endswith(b"\n"):
            while chunk and not chunk.endswith(b"\n"):  # drop the rest of the over-long line
                chunk = stream.readline(1 << 20)
            ctx.malformed(number, f"longer than {limit} bytes")
            continue
        try:
            text = chunk.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            ctx.malformed(number, f"not UTF-8 ({exc.reason} at byte {exc.start})")
            continue
        if not text:
            continue
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            ctx.malformed(number, f"not JSON ({why})")
            continue
        yield number, value, text


def read_document(ctx: SourceContext, stream: IO[bytes]) -> Any:
    """A whole-file JSON document, or None (with a warning) when too big or not JSON."""
    data = stream.read(ctx.limits.max_document_bytes + 1)
    if len(data) > ctx.limits.max_document_bytes:
        ctx.malformed(None, f"JSON document larger than {ctx.limits.max_document_bytes} bytes")
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        ctx.malformed(None, f"not a JSON document ({exc})")
        return None


def dumps(value: Any) -> str | None:
    """Compact JSON text (UTF-8 kept), or None for None."""
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def normalize_ts(value: Any) -> str | None:
    """Any timestamp (ISO 8601 with or without zone, `Z`, Unix seconds or milliseconds) as capsem's
    UTC `YYYY-MM-DDTHH:MM:SS.ffffffZ`, so that times from every source sort together. A naive
    time is taken as UTC. None when the value is not a time."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        if isinstance(value, int | float):
            seconds = value / 1000 if value > 1e11 else value  # milliseconds since the epoch
            return rfc3339(datetime.fromtimestamp(seconds, UTC))
        if isinstance(value, str) and value.strip():
            text = value.strip().replace(" ", "T", 1)
            moment = datetime.fromisoformat(text)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return rfc3339(moment)
    except (ValueError, OverflowError, OSError):
        return None
    return None


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return None


def as_text(value: Any) -> str | None:
    """Text as is; other JSON values as compact JSON; None stays None."""
    if value is None or isinstance(value, str):
        return value
    return dumps(value)


def text_stream(data: bytes) -> IO[bytes]:
    """In-memory bytes as a readable stream (archive members handed to line readers)."""
    return io.BytesIO(data)
