"""`capsem export parquet`: one Parquet file per table across sessions, for DuckDB, ClickHouse or Spark.

Every table (and view) of every chosen session.db, gzipped or not, goes to `DIR/<table>.parquet`
with a `session_id` column first; main.db's rows of those sessions go to `sessions.parquet`, and
every kept model and MCP call body, decoded whole, to `bodies.parquet` (`body_chunks` and
`event_body_blobs` are how session.db stores them compactly; they are exported too).
Column types follow the declared SQLite types (INTEGER → int64, REAL → double, TEXT → string,
BLOB → binary); a column whose values do not fit its declared type (SQLite allows it) is written
as strings rather than lose a value. Sessions written by older capsem versions lack newer
columns: those are null in their rows.

Each session's tables are first streamed (in batches of rows) to part files in a temporary
directory inside `DIR`, then each table's parts are joined into one file under a temporary name
and renamed into place, so an existing export is replaced only by a complete one.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from assembler.sessiondb import MainDbMissing, open_main, open_session
from capsem.private import make_private, private_dir
from capsem.store.bodies import read_body
from capsem.store.schema import STORAGE_TABLES

BATCH_ROWS = 20_000
_SKIPPED = (
    "sqlite_sequence",
    "_capsem_migrations",
    *STORAGE_TABLES,
)  # bodies.parquet and item_contents hold them


@dataclass
class ParquetExport:
    """What was written: rows per table file, and the sessions that could not be read (with why)."""

    rows: dict[str, int] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    sessions: int = 0
    failed: dict[str, str] = field(default_factory=dict)


def arrow_type(declared: str | None) -> pa.DataType | None:
    """The Arrow type of a declared SQLite column type (SQLite's affinity rules); None: infer."""
    decl = (declared or "").upper()
    if "INT" in decl:
        return pa.int64()
    if any(t in decl for t in ("CHAR", "CLOB", "TEXT")):
        return pa.string()
    if "BLOB" in decl:
        return pa.binary()
    if any(t in decl for t in ("REAL", "FLOA", "DOUB")):
        return pa.float64()
    return None


def column(values: list[Any], declared: pa.DataType | None) -> pa.Array:
    """`values` as an Arrow array of the declared type, or as strings when they do not fit it."""
    try:
        return pa.array(values, type=declared) if declared is not None else pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([None if v is None else v.hex() if isinstance(v, bytes) else str(v) for v in values],
                        type=pa.string())  # fmt: skip


def batch(names: list[str], types: list[pa.DataType | None], rows: list[tuple],
          session_id: str | None = None) -> pa.RecordBatch:  # fmt: skip
    """Rows of one table as a record batch (with `session_id` first when given and the table has none)."""
    arrays = [column([r[i] for r in rows], types[i]) for i in range(len(names))]
    if session_id is None or "session_id" in names:
        return pa.RecordBatch.from_arrays(arrays, names=names)
    return pa.RecordBatch.from_arrays([pa.array([session_id] * len(rows), type=pa.string()), *arrays],
                                      names=["session_id", *names])  # fmt: skip


def tables(conn: sqlite3.Connection) -> list[str]:
    """The tables and views a session.db holds, by name."""
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name")
        if r[0] not in _SKIPPED]  # fmt: skip


def table_batches(conn: sqlite3.Connection, session_id: str, table: str) -> Iterator[pa.RecordBatch]:
    info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
    names, types = [r[1] for r in info], [arrow_type(r[2]) for r in info]
    cursor = conn.execute(f'SELECT * FROM "{table}"')
    first = True
    while (rows := cursor.fetchmany(BATCH_ROWS)) or first:
        first = False
        yield batch(names, types, [tuple(r) for r in rows], session_id)


def _write_parts(base: Path, batches: Iterator[pa.RecordBatch]) -> list[Path]:
    """Batches streamed into part files `base.N.parquet` (a new part when a batch's types differ
    from the part's, e.g. a column that fell back to strings); the parts written."""
    paths: list[Path] = []
    writer: pq.ParquetWriter | None = None
    try:
        for b in batches:
            if writer is None or writer.schema != b.schema:
                if writer is not None:
                    writer.close()
                paths.append(base.with_name(f"{base.name}.{len(paths)}.parquet"))
                writer = pq.ParquetWriter(paths[-1], b.schema)
            writer.write_batch(b)
    finally:
        if writer is not None:
            writer.close()
    return paths


def _unified(schemas: list[pa.Schema]) -> pa.Schema:
    """One schema for all parts: columns in first-seen order, a column whose types differ as strings."""
    fields: dict[str, pa.Field] = {}
    for schema in schemas:
        for f in schema:
            seen = fields.get(f.name)
            if seen is None or pa.types.is_null(seen.type):
                fields[f.name] = pa.field(f.name, f.type)
            elif seen.type != f.type and not pa.types.is_null(f.type):
                fields[f.name] = pa.field(f.name, pa.string())
    return pa.schema(
        [pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f for f in fields.values()]
    )


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = []
    for f in schema:
        if f.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        col = table.column(f.name)
        if col.type != f.type:
            col = col.cast(f.type) if not pa.types.is_binary(col.type) else pa.array(
                [None if v is None else v.hex() for v in col.to_pylist()], type=f.type)  # fmt: skip
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)


def join_parts(parts: list[Path], target: Path) -> int:
    """The parts of one table as one Parquet file at `target` (written aside, then renamed)."""
    schema = _unified([pq.read_schema(p) for p in parts])
    tmp = target.with_name(f".{target.name}.tmp")
    total = 0
    with pq.ParquetWriter(tmp, schema) as writer:
        for part in parts:
            source = pq.ParquetFile(part)
            for group in range(source.num_row_groups):  # one written batch at a time
                table = _conform(source.read_row_group(group), schema)
                writer.write_table(table)
                total += table.num_rows
    os.replace(make_private(tmp), target)
    return total


BODY_COLUMNS = ("id", "event_id", "owner_event_id", "source_table", "row_id", "direction", "size", "sha256",
                "truncated", "content_type")  # fmt: skip
_BODY_TYPES = [pa.int64(), pa.string(), pa.string(), pa.string(), pa.int64(), pa.string(), pa.int64(), pa.string(),
               pa.int64(), pa.string(), pa.string(), pa.bool_(), pa.string()]  # fmt: skip
_BODY_BATCH_BYTES = 8 << 20


def body_batches(conn: sqlite3.Connection, session_id: str) -> Iterator[pa.RecordBatch]:
    """The session's kept bodies decoded whole (`bodies.parquet`): the `event_body_blobs` columns
    that describe a body, then `body` (its text; invalid UTF-8 replaced, `utf8` false then) and
    `error` (why a body could not be read back). A few bodies in memory at a time."""
    names = [*BODY_COLUMNS, "body", "utf8", "error"]
    rows: list[tuple] = []
    held = 0
    sql = f"SELECT {', '.join(BODY_COLUMNS)} FROM event_body_blobs ORDER BY id"
    for blob in conn.execute(sql).fetchall():
        text, utf8, error = None, None, None
        try:
            found = read_body(conn, blob["row_id"], blob["direction"], blob["source_table"])
        except (ValueError, sqlite3.OperationalError) as exc:  # pieces missing; stored by another version
            found, error = None, str(exc)
        if found is not None:
            try:
                text, utf8 = found[0].decode("utf-8"), True
            except UnicodeDecodeError:
                text, utf8 = found[0].decode("utf-8", "replace"), False
        rows.append((*blob, text, utf8, error))
        held += len(text or "")
        if held >= _BODY_BATCH_BYTES:
            yield batch(names, _BODY_TYPES, rows, session_id)
            rows, held = [], 0
    if rows or not held:  # an empty batch for a session without bodies: the file still has its columns
        yield batch(names, _BODY_TYPES, rows, session_id)


def _main_rows(session_ids: list[str]) -> Iterator[pa.RecordBatch]:
    try:
        with open_main() as conn:
            info = conn.execute("PRAGMA table_info(sessions)").fetchall()
            names, types = [r[1] for r in info], [arrow_type(r[2]) for r in info]
            for start in range(0, len(session_ids), 500):
                ids = session_ids[start : start + 500]
                marks = ", ".join("?" * len(ids))
                rows = [tuple(r) for r in conn.execute(f"SELECT * FROM sessions WHERE id IN ({marks})", ids)]
                yield batch(names, types, rows)
    except MainDbMissing:
        return


def export_parquet(session_ids: list[str], out_dir: Path,
                   on_progress: Callable[[int, int, str], None] | None = None) -> ParquetExport:  # fmt: skip
    """Write one Parquet file per table of the sessions into `out_dir`; `on_progress(done, total,
    session)` after each session. A session whose database cannot be read is skipped and named in
    `failed`; the others are exported.

    Raises:
        OSError: when `out_dir` cannot be created or written.
    """
    private_dir(out_dir)
    result = ParquetExport()
    work = Path(tempfile.mkdtemp(prefix=".capsem-parquet-", dir=out_dir))
    try:
        parts: dict[str, list[Path]] = {}
        for n, session_id in enumerate(session_ids, 1):
            written: dict[str, list[Path]] = {}
            try:
                with open_session(session_id) as conn:
                    for table in tables(conn):
                        written[table] = _write_parts(
                            work / f"{table}.{n:06d}", table_batches(conn, session_id, table)
                        )
                    if "event_body_blobs" in written:
                        written["bodies"] = _write_parts(
                            work / f"bodies.{n:06d}", body_batches(conn, session_id)
                        )
            except (sqlite3.Error, RuntimeError, LookupError, ValueError) as exc:
                result.failed[session_id] = str(exc)
                for paths in written.values():
                    for p in paths:
                        p.unlink(missing_ok=True)
            else:
                result.sessions += 1
                for table, paths in written.items():
                    parts.setdefault(table, []).extend(paths)
            if on_progress:
                on_progress(n, len(session_ids), session_id)
        exported = [s for s in session_ids if s not in result.failed]
        if main := _write_parts(work / "sessions", _main_rows(exported)):
            parts["sessions"] = main
        for table, paths in sorted(parts.items()):
            target = out_dir / f"{table}.parquet"
            result.rows[table] = join_parts(paths, target)
            result.files.append(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result
