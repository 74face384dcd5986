"""`capsem query-session`: read-only SQL on a session database.

Read-only for real: the statement must start with SELECT, WITH, EXPLAIN or VALUES, only one
statement is accepted, the connection is opened `mode=ro` with `query_only`, and a progress
handler stops queries that run too long.

One statement's memory is bounded too: each value (string or blob) by the connection's
`SQLITE_LIMIT_LENGTH`, SQLite's heap during the statement by `sqlite3_hard_heap_limit64`
(process-wide, so it is set for the statement only and restored after; where the sqlite3
module does not export it, only the other two bounds apply), and the rows kept by a budget
on their size.
"""

from __future__ import annotations

import _sqlite3
import csv
import ctypes
import functools
import io
import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from assembler.sessiondb import open_session

MiB = 1024 * 1024
MAX_VALUE_BYTES = 64 * MiB
"""The largest string or blob one statement may read or make."""
MAX_HEAP_BYTES = 256 * MiB
"""SQLite memory one statement may use on top of what is in use when it starts."""
MAX_RESULT_BYTES = 256 * MiB
"""The size of the rows kept (as rendered by `cell`)."""

_ALLOWED = re.compile(r"^\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*(select|with|explain|values)\b", re.I | re.S)


_STATEMENT = re.compile(
    r"^\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*(alter|analyze|attach|begin|commit|create|delete|detach|drop|end|insert|"
    r"pragma|reindex|release|replace|rollback|savepoint|update|vacuum)\b",
    re.I | re.S,
)
"""Statements SQLite knows that query-session refuses (anything else is compiled for SQLite's own
error message, without running it)."""


class QueryError(ValueError):
    """A query that is not allowed or failed."""


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool


def check_read_only(sql: str) -> None:
    """Raise QueryError unless `sql` is one read-only statement."""
    if not _ALLOWED.match(sql):
        raise QueryError(
            "only SELECT, WITH, EXPLAIN or VALUES queries are allowed (query-session never writes)"
        )
    if not sqlite3.complete_statement(sql.rstrip().rstrip(";") + "\n;"):
        raise QueryError("incomplete statement (an unclosed quote or comment?)")
    if _has_second_statement(sql):
        raise QueryError("only one statement is allowed")


def _has_second_statement(sql: str) -> bool:
    """True when a `;` outside quotes and comments separates two statements."""
    code = re.sub(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?(?:\*/|$)", " ", sql, flags=re.S)
    return ";" in code.strip().rstrip(";")


def _shown(value: Any) -> Any:
    if isinstance(value, bytes):
        return f"<blob {len(value)} bytes>"
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value


def run_query(
    session_id: str,
    sql: str,
    params: list[str] | None = None,
    *,
    max_rows: int = 10000,
    timeout: float = 10.0,
) -> QueryResult:
    """Run one read-only query on a session; at most `max_rows` rows.

    Raises:
        QueryError: SQLite's own message for a statement it cannot parse (a typo), the tables
        for `no such table`, or why the statement is not allowed.
    """
    if not sql.strip():
        raise QueryError("empty query: give one SELECT, WITH, EXPLAIN or VALUES statement")
    with open_session(session_id) as conn:
        if not _ALLOWED.match(sql) and not _STATEMENT.match(sql):
            _compile(conn, sql)  # a typo gets SQLite's message, not "only SELECT..."
        try:
            return query_connection(conn, sql, params or [], max_rows=max_rows, timeout=timeout)
        except QueryError as exc:
            if "no such table" in str(exc):
                raise QueryError(
                    f"{exc} (tables: {', '.join(tables(conn))}; capsem schema lists their columns)"
                ) from exc
            raise


def _compile(conn: sqlite3.Connection, sql: str) -> None:
    """Let SQLite parse `sql` without running it; raise its own error when it cannot."""
    try:
        conn.execute("EXPLAIN " + sql)
    except sqlite3.Error as exc:
        raise QueryError(f"query failed: {exc}") from exc
    except sqlite3.Warning:  # several statements: check_read_only says so
        pass


def tables(conn: sqlite3.Connection) -> list[str]:
    """The session's tables and views, by name (capsem's own bookkeeping left out)."""
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' "
        "AND name NOT LIKE '\\_%' ESCAPE '\\' ORDER BY type, name"
    )]  # fmt: skip


def schema(session_id: str, table: str | None = None) -> dict[str, list[tuple[str, str]]]:
    """{table or view: [(column, type)]} of a session's database (one table when `table`).

    Raises:
        QueryError: no such table, naming the tables there are.
    """
    with open_session(session_id) as conn:
        names = tables(conn)
        if table is not None and table not in names:
            raise QueryError(f"no such table: {table} (tables: {', '.join(names)})")
        return {name: [(r[1], r[2]) for r in conn.execute(f'PRAGMA table_info("{name}")')]
                for name in names if table in (None, name)}  # fmt: skip


# Long: the limits set, the rows read and every SQLite failure named in one try, so the limits are
# always reset.
def query_connection(
    conn: sqlite3.Connection,
    sql: str,
    params: Sequence[Any] = (),
    *,
    max_rows: int = 10000,
    timeout: float = 10.0,
    cell: Callable[[Any], Any] | None = None,
    max_value_bytes: int = MAX_VALUE_BYTES,
    max_heap_bytes: int = MAX_HEAP_BYTES,
    max_result_bytes: int = MAX_RESULT_BYTES,
) -> QueryResult:
    """One read-only statement on an open connection, at most `max_rows` rows, stopped after
    `timeout` seconds. `cell` renders each value (default: blobs as `<blob N bytes>`). Memory
    is bounded by `max_value_bytes` per value, `max_heap_bytes` of SQLite memory and
    `max_result_bytes` of rendered rows.

    Raises:
        QueryError: not one read-only statement, or it failed, ran out of time or memory.
    """
    check_read_only(sql)
    cell = cell or _shown
    deadline = time.monotonic() + timeout
    rows: list[tuple[Any, ...]] = []
    truncated, size = False, 0
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    old_length = conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
    try:
        with _heap_limit(max_heap_bytes):
            cur = conn.execute(sql, tuple(params))
            for row in cur:
                if len(rows) == max_rows:
                    truncated = True
                    break
                if time.monotonic() > deadline:
                    raise _out_of_time(timeout)
                rows.append(tuple(cell(v) for v in row))
                size += sum(_size(v) for v in rows[-1])
                if size > max_result_bytes:
                    raise QueryError(
                        f"query result exceeds {_mib(max_result_bytes)} (after {len(rows)} rows): "
                        "select fewer rows or smaller columns"
                    )
    except (sqlite3.ProgrammingError, sqlite3.Warning) as exc:  # bind parameter count, two statements
        raise QueryError(f"query failed: {exc}") from exc
    except sqlite3.DataError as exc:  # SQLITE_TOOBIG
        raise QueryError(
            f"query failed: a string or blob would exceed {_mib(max_value_bytes)} ({exc})"
        ) from exc
    except MemoryError as exc:  # SQLITE_NOMEM: the heap limit
        raise QueryError(f"query failed: it needs more than {_mib(max_heap_bytes)} of memory") from exc
    except sqlite3.OperationalError as exc:
        if time.monotonic() > deadline:
            raise _out_of_time(timeout) from exc
        raise QueryError(f"query failed: {exc}") from exc
    except sqlite3.Error as exc:
        raise QueryError(f"query failed: {exc}") from exc
    finally:
        conn.set_progress_handler(None, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, old_length)
    return QueryResult(_unique([d[0] for d in cur.description or []]), rows, truncated)


def _out_of_time(timeout: float) -> QueryError:
    return QueryError(f"query stopped after {timeout:g} s (use --timeout for more)")


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | bytes) else 8


def _mib(n: int) -> str:
    return f"{n / MiB:g} MiB"


_HEAP_LOCK = threading.Lock()


@functools.cache
def _heap_api() -> tuple[Callable[[int], int], Callable[[], int]] | None:
    """sqlite3_hard_heap_limit64 and sqlite3_memory_used of the SQLite that `sqlite3` uses
    (looked up through its extension module, which links or embeds it), if exported."""
    try:
        lib = ctypes.CDLL(_sqlite3.__file__)
        limit, used = lib.sqlite3_hard_heap_limit64, lib.sqlite3_memory_used
    except (OSError, AttributeError):
        return None
    limit.argtypes, limit.restype = [ctypes.c_int64], ctypes.c_int64
    used.argtypes, used.restype = [], ctypes.c_int64
    return limit, used


@contextmanager
def _heap_limit(extra: int) -> Iterator[None]:
    """Cap SQLite's (process-wide) heap at what is in use now plus `extra`, then put the old
    cap back; statements that use it run one at a time."""
    api = _heap_api()
    if api is None:
        yield
        return
    limit, used = api
    with _HEAP_LOCK:
        old = limit(-1)
        new = used() + extra
        limit(new if old <= 0 else min(old, new))
        try:
            yield
        finally:
            limit(old)


def _unique(names: list[str]) -> list[str]:
    """Column names made unique (`n`, `n_2`...) so JSON objects keep every column."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return out


def to_json(result: QueryResult) -> str:
    return json.dumps(
        [dict(zip(result.columns, r, strict=True)) for r in result.rows], ensure_ascii=False, indent=2
    )


def to_csv(result: QueryResult) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(result.columns)
    writer.writerows(result.rows)
    return out.getvalue()
