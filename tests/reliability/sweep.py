"""Everything capsem writes or exports about the sessions under a CAPSEM_HOME, as text to search
for secrets: every file (and every value of every SQLite table, zstd frames decoded, every body
as `capsem show-call` reads it), the `capsem vacuum` archives unpacked, search.db, and the HAR,
JSONL, Parquet, `view --html`, bundle and OTLP (`--content`) exports of each session."""

from __future__ import annotations

import base64
import gzip
import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow.parquet as pq
import zstandard

from capsem.store.bodies import read_body
from tests.cli.conftest import run
from tests.conftest import environ

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
Corpus = list[tuple[str, bytes]]
"""(where, what was found there) pairs."""


def b64_forms(secret: str) -> list[bytes]:
    """The base64 (standard and URL-safe) of `secret` at each of the three alignments it can have
    inside a longer encoded blob (the groups that hold only its bytes)."""
    data = secret.encode()
    forms = []
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data)
        core = encoded[4 if shift else 0 : len(encoded) - 4]
        forms += [core, core.replace(b"+", b"-").replace(b"/", b"_")]
    return [f for f in forms if len(f) >= 8]


def found_in(corpus: Corpus, secret: str) -> list[str]:
    """Where `secret` (or its base64) appears."""
    needles = [secret.encode(), *b64_forms(secret)]
    return [where for where, data in corpus if any(n in data for n in needles)]


def _tables(path: Path) -> Iterator[tuple[str, bytes]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            cursor = conn.execute(f'SELECT * FROM "{table}"')
            values = []
            for row in cursor:
                for value in row:
                    if isinstance(value, bytes) and value[:4] == ZSTD_MAGIC:
                        value = zstandard.ZstdDecompressor().decompress(value)
                    values.append(value if isinstance(value, bytes) else str(value).encode())
            yield f"{path}:{table}", b"\n".join(values)
        if "event_body_blobs" in tables:
            blobs = conn.execute("SELECT row_id, direction, source_table FROM event_body_blobs").fetchall()
            for row_id, direction, source in blobs:
                body, _ = read_body(conn, row_id, direction, source)
                yield f"{path}:{source} {row_id} {direction} body", body
    finally:
        conn.close()


def files(root: Path) -> Corpus:
    """Every file under `root`: its bytes; a SQLite database also table by table; a `.gz` unpacked
    (and, when it is a database, table by table); a Parquet file value by value."""
    out: Corpus = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        out.append((str(path), data))
        if data[:16] == b"SQLite format 3\0":
            out += list(_tables(path))
        elif path.suffix == ".gz":
            unpacked = path.with_suffix(path.suffix + ".unpacked")
            unpacked.write_bytes(gzip.decompress(data))
            out.append((str(unpacked), unpacked.read_bytes()))
            if unpacked.read_bytes()[:16] == b"SQLite format 3\0":
                out += list(_tables(unpacked))
            unpacked.unlink()
        elif path.suffix == ".parquet":
            table = pq.read_table(path)
            out.append((f"{path} (values)", json.dumps(table.to_pylist(), default=str).encode()))
    return out


class _Collector(BaseHTTPRequestHandler):
    received: list[bytes]

    def do_POST(self) -> None:
        self.received.append(self.rfile.read(int(self.headers.get("content-length", 0))))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@contextmanager
def otlp_collector() -> Iterator[tuple[str, list[bytes]]]:
    """A local OTLP/HTTP endpoint that keeps every request body it is sent."""
    received: list[bytes] = []
    handler = type("Handler", (_Collector,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", received
    finally:
        server.shutdown()
        server.server_close()


def home_of(home: Path) -> AbstractContextManager[None]:
    return environ(CAPSEM_HOME=str(home))


def everything(home: Path, out: Path) -> Corpus:
    """Export every session under `home` every way into `out`, vacuum them, search them, and
    return every file of both folders (see module doc)."""
    out.mkdir(parents=True, exist_ok=True)
    sessions = sorted(p.parent.name for p in (home / "sessions").glob("*/session.db"))
    assert sessions
    corpus: Corpus = []
    with home_of(home), otlp_collector() as (endpoint, received):
        for sid in sessions:
            run("export", "har", sid, "-o", str(out / f"{sid}.har"))
            run("export", "jsonl", sid, "-o", str(out / f"{sid}.jsonl"))
            run("view", sid, "--html", str(out / f"{sid}.html"))
            run("bundle", "create", str(home / "sessions" / sid), "-o", str(out / f"{sid}.bundle.db"))
            run("export", "otlp", sid, "--endpoint", endpoint, "--content")
        run("export", "parquet", "-o", str(out / "parquet"))
        run("search", "anything")  # builds search.db
        assert received, "the OTLP export sent nothing"
        corpus += [(f"otlp request {i}", body) for i, body in enumerate(received)]
        assert f"vacuumed {len(sessions)}" in run("vacuum")
        run("search", "anything")  # and indexes the archives
    return corpus + files(home) + files(out)
