"""Commands over recorded sessions: list-sessions, query-session, schema, tail, inspect-session."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from assembler.cli_support import (
    capsem_command,
    counted,
    json_option,
    query_options,
    session_argument,
    user_errors,
)
from assembler.cli_support import console as _console

if TYPE_CHECKING:
    from rich.console import Console

    from assembler.inspect import Inspection
    from assembler.sessions import Listing

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


@click.command("list-sessions")
@click.option("-n", "limit", default=10, show_default=True, type=click.IntRange(min=0),
              help="How many sessions to show (0: all).")  # fmt: skip
@click.option("--all", "include_culled", is_flag=True,
              help="Include culled sessions (database deleted; main.db keeps their numbers).")  # fmt: skip
@click.option("--with-db", is_flag=True, help="Only sessions whose session.db (or .gz) is on disk.")
@click.option("--with-model", is_flag=True, help="Only sessions with AI model calls (tokens > 0).")
@click.option("--with-net", is_flag=True, help="Only sessions with network events.")
@click.option("--with-mcp", is_flag=True, help="Only sessions with MCP calls.")
@click.option("--with-tools", is_flag=True, help="Only sessions with tool calls.")
@click.option("--min-cost", type=float, metavar="USD", help="Only sessions that cost at least this much.")
@click.option(
    "--project", metavar="NAME|PATH", help="Only sessions of this project (git repository or workspace)."
)
@click.option("--branch", metavar="BRANCH", help="Only sessions started on this git branch.")
@click.option("--tag", metavar="TAG", help="Only sessions with this tag (capsem run --tag).")
@click.option("--name", metavar="NAME", help="Only sessions with this name (capsem run --name).")
@click.option(
    "--team", "team", is_flag=True, help="The whole team's sessions, from its PostgreSQL (with -n only)."
)
@json_option
def list_sessions_cmd(limit, include_culled, with_db, with_model, with_net, with_mcp, with_tools, min_cost,
                      project, branch, tag, name, team, as_json) -> None:  # fmt: skip
    """List recent sessions from main.db, newest first.

    Reads only main.db, so vacuumed (gzipped) and culled sessions keep their numbers. A `*`
    after the id means the session's database is on disk (queryable); culled sessions are
    shown with --all. Tokens as ccusage shows them: input (uncached), cache write, cache read,
    output. `exit` is the agent's exit code (capsem run). `errors` counts failed model calls,
    other failed requests and tool errors; `capsem` the requests capsem denied (policy or
    budget), warned or asked about and the placeholders it refused. Project, branch, name and
    tags come from capsem run. Times are UTC.

    \b
    Examples:
        capsem list-sessions
        capsem list-sessions -n 0 --with-model --min-cost 0.01
        capsem list-sessions --all --with-db --json
        capsem list-sessions --project capsem --branch main --tag ci
        capsem list-sessions --team -n 20
    """
    if team:
        from assembler.team.cli import list_team_sessions

        list_team_sessions(limit, as_json)
        return
    from assembler.sessiondb import MainDbMissing
    from assembler.sessions import SessionFilters, list_sessions
    from assembler.tables import Column, fit_table

    filters = SessionFilters(limit, include_culled, with_db, with_model, with_net, with_mcp, with_tools, min_cost,
                             project, branch, tag, name)  # fmt: skip
    try:
        listing = list_sessions(filters)
    except MainDbMissing:  # a fresh CAPSEM_HOME: nothing recorded yet is not an error
        _echo_nothing_recorded(as_json)
        return
    found = listing.sessions
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    if not found:
        click.echo("No sessions found" + ("" if include_culled else " (--all also lists culled sessions)"))
        return
    columns = [Column("ID", "left", 10), Column("Created", "left", 7), Column("Duration", "right", 6),
               Column("Status", "left", 9), Column("exit", "right", 7), Column("Cost", "right", 9),
               Column("input", "right", 5), Column("cache\nwrite", "right", 5), Column("cache\nread", "right", 5),
               Column("output", "right", 5), Column("net", "right", 2), Column("tools", "right", 2),
               Column("mcp", "right", 1), Column("fs", "right", 1), Column("errors", "right", 8),
               Column("capsem", "left", 8), Column("project", "left", 6, wrap=True),
               Column("name/tags", "left", 7, wrap=True), Column("Command", "left", 8, wrap=True)]  # fmt: skip
    unverified = _unverified(found)
    console = _console()
    table = [_session_cells(r, r["id"] in unverified) for r in found]
    optional = {"capsem", "project", "name/tags"}  # shown when some session has one
    keep = [i for i, c in enumerate(columns) if c.name not in optional or any(row[i] for row in table)]
    console.print(
        fit_table([columns[i] for i in keep], [[row[i] for i in keep] for row in table], console.width)
    )
    _print_listing_notes(console, listing, unverified)


def _echo_nothing_recorded(as_json: bool) -> None:
    """What list-sessions says when main.db does not exist yet: `[]`, or how to record a session."""
    from capsem.paths import capsem_home

    if as_json:
        click.echo("[]")
        return
    click.echo(f"No sessions recorded yet in {capsem_home()}: capsem run -- AGENT records one "
               "(capsem run --emulator -- AGENT, or capsem demo, needs no key)")  # fmt: skip


def _session_cells(r: dict, unverified: bool = False) -> list[str]:
    """One session's row of the list-sessions table, in the order of its columns."""
    from assembler.sessions import LOSSY, created, duration

    cache_write, cache_read = (
        r.get("total_cache_write_tokens") or 0,
        r.get("total_cache_read_tokens") or 0,
    )
    uncached = max(0, r["total_input_tokens"] - cache_write - cache_read)
    lossy = r.get("capture_status") in LOSSY
    status = (
        r["status"]
        + ("!" if lossy else "")
        + (" kept" if r.get("keep") else "")
        + (" emu" if r.get("emulated") else "")
        + (" ✗" if unverified else "")
    )
    return [r["id"] + ("*" if r["has_db"] else " "), created(r), duration(r), status,
            "" if r.get("exit_code") is None else str(r["exit_code"]),
            _cost(r["total_estimated_cost"], r.get("unpriced_calls")),
            f"{uncached:,}", f"{cache_write:,}", f"{cache_read:,}", f"{r['total_output_tokens']:,}",
            str(r["total_requests"]), str(r["total_tool_calls"]), str(r["total_mcp_calls"]),
            str(r["total_file_events"]), str(r.get("total_errors") or 0), _stepped_in(r),
            (r.get("project") or "") + (f"@{r['git_branch']}" if r.get("git_branch") else ""),
            " ".join([*([r["name"]] if r.get("name") else []), *(f"#{t}" for t in r.get("tags") or []),
                      *([f"replay of {r['replay_of']}"] if r.get("replay_of") else [])]),
            _command(r.get("command"))]  # fmt: skip


def _unverified(found: list[dict]) -> set[str]:
    """The listed sessions (with a database on disk) that do not verify (assembler/ledger/marks.py)."""
    from assembler.ledger.marks import failing

    return failing([r for r in found if r["has_db"]])


def _print_listing_notes(console: Console, listing: Listing, unverified: set[str] = frozenset()) -> None:
    """The lines under the list-sessions table: its marks and what was left out."""
    from assembler.sessions import LOSSY

    found = listing.sessions
    notes = ["* = session.db on disk (queryable)"]
    if listing.matched > len(found):
        notes.append(f"showing {len(found)} of {counted(listing.matched, 'session')} (-n 0 shows all)")
    console.print("; ".join(notes), highlight=False)
    if any(r.get("emulated") for r in found):
        console.print("emu = emulated (run --emulator, demo, replay): nothing was spent; left out of budgets and "
                      "cost-report", highlight=False)  # fmt: skip
    if any(_stepped_in(r) for r in found):
        console.print("capsem = requests capsem denied (d: policy or budget), warned (w) or asked (a) about, "
                      "placeholders it refused (r): capsem view ID says why", highlight=False)  # fmt: skip
    lossy = [r for r in found if r.get("capture_status") in LOSSY]
    if lossy:
        console.print(f"! = capture lost data (or its end was not recorded) in {counted(len(lossy), 'session')}: "
                      "capsem inspect-session ID says what",
                      style="red", highlight=False)  # fmt: skip
    gone = [r for r in found if r.get("process_gone")]
    if gone:
        console.print(f"{counted(len(gone), 'session')} left running by a process that is gone: shown crashed",
                      style="yellow", highlight=False)  # fmt: skip
    if unverified:
        console.print(f"✗ = does not verify ({counted(len(unverified), 'session')}): its record was changed after "
                      "it was written; capsem verify ID names the first row", style="red", highlight=False)  # fmt: skip


def _cost(cost: float, unpriced: int | None) -> str:
    """`$0.0123`; `unpriced` when nothing had a known price (never `$0.0000`); `$0.0123+` when some
    calls had none (their cost is not in the sum)."""
    if unpriced and not cost:
        return "unpriced"
    return f"${cost:.4f}" + ("+" if unpriced else "")


def _stepped_in(row: dict) -> str:
    """`2d 1w 1r`: requests denied, warned, asked, placeholders refused (empty when none)."""
    keys = (("denied_requests", "d"), ("warned_requests", "w"), ("asked_requests", "a"),
            ("refused_placeholders", "r"))  # fmt: skip
    return " ".join(f"{row[k]}{mark}" for k, mark in keys if row.get(k))


def _command(command: str | None) -> str:
    """A stored command line with its program's directory left out (`python agent.py`)."""
    import shlex

    try:
        argv = shlex.split(command or "")
    except ValueError:
        return " ".join((command or "").split())
    return shlex.join([Path(argv[0]).name, *argv[1:]]) if argv else ""


@click.command("query-session")
@click.argument("sql")
@session_argument
@query_options
def query_session_cmd(sql, session_id, params, fmt, max_rows, timeout) -> None:
    """Run one read-only SQL query on a session database.

    SESSION_ID defaults to the newest session with a database; any unique start of an id
    works, and vacuumed sessions (session.db.gz) too. Only SELECT, WITH, EXPLAIN and VALUES
    are accepted, one statement, on a read-only connection. Blobs print as <blob N bytes>.
    `capsem schema` lists the tables and their columns.

    \b
    Examples:
        capsem query-session "SELECT decision, COUNT(*) FROM net_events GROUP BY decision"
        capsem query-session "SELECT model, input_tokens FROM model_calls WHERE provider = ?" -p anthropic
        capsem query-session "SELECT * FROM tool_calls" 20260327-154418-f907 --format csv
    """
    from assembler.query import run_query, to_csv, to_json
    from assembler.sessiondb import resolve

    if session_id is not None and _looks_like_sql(session_id) and not _looks_like_sql(sql):
        sql, session_id = session_id, sql  # `query-session ID SQL`: the order is clear from the text
    with user_errors():
        session = resolve(session_id)
        result = run_query(session, sql, list(params), max_rows=max_rows, timeout=timeout)
    if fmt == "json":
        click.echo(to_json(result))
    elif fmt == "csv":
        click.echo(to_csv(result), nl=False)
    else:
        click.echo(f"Session: {session}", err=True)
        from assembler.tables import print_rows

        print_rows(_console(), result.columns, result.rows)
        click.echo(f"({counted(len(result.rows), 'row')})", err=True)
    if result.truncated:
        click.echo(f"(stopped after {max_rows} rows; use --max-rows for more)", err=True)


def _looks_like_sql(text: str) -> bool:
    return bool(
        re.match(r"\s*(select|with|explain|values|pragma|insert|update|delete|drop|create)\b", text, re.I)
    ) or (" " in text.strip())


@click.command("schema")
@click.argument("table", required=False)
@session_argument
def schema_cmd(table, session_id) -> None:
    """The tables and views of a session database, with their columns and types.

    TABLE shows one of them. SESSION_ID defaults to the newest session with a database (any
    unique start of an id works).

    \b
    Examples:
        capsem schema
        capsem schema model_calls
        capsem schema net_events 20261123
    """
    from assembler.query import schema
    from assembler.sessiondb import resolve

    with user_errors():
        found = schema(resolve(session_id), table)
    width = _console().width
    for name, columns in found.items():
        if table is not None:
            click.echo(f"{name}:")
            for column, kind in columns:
                click.echo(f"  {column:<28} {kind}".rstrip())
            continue
        line = f"{name}: " + ", ".join(column for column, _ in columns)
        click.echo(textwrap.fill(line, width=max(40, width), subsequent_indent="  ", break_on_hyphens=False))


@click.command("tail")
@session_argument
@click.option("-n", "last", type=click.IntRange(min=0), metavar="N",
              help="Start with only the last N events already recorded (default: all).")  # fmt: skip
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(min=0.05), metavar="SECONDS",
              help="How often to look for new rows.")  # fmt: skip
def tail_cmd(session_id, last, interval) -> None:
    """Follow a session as it is recorded, one line per event.

    Model calls (tokens, cost, stop reason or error), tool calls, requests that failed
    without a model call (connections that never reached the provider included) and file
    changes, until the session stops. SESSION_ID defaults to the newest running session, else
    the newest session with a database (which is printed whole). Times are UTC.

    \b
    Examples:
        capsem tail
        capsem tail -n 5
        capsem tail 20261123-103725 --interval 0.5
    """
    from assembler.sessiondb import resolve
    from assembler.tail import follow, still_running

    with user_errors():
        session = resolve(session_id or _newest_running())
    console = _console()
    console.print(f"session {session}" + (" (running; Ctrl-C stops following)" if still_running(session) else ""),
                  style="bold", highlight=False)  # fmt: skip
    style = {"model": "", "tool": "cyan", "error": "red", "file": "dim"}

    def show(event) -> None:
        line = Table.grid(padding=(0, 2))  # a wrapped text stays in its column
        line.add_column(no_wrap=True)
        line.add_column(no_wrap=True, min_width=5)
        line.add_column(overflow="fold")
        line.add_row(
            event.at, event.kind, Text(event.text, style="red" if event.failed else style[event.kind])
        )
        console.print(line, highlight=False)

    try:
        with user_errors():
            n = follow(session, show, interval=interval, last=last)
    except KeyboardInterrupt:
        return
    from assembler.sessiondb import main_row

    row = main_row(session)
    console.print(f"{counted(n, 'event')}; session {session} is {row['status'] if row else 'not in main.db'}: "
                  f"{capsem_command()} inspect-session {session}", style="dim", highlight=False)  # fmt: skip


def _newest_running() -> str | None:
    from assembler.sessions import SessionFilters, list_sessions

    try:
        found = list_sessions(SessionFilters(limit=0, with_db=True)).sessions
    except FileNotFoundError:
        return None
    return next((r["id"] for r in found if r["status"] == "running"), None)


@click.command("inspect-session")
@session_argument
@click.option("-n", "preview_rows", default=5, show_default=True, type=click.IntRange(min=0),
              help="Last rows to show per table.")  # fmt: skip
@click.option(
    "--strict", is_flag=True, help="Exit 1 when any error or warning is found (for scripts and CI)."
)
@json_option
def inspect_session_cmd(session_id, preview_rows, strict, as_json) -> None:
    """Check a session's integrity and data quality.

    SESSION_ID defaults to the newest session with a database (vacuumed ones work too).
    Reports table row counts, then findings (error / warning / info): schema, integrity_check,
    tool-call lifecycle, provider traffic without model calls, NULL models and tokens,
    unpriced models, usage breakdowns, truncated streams, decode and parse errors, failed
    calls and requests, main.db rollup vs session.db, leftover -wal; then MCP and tool usage and the last
    rows of each table. Failed model calls and failed requests (connections that never reached
    the provider included) are errors, shown with their error text. Exit code 1 when the
    database is damaged, and with --strict when there is any error or warning; else 0.

    \b
    Examples:
        capsem inspect-session
        capsem inspect-session 20260327-154418-f907 -n 10
        capsem inspect-session --strict --json   # non-zero exit on problems
    """
    from assembler.inspect import inspect_session
    from assembler.sessiondb import resolve

    with user_errors():
        result = inspect_session(resolve(session_id), preview_rows)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, default=str))
    else:
        _print_inspection(result)
    if result.damaged or (strict and result.problems):
        sys.exit(1)


_PREVIEW_COLUMNS = {
    "net_events": ("id", "timestamp", "domain", "path", "status_code", "decision", "duration_ms"),
    "model_calls": ("id", "provider", "model", "input_tokens", "output_tokens", "estimated_cost_usd",
                    "stop_reason"),
    "tool_calls": ("id", "model_call_id", "tool_name", "call_id", "arguments", "decision"),
    "tool_responses": ("id", "model_call_id", "call_id", "is_error", "content_preview"),
    "mcp_calls": ("id", "server_name", "method", "tool_name", "decision", "duration_ms"),
    "fs_events": ("id", "timestamp", "action", "path", "size"),
}  # fmt: skip


_PREVIEW_TEXT = {"path", "arguments", "content_preview", "domain", "model"}
"""Preview columns that may wrap (free text); the others are shown whole or dropped."""


def _cut(value: Any, width: int = 60) -> str:
    """A preview value on one line, at most `width` characters (the table escapes it); numbers as
    numbers (`0.00001785`, never `1.785e-05`)."""
    from assembler.tables import value_text

    text = "" if value is None else " ".join(value_text(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _print_inspection(result: Inspection) -> None:
    from assembler.tables import Column, fit_table

    console = _console()
    width = console.width
    where = result.path + ("  (gzipped; read from a temporary copy)" if result.path.endswith(".gz") else "")
    console.print(f"[bold]Session {result.session_id}[/bold] ({result.status or 'not in main.db'})")
    console.print(f"[dim]{escape(where)}[/dim]")
    if result.ledger:
        console.print(f"Ledger: {escape(result.ledger)}", highlight=False)
    if result.replay.get("replay_of"):
        _print_replay(console, result.replay)
    if result.counts:
        rows = [[name, "MISSING" if n is None else f"{n:,}"] for name, n in result.counts.items()]
        console.print(fit_table([Column("table", "left"), Column("rows")], rows, width, title="Tables"))
    else:
        console.print("[bold red]the tables cannot be read[/]")
    if not result.findings:
        console.print("[green]✓ no problems found[/green]")
    if result.findings:  # the message wraps at spaces under itself, beside its severity
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, min_width=7)
        grid.add_column(overflow="fold")
        for f in result.findings:
            grid.add_row(Text(f.severity, style=_SEVERITY_STYLE[f.severity]), Text(f"{f.check}: {f.message}"))
        console.print(grid)
    by = {s: sum(f.severity == s for f in result.findings) for s in _SEVERITY_STYLE}
    console.print(f"{counted(by['error'], 'error')}, {counted(by['warning'], 'warning')}, {by['info']} info",
                  style="bold")  # fmt: skip
    if result.mcp:
        cols = [Column("server", "left", 9), Column("tool", "left", 8), Column("decision", "left", 5),
                Column("calls", priority=7), Column("avg ms", priority=4), Column("bytes", priority=3)]  # fmt: skip
        rows = [[r["server_name"], r["tool_name"] or "", r["decision"], str(r["calls"]), str(r["avg_ms"]),
                 f"{r['bytes']:,}"] for r in result.mcp]  # fmt: skip
        console.print(fit_table(cols, rows, width, title="MCP usage"))
    if result.inputs:
        _print_inputs(console, result.inputs)
    if result.tools:
        cols = [Column("tool", "left", 9), Column("origin", "left", 4), Column("calls", priority=8),
                Column("results", priority=7), Column("errors", priority=8)]  # fmt: skip
        rows = [[r["tool_name"], r["origin"], str(r["calls"]), str(r["results"]), str(r["errors"])]
                for r in result.tools]  # fmt: skip
        if any(r.get("not_run") for r in result.tools):  # calls a tool rule kept from the agent
            cols.append(Column("not run", priority=9))
            for row, r in zip(rows, result.tools, strict=True):
                row.append(str(r.get("not_run") or 0))
        console.print(fit_table(cols, rows, width, title="Tool usage"))
    for name, rows in result.previews.items():
        names = [c for c in _PREVIEW_COLUMNS.get(name, ()) if c in rows[0]]
        cols = [Column(c, "left", 9 - i, wrap=c in _PREVIEW_TEXT) for i, c in enumerate(names)]
        cells = [[_cut(r[c]) for c in names] for r in rows]
        console.print(fit_table(cols, cells, width, title=f"Last {counted(len(rows), 'row')} of {name}"))


def _print_replay(console: Console, meta: dict[str, Any]) -> None:
    """How a replayed session matched its recording, and where it first diverged."""
    console.print(f"replay of {meta['replay_of']}: {meta.get('replay_matched', '?')} matched, "
                  f"{meta.get('replay_missed', '?')} missed, {meta.get('replay_live', '0')} live",
                  highlight=False)  # fmt: skip
    if meta.get("replay_first_miss"):
        console.print(f"first divergence: {meta['replay_first_miss']}", markup=False, highlight=False)


def _print_inputs(console: Console, inputs: list[dict[str, Any]]) -> None:
    """Where the session's input tokens went, per part (see `input_breakdown`), and the first part's cost share."""
    top = inputs[0]
    if top["cost_share"] is not None:
        console.print(f"{top['part'].replace('_', ' ')} were {top['cost_share']:.0%} of this session's input cost "
                      "(estimated split of the reported input tokens)")  # fmt: skip
    table = Table(title="Input by source", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("part", "tokens", "share", "cached", "cost", "cost share"):
        table.add_column(col, justify="left" if col == "part" else "right")
    for r in inputs:
        cost = "–" if r["cost_usd"] is None else f"${r['cost_usd']:.4f}"
        share = "–" if r["cost_share"] is None else f"{r['cost_share']:.0%}"
        table.add_row(r["part"].replace("_", " "), f"{r['tokens']:,}", f"{r['token_share']:.0%}",
                      f"{r['cache_read']:,}", cost, share)  # fmt: skip
    console.print(table)
