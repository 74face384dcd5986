"""`capsem bundle create|serve|info|query|export`: thin click commands over `DebugBundle`."""

from __future__ import annotations

import json
import sqlite3
import sys
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path

import click

from assembler.bundle.api import DebugBundle
from assembler.bundle.errors import BundleError
from assembler.bundle.sources import Limits
from assembler.cli_support import console, counted, query_options, serve_options, user_errors
from assembler.query import QueryResult, to_csv, to_json
from capsem.private import write_private

_FILE = click.Path(exists=True, path_type=Path)
_BUNDLE = click.Path(exists=True, dir_okay=False, path_type=Path)


def bundle_errors() -> AbstractContextManager[None]:
    """The library's expected failures, bundle ones included, as one-line click errors (exit 1)."""
    return user_errors(BundleError, OSError)


def _print_result(result: QueryResult) -> None:
    from assembler.tables import print_rows

    print_rows(console(), result.columns, result.rows)
    click.echo(f"({counted(len(result.rows), 'row')}{', truncated' if result.truncated else ''})", err=True)


@click.group("bundle")
def bundle() -> None:
    """Assemble and explore debug bundles (SQLite).

    A bundle is one self-contained file with capsem sessions, logs, session snapshots, process
    diagnostics and workspace files, to hand to a colleague and open with Datasette.

    \b
    Examples:
        capsem bundle create ./debug/run-42/
        capsem bundle serve ./debug/run-42/bundle.db
    """


def _capsem_inputs(session_ids: tuple[str, ...]) -> list[Path]:
    """The session databases of sessions recorded under $CAPSEM_HOME, plus main.db."""
    from assembler.sessiondb import SessionDbError, db_file, open_path, resolve
    from capsem.paths import main_db_path

    found = []
    for session_id in session_ids:
        session_id = resolve(session_id)
        path = db_file(session_id)
        if path is None:
            continue
        try:  # a damaged database would make an empty bundle: say so and write nothing
            with open_path(path) as conn:
                conn.execute("SELECT COUNT(*) FROM model_calls").fetchone()
                problems = [r[0] for r in conn.execute("PRAGMA quick_check(3)")]
        except (sqlite3.Error, SessionDbError) as exc:
            problems = [str(exc)]
        if problems != ["ok"]:
            raise BundleError(
                f"session {session_id}: {path} cannot be read ({'; '.join(problems)}); nothing written"
            )
        found.append(path)
    if found and main_db_path().is_file():
        found.append(main_db_path())
    return found


@bundle.command("create")
@click.argument("paths", nargs=-1, type=_FILE)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Bundle file (default: <DIR>/bundle.db for one directory, else ./bundle.db).")  # fmt: skip
@click.option("--capsem-session", "capsem_ids", multiple=True, metavar="SESSION_ID",
              help="A session recorded under $CAPSEM_HOME (its session.db and main.db row).")  # fmt: skip
@click.option("--capture", multiple=True, type=_FILE, help="A capsem session.db, session.db.gz or main.db.")
@click.option("--session", "snapshots", multiple=True, type=_FILE, help="A session snapshot JSONL file.")
@click.option("--logs", multiple=True, type=_FILE, help="A JSONL log file.")
@click.option("--diag", multiple=True, type=_FILE, help="Process diagnostics (a file or a directory).")
@click.option("--files", "archives", multiple=True, type=_FILE, help="A filesystem zip archive.")
@click.option("--description", help="Free text stored in the bundle.")
@click.option(
    "--tag", "tags", multiple=True, metavar="KEY=VALUE", help="A label stored in the bundle (repeatable)."
)
@click.option("--max-file-bytes", type=click.IntRange(min=0), default=Limits.max_file_bytes, show_default=True,
              help="Archive files above this are stored without content.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print what each input gave as JSON.")
def create_cmd(paths, output, capsem_ids, capture, snapshots, logs, diag, archives, description, tags,
               max_file_bytes, as_json) -> None:  # fmt: skip
    """Assemble a bundle from artifacts (kinds detected from content).

    PATHS are files or directories (searched recursively). Inputs: capsem session.db (or
    .gz) and main.db, JSONL logs, session snapshot JSONL, process diagnostics
    (proc_trace.jsonl, anomalies.jsonl, summary.json, sessions.jsonl) and zip archives.
    Malformed records are skipped with a warning; the bundle is written atomically.

    \b
    Examples:
        capsem bundle create ./debug/abc123/
        capsem bundle create --capsem-session 20260327-154418-f907 --logs agent.log -o run.db
        capsem bundle create -o ./bundle.db --session ./debug/session.jsonl \\
            --logs ./debug/session.log --files ./debug/files.zip --description "Code review task"
    """
    labels = {}
    for tag in tags:
        key, sep, value = tag.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{tag!r} is not KEY=VALUE", param_hint="--tag")
        labels[key] = value
    with bundle_errors():
        inputs = [*paths, *_capsem_inputs(capsem_ids), *capture, *snapshots, *logs, *diag, *archives]
        if not inputs:
            raise click.UsageError("give at least one input (a directory, files, or --capsem-session)")
        single_dir = len(inputs) == 1 and inputs[0].is_dir()
        target = output or (inputs[0] / "bundle.db" if single_dir else Path("bundle.db"))
        from assembler.bundle.build import build_bundle

        report = build_bundle(target, inputs, description=description, tags=labels or None,
                              source_directory=inputs[0] if single_dir else None,
                              limits=Limits(max_file_bytes=max_file_bytes))  # fmt: skip
        with DebugBundle.open(target) as opened:
            stats = opened.statistics
    if as_json:
        click.echo(json.dumps({"path": str(target), "bundle_id": report.bundle_id,
                               "sources": [asdict(s) for s in report.sources], "statistics": asdict(stats)},
                              indent=2, ensure_ascii=False))  # fmt: skip
        return
    for s in report.sources:
        note = f", {s.errors} skipped" if s.errors else ""
        click.echo(f"  {s.kind:15} {counted(s.records, 'record'):>15}{note}  {s.path}")
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"wrote {target} ({counted(stats.size_bytes, 'byte')}): {counted(stats.session_count, 'session')}, "
               f"{counted(stats.model_call_count, 'model call')}, {counted(stats.log_count, 'log')}, "
               f"{counted(stats.file_count, 'file')}")  # fmt: skip


@bundle.command("serve")
@click.argument("path", type=_BUNDLE)
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address to bind.")
@serve_options()
def serve_cmd(path, host, port, no_open) -> None:
    """Explore a bundle in Datasette (loopback only; Ctrl-C or SIGTERM stops it).

    \b
    Examples:
        capsem bundle serve ./bundle.db
        capsem bundle serve ./bundle.db --port 0 --no-open
    """
    from assembler.bundle.serve import open_in_browser, stop_on_signals

    with stop_on_signals():
        with bundle_errors(), DebugBundle.open(path) as opened:
            server = opened.start_server(host=host, port=port)
        with server:
            url = f"{server.url}/{server.database}"
            click.echo(f"Serving {path} at {url} (Ctrl-C to stop)")
            if not no_open:
                open_in_browser(url)
            server.wait_until_interrupted()


@bundle.command("info")
@click.argument("path", type=_BUNDLE)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info_cmd(path, as_json) -> None:
    """Show a bundle's metadata, sessions, sources and statistics.

    \b
    Example:
        capsem bundle info ./bundle.db
    """
    with bundle_errors(), DebugBundle.open(path) as opened:
        meta, stats = opened.meta, opened.statistics
        sessions = [dict(zip(("session_id", "kind", "parent", "correlated", "correlation"), r, strict=True))
                    for r in opened.query("SELECT session_id, kind, parent_session_id, correlated_session_id, "
                                          "correlation FROM sessions ORDER BY created_at, session_id")]  # fmt: skip
        sources = [dict(zip(("path", "kind", "records", "errors"), r, strict=True))
                   for r in opened.query("SELECT path, kind, records, errors FROM sources ORDER BY id")]  # fmt: skip
    if as_json:
        click.echo(json.dumps({"meta": meta, "statistics": asdict(stats), "sessions": sessions, "sources": sources},
                              indent=2, ensure_ascii=False))  # fmt: skip
        return
    click.echo(f"Bundle: {path} ({stats.size_bytes / 1e6:.1f} MB), schema v{meta['schema_version']}")
    click.echo(f"Created: {meta['created_at']} by capsem {meta['capsem_version']}")
    if meta["source_directory"]:
        click.echo(f"Source: {meta['source_directory']}")
    if meta["description"]:
        click.echo(f"Description: {meta['description']}")
    click.echo(f"\nSessions: {stats.session_count}")
    for s in sessions:
        notes = [s["kind"]]
        if s["session_id"] == meta["root_session_id"]:
            notes.append("root")
        if s["parent"]:
            notes.append(f"child of {s['parent']}")
        if s["correlated"]:
            notes.append(f"ran in {s['correlated']} ({s['correlation']})")
        click.echo(f"  - {s['session_id']} ({', '.join(notes)})")
    click.echo(f"\nSources: {stats.source_count} ({counted(stats.skipped_records, 'record')} skipped)")
    for s in sources:
        click.echo(f"  - {s['kind']:15} {counted(s['records'], 'record'):>14}  {s['path']}")
    click.echo("\nStatistics:")
    for label, value in (("Model calls", stats.model_call_count), ("Network events", stats.net_event_count),
                         ("Tool calls (captured)", stats.tool_call_count), ("Log records", stats.log_count),
                         ("Tool invocations", stats.tool_invocation_count),
                         ("Prompt events", stats.prompt_event_count), ("Files", stats.file_count),
                         ("Anomalies", stats.anomaly_count),
                         ("Total tokens", stats.total_input_tokens + stats.total_output_tokens)):  # fmt: skip
        click.echo(f"  {label}: {value:,}")
    click.echo(f"  Estimated cost: ${stats.estimated_cost_usd:.4f}")


@bundle.command("query")
@click.argument("path", type=_BUNDLE)
@click.argument("sql")
@query_options
def query_cmd(path, sql, params, fmt, max_rows, timeout) -> None:
    """Run one read-only SQL query on a bundle.

    \b
    Examples:
        capsem bundle query ./bundle.db "SELECT tool_name, COUNT(*) FROM tool_invocations GROUP BY tool_name"
        capsem bundle query ./bundle.db --format json "SELECT * FROM error_log LIMIT 10"
    """
    with bundle_errors(), DebugBundle.open(path) as opened:
        result = opened.run(sql, list(params), max_rows=max_rows, timeout=timeout)
    if fmt == "json":
        click.echo(to_json(result))
    elif fmt == "csv":
        click.echo(to_csv(result), nl=False)
    else:
        _print_result(result)


@bundle.command("export")
@click.argument("path", type=_BUNDLE)
@click.argument("table", required=False)
@click.option("--query", "sql", metavar="SQL", help="Export the rows of this query instead of a table.")
@click.option("--format", "fmt", type=click.Choice(["csv", "json", "jsonl"]), default="csv", show_default=True,
              help="Output format.")  # fmt: skip
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="File (default: stdout)."
)
def export_cmd(path, table, sql, fmt, output) -> None:
    """Export a table, view or query to CSV, JSON or JSON lines.

    \b
    Examples:
        capsem bundle export ./bundle.db tool_invocations --format csv -o tools.csv
        capsem bundle export ./bundle.db --format json --query "SELECT * FROM error_log"
    """
    if bool(table) == bool(sql):
        raise click.UsageError("give either a TABLE or --query SQL")
    with bundle_errors(), DebugBundle.open(path) as opened:
        result = opened.table_result(table) if table else opened.run(sql, max_rows=10**9, timeout=600)
    if fmt == "csv":
        text = to_csv(result)
    elif fmt == "json":
        text = to_json(result) + "\n"
    else:
        text = "".join(json.dumps(dict(zip(result.columns, r, strict=True)), ensure_ascii=False) + "\n"
                       for r in result.rows)  # fmt: skip
    if output is None:
        sys.stdout.write(text)
        return
    with bundle_errors():
        write_private(output, text, newline="")
    click.echo(f"wrote {counted(len(result.rows), 'row')} to {output}", err=True)
