"""`capsem query-session`: read-only SQL on a session database.

Read-only for real: the statement must start with SELECT, WITH, EXPLAIN or VALUES, only one
statement is accepted, the connection is opened `mode=ro` with `query_only`, and a progress
handler stops queries that run too long.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from assembler.sessiondb import open_session

_ALLOWED = re.compile(r"^\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*(select|with|explain|values)\b", re.I | re.S)


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
    """Run one read-only query on a session; at most `max_rows` rows."""
    check_read_only(sql)
    with open_session(session_id) as conn:
        return query_connection(conn, sql, params or [], max_rows=max_rows, timeout=timeout)


def query_connection(
    conn: sqlite3.Connection,
    sql: str,
    params: Sequence[Any] = (),
    *,
    max_rows: int = 10000,
    timeout: float = 10.0,
    cell: Callable[[Any], Any] | None = None,
) -> QueryResult:
    """One read-only statement on an open connection, at most `max_rows` rows, stopped after
    `timeout` seconds. `cell` renders each value (default: blobs as `<blob N bytes>`).

    Raises:
        QueryError: not one read-only statement, or it failed.
    """
    check_read_only(sql)
    deadline = time.monotonic() + timeout
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10000)
    try:
        cur = conn.execute(sql, tuple(params))
        rows = cur.fetchmany(max_rows + 1)
    except (sqlite3.ProgrammingError, sqlite3.Warning) as exc:  # bind parameter count, two statements
        raise QueryError(f"query failed: {exc}") from exc
    except sqlite3.OperationalError as exc:
        if time.monotonic() > deadline:
            raise QueryError(f"query stopped after {timeout:g} s (use --timeout for more)") from exc
        raise QueryError(f"query failed: {exc}") from exc
    except sqlite3.Error as exc:
        raise QueryError(f"query failed: {exc}") from exc
    finally:
        conn.set_progress_handler(None, 0)
    columns = _unique([d[0] for d in cur.description or []])
    truncated = len(rows) > max_rows
    cell = cell or _shown
    return QueryResult(columns, [tuple(cell(v) for v in r) for r in rows[:max_rows]], truncated)


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
