"""`capsem export har|jsonl|parquet`: the file exports (thin commands over `har`, `jsonl`, `parquet`)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import click

from assembler.cli_support import counted, stderr_progress, user_errors
from capsem.private import open_private, private_dir


@contextmanager
def _errors(session_id: str | None = None) -> Iterator[None]:
    """Expected failures as one-line errors: unknown session, damaged database, unwritable output."""
    from assembler.export.select import BadDate

    with user_errors(BadDate):
        try:
            yield
        except sqlite3.DatabaseError as exc:
            where = f"session {session_id}" if session_id else "a session database"
            raise click.ClickException(f"cannot read {where}: {exc} (the database is damaged?)") from exc
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the reader left (`| head`)
            raise SystemExit(0) from None
        except OSError as exc:
            raise click.ClickException(f"cannot write: {exc}") from exc


@contextmanager
def _output(path: str) -> Iterator[IO[str]]:
    """`path` opened for writing through a temporary file renamed into place at the end (`-`: stdout)."""
    if path == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    target = Path(path)
    tmp = target.with_name(f".{target.name}.capsem-tmp")
    try:
        if target.is_dir():
            raise IsADirectoryError(21, "is a directory")
        out = open_private(tmp, "w", encoding="utf-8")  # closed below, before the rename
    except OSError as exc:
        raise click.ClickException(f"cannot write {target}: {exc.strerror or exc}") from exc
    try:
        with out:
            yield out
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@click.command("har")
@click.argument("session_id", metavar="[SESSION]", required=False)
@click.option("-o", "--output", default="-", show_default=True, metavar="FILE",
              help="Where to write the HAR file (- for stdout).")  # fmt: skip
def har(session_id: str | None, output: str) -> None:
    """A session's flows as HAR 1.2 (the newest session by default).

    Opens in browser devtools (Network → Import HAR) and HAR viewers. Model and MCP calls carry
    their whole decoded bodies where they were kept (the rest: previews; each body's `comment`
    says which), headers as stored (secrets hashed), timings, and a WebSocket's messages
    (Chrome's `_webSocketMessages`).

    \b
    Examples:
        capsem export har -o run.har
        capsem export har 20261123-101500-4f2a -o run.har
    """
    from assembler.export.har import session_entries, write
    from assembler.export.select import named_sessions
    from assembler.sessiondb import open_session

    with _errors(session_id):
        (sid,) = named_sessions([session_id] if session_id else [])
    with _errors(sid), stderr_progress() as progress, open_session(sid) as conn, _output(output) as out:
        task = progress.add_task(f"HAR of {sid}", total=None)
        n = write(
            out,
            sid,
            session_entries(conn, lambda done, total: progress.update(task, completed=done, total=total)),
        )
    if output != "-":
        click.echo(f"wrote {output}: {counted(n, 'entry', 'entries')} of session {sid}", err=True)


@click.command("jsonl")
@click.argument("session_ids", metavar="[SESSION]...", nargs=-1)
@click.option("--since", metavar="DATE", help="Every session started on or after DATE (YYYY-MM-DD).")
@click.option(
    "--only-new",
    is_flag=True,
    help="An input item's content only in the record of the call that first sent it (linear size).",
)
@click.option("-o", "--output", default="-", show_default=True, metavar="FILE",
              help="Where to write the records (- for stdout).")  # fmt: skip
def jsonl(session_ids: tuple[str, ...], since: str | None, only_new: bool, output: str) -> None:
    """One JSON record per model call, with its items (the newest session by default).

    A record: identity (event_id, session_id, trace_id, turn_id, parent tool call), model, usage,
    cost, the whole ordered input (kind, role, content; `new` when first sent in that call), the
    output items, and the tool calls with the results the agent sent back. Each record repeats
    the conversation so far, as the call sent it; --only-new keeps the file linear in its length.

    \b
    Examples:
        capsem export jsonl -o calls.jsonl
        capsem export jsonl --since 2026-11-01 -o november.jsonl
        capsem export jsonl 20261123-101500-4f2a | jq .usage
    """
    from assembler.export.jsonl import count, records
    from assembler.export.select import all_sessions, named_sessions, parse_since
    from assembler.sessiondb import open_session

    if since and session_ids:
        raise click.UsageError("give SESSION ids or --since, not both")
    written = 0
    with _errors():
        chosen = all_sessions(parse_since(since)) if since else named_sessions(session_ids)
        if not chosen:
            raise click.ClickException(f"no session with a database since {since}")
        with _output(output) as out, stderr_progress() as progress:
            task = progress.add_task("model calls", total=None)
            for sid in chosen:
                with _errors(sid), open_session(sid) as conn:
                    progress.update(task, description=sid, total=(progress.tasks[0].total or 0) + count(conn))
                    for record in records(conn, sid, only_new):
                        out.write(json.dumps(record, ensure_ascii=False) + "\n")
                        written += 1
                        progress.advance(task)
    if output != "-":
        click.echo(f"wrote {output}: {counted(written, 'model call')} from {counted(len(chosen), 'session')}",
                   err=True)  # fmt: skip


@click.command("parquet")
@click.option("--since", metavar="DATE", help="Only sessions started on or after DATE (YYYY-MM-DD).")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR", help="Directory to write one <table>.parquet per table into.")  # fmt: skip
def parquet(since: str | None, out_dir: Path) -> None:
    """Every session's tables as Parquet, one file per table, with a session_id column.

    Gzipped (vacuumed) sessions are included; main.db's rows of the exported sessions are
    sessions.parquet. A file is replaced only once it is complete. A session whose database
    cannot be read is skipped and named (exit status 1).

    \b
    Examples:
        capsem export parquet -o warehouse/
        capsem export parquet --since 2026-11-01 -o warehouse/
        duckdb -c "SELECT count(*) FROM 'warehouse/net_events.parquet'"
    """
    from assembler.export.parquet import export_parquet
    from assembler.export.select import all_sessions, parse_since

    with _errors():
        chosen = all_sessions(parse_since(since))
        if not chosen:
            raise click.ClickException(f"no session with a database{f' since {since}' if since else ''}")
        try:
            private_dir(out_dir)
        except OSError as exc:
            raise click.ClickException(f"cannot write {out_dir}: {exc.strerror or exc}") from exc
        with stderr_progress() as progress:
            task = progress.add_task("sessions", total=len(chosen))
            result = export_parquet(
                chosen,
                out_dir,
                lambda done, _total, sid: progress.update(task, completed=done, description=sid),
            )
    rows = sum(result.rows.values())
    click.echo(f"wrote {counted(len(result.files), 'Parquet file')} to {out_dir} from "
               f"{counted(result.sessions, 'session')} ({counted(rows, 'row')})", err=True)  # fmt: skip
    width = shutil.get_terminal_size().columns
    rows_text = ", ".join(f"{table}\xa0{n:,}" for table, n in sorted(result.rows.items()))  # no break inside
    filled = textwrap.fill(rows_text, width=max(40, width - 1), initial_indent="  ", subsequent_indent="  ")
    click.echo(filled.replace("\xa0", " "), err=True)
    for sid, why in result.failed.items():
        click.echo(f"skipped session {sid}: {why}", err=True)
    if result.failed:
        raise SystemExit(1)
