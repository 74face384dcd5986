"""What kind of artifact a file is, from its content only (names lie: logs may be `.jsonl`,
snapshots `.log`, session databases `.gz`).

| kind | recognised by |
|---|---|
| capsem_session | SQLite (or gzipped SQLite) with capsem's `net_events`/`model_calls` |
| capsem_main | SQLite with `sessions` and `ai_usage` (capsem's main.db) |
| bundle | SQLite with `bundle_meta` (a bundle; never imported into another) |
| archive | a zip file |
| snapshot | JSON lines with a `slices` key (weakincentives `dump_session`) |
| log | JSON lines with timestamp, level, logger and message (the six-key format) |
| jsonl | any other JSON-object lines (generic logs) |
| proc_trace | JSON lines with `event: "snapshot"` and a `pid` (AutoSkillit proc_trace.jsonl) |
| anomalies | JSON lines with `event: "anomaly"` and a `kind` (AutoSkillit anomalies.jsonl) |
| diag_sessions | AutoSkillit summary.json (one document) or sessions.jsonl (one line per session) |
| document | any other JSON document (kept whole in `documents`) |
| unknown | anything else (recorded in `sources`, not imported) |
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assembler.bundle.sources.base import GZIP_MAGIC, open_binary

SQLITE_MAGIC = b"SQLite format 3\x00"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
SNIFF_LINES = 20
SNIFF_LINE_BYTES = 1024 * 1024
DOCUMENT_SNIFF_BYTES = 16 * 1024 * 1024
LOG_KEYS = frozenset({"timestamp", "level", "logger", "message"})


@dataclass(frozen=True)
class Detection:
    kind: str
    detail: str
    """Why: what in the content decided the kind."""


def detect(path: Path) -> Detection:
    """The kind of artifact `path` holds (see the module table)."""
    try:
        with path.open("rb") as f:
            head = f.read(16)
        if head.startswith(GZIP_MAGIC):
            try:
                with gzip.open(path, "rb") as g:
                    inner = g.read(16)
            except (OSError, EOFError, zlib.error) as exc:
                return Detection("unknown", f"damaged gzip: {exc}")
            if inner.startswith(SQLITE_MAGIC):
                return Detection("capsem_session", "gzipped SQLite (a vacuumed session.db.gz)")
            return _detect_text(path, gzipped=True)
        if head.startswith(SQLITE_MAGIC):
            return _detect_sqlite(path)
        if head.startswith(ZIP_MAGICS):
            return Detection("archive", "zip file")
        return _detect_text(path, gzipped=False)
    except OSError as exc:
        return Detection("unknown", f"cannot read: {exc}")


def _detect_sqlite(path: Path) -> Detection:
    try:
        uri = f"{path.resolve().as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return Detection("unknown", f"SQLite file that cannot be read: {exc}")
    if "bundle_meta" in tables:
        return Detection("bundle", "a capsem bundle (bundle_meta)")
    if tables & {"net_events", "model_calls"}:
        return Detection("capsem_session", "SQLite with net_events/model_calls")
    if {"sessions", "ai_usage"} <= tables:
        return Detection("capsem_main", "SQLite with sessions and ai_usage (main.db)")
    return Detection("unknown", f"SQLite without capsem tables ({', '.join(sorted(tables)[:5]) or 'empty'})")


def classify_record(obj: Any) -> str | None:
    """The kind a single JSON line points to, or None when it says nothing."""
    if not isinstance(obj, dict):
        return None
    if "slices" in obj and ("tags" in obj or "version" in obj or "created_at" in obj):
        return "snapshot"
    if obj.get("event") == "snapshot" and "pid" in obj:
        return "proc_trace"
    if obj.get("event") == "anomaly" and "kind" in obj:
        return "anomalies"
    if "dir_name" in obj and ("snapshot_count" in obj or "anomaly_count" in obj):
        return "diag_sessions"
    if obj.keys() >= LOG_KEYS:
        return "log"
    return "jsonl"


def _detect_text(path: Path, *, gzipped: bool) -> Detection:
    seen: list[str] = []
    lines = 0
    with open_binary(path) as f:
        for _ in range(SNIFF_LINES * 5):
            line = f.readline(SNIFF_LINE_BYTES)
            if not line:
                break
            if not line.strip():
                continue
            lines += 1
            try:
                kind = classify_record(json.loads(line))
            except (ValueError, RecursionError):
                kind = None
            if kind:
                seen.append(kind)
            if len(seen) >= SNIFF_LINES or lines >= SNIFF_LINES * 2:
                break
    zipped = "gzipped " if gzipped else ""
    if seen:
        # the first specific kind wins over generic lines (a log may start with a non-log line)
        specific = [k for k in seen if k != "jsonl"]
        kind = specific[0] if specific else "jsonl"
        return Detection(kind, f"{zipped}JSON lines ({len(seen)} sniffed: {', '.join(sorted(set(seen)))})")
    return _detect_document(path, zipped)


def _detect_document(path: Path, zipped: str) -> Detection:
    with open_binary(path) as f:
        data = f.read(DOCUMENT_SNIFF_BYTES + 1)
    if len(data) > DOCUMENT_SNIFF_BYTES:
        return Detection("unknown", f"{zipped}text that is not JSON lines (too big to parse whole)")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return Detection("unknown", f"{zipped}neither JSON lines nor a JSON document")
    if classify_record(doc) == "diag_sessions":
        return Detection("diag_sessions", f"{zipped}JSON document with dir_name (AutoSkillit summary.json)")
    return Detection("document", f"{zipped}JSON document ({type(doc).__name__})")
