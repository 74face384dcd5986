"""The `capsem` command line: thin click commands over the library functions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table

from capsem import __version__

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="capsem")
def cli() -> None:
    """capsem: a flight recorder for AI agents.

    Capture runs inside mitmdump (`mitmdump -s addons/capsem_addon.py`); these commands work on
    what it recorded under $CAPSEM_HOME (default ~/.capsem).
    """


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--workspace", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Directory to run the agent in (default: the current one).")  # fmt: skip
@click.option("--mitmdump-args", default="", metavar="ARGS",
              help="Extra mitmdump arguments, e.g. '--mode upstream:http://corp-proxy:3128'.")  # fmt: skip
@click.option("--quiet", "-q", is_flag=True, help="Do not print the session summary.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(workspace, mitmdump_args, quiet, command) -> None:
    """Run an agent with capsem recording everything it sends and receives.

    The agent gets HTTPS_PROXY and the CA variables (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS,
    REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE...) pointing at a fresh mitmdump with the capsem addon.
    Its exit code is passed through.

    \b
    Examples:
        capsem run -- claude -p "fix the failing test"
        capsem run --workspace ~/src/app -- codex exec "add a README"
        capsem run -- gemini -p "summarize this repo"
        capsem run -- aider --message "rename foo to bar"
    """
    from assembler.run import run_agent
    from assembler.summary import print_session
    from capsem.mitm import MitmdumpError

    try:
        result = run_agent(list(command), workspace=workspace, mitmdump_args=mitmdump_args)
    except (MitmdumpError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    if not quiet:
        console = Console(stderr=True)
        console.print()
        print_session(result.session_id, console)
    sys.exit(result.exit_code)


@cli.command()
def demo() -> None:
    """Run a scripted agent through mitmdump + capsem against the local provider emulator.

    \b
    Example:
        capsem demo
        CAPSEM_HOME=/tmp/capsem-demo capsem demo
    """
    from assembler.demo import run_demo

    try:
        run_demo()
    except ImportError as exc:
        raise click.ClickException(
            f"the demo needs the provider SDKs: pip install 'capsem[demo]' ({exc})"
        ) from exc


@cli.command("list-sessions")
@click.option("-n", "limit", default=10, show_default=True, help="How many sessions to show.")
@click.option("--all", "include_vacuumed", is_flag=True, help="Include vacuumed sessions.")
@click.option("--with-db", is_flag=True, help="Only sessions whose session.db is on disk.")
@click.option("--with-model", is_flag=True, help="Only sessions with AI model calls.")
@click.option("--with-net", is_flag=True, help="Only sessions with network events.")
@click.option("--with-mcp", is_flag=True, help="Only sessions with MCP calls.")
@click.option("--with-tools", is_flag=True, help="Only sessions with tool calls.")
@click.option("--min-cost", type=float, help="Only sessions that cost at least this many USD.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_sessions_cmd(limit, include_vacuumed, with_db, with_model, with_net, with_mcp, with_tools, min_cost,
                      as_json) -> None:  # fmt: skip
    """List recent sessions from main.db (newest first).

    \b
    Examples:
        capsem list-sessions
        capsem list-sessions -n 20 --with-model --min-cost 0.01
        capsem list-sessions --all --with-db --json
    """
    from assembler.sessions import SessionFilters, created, duration, list_sessions

    filters = SessionFilters(
        limit, include_vacuumed, with_db, with_model, with_net, with_mcp, with_tools, min_cost
    )
    try:
        found = list_sessions(filters)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    if not found:
        click.echo("No sessions found")
        return
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold underline")
    widths = {"ID": 21, "Created": 11, "Dur": 4, "Status": 7, "Cost": 6, "net": 3, "tokens": 6, "tool": 4,
              "mcp": 3, "fs": 3}  # fmt: skip
    for col, width in widths.items():
        table.add_column(col, justify="left" if col in ("ID", "Created", "Status") else "right", no_wrap=True,
                         min_width=width)  # fmt: skip
    for r in found:
        table.add_row(
            r["id"] + ("*" if r["has_db"] else " "), created(r), duration(r), r["status"],
            f"${r['total_estimated_cost']:.3f}", str(r["total_requests"]),
            f"{r['total_input_tokens'] + r['total_output_tokens']:,}", str(r["total_tool_calls"]),
            str(r["total_mcp_calls"]), str(r["total_file_events"]),
        )  # fmt: skip
    console = Console()
    console.print(table)
    console.print("* = session.db on disk (queryable)", style="dim")


@cli.command("query-session")
@click.argument("sql")
@click.argument("session_id", required=False)
@click.option(
    "-p", "--param", "params", multiple=True, help="Bind parameter for a ? placeholder (repeatable)."
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True
)
@click.option("--max-rows", default=10000, show_default=True, help="Stop after this many rows.")
def query_session_cmd(sql, session_id, params, fmt, max_rows) -> None:
    """Run a read-only SQL query on a session (default: the newest with a database).

    \b
    Examples:
        capsem query-session "SELECT decision, COUNT(*) FROM net_events GROUP BY decision"
        capsem query-session "SELECT model, input_tokens FROM model_calls WHERE provider = ?" -p anthropic
        capsem query-session "SELECT * FROM tool_calls" 20260327-154418-f907 --format csv
    """
    from assembler.query import QueryError, run_query, to_csv, to_json
    from assembler.sessiondb import SessionNotFound, resolve

    try:
        session = resolve(session_id)
        result = run_query(session, sql, list(params), max_rows=max_rows)
    except (QueryError, SessionNotFound) as exc:
        raise click.ClickException(str(exc)) from exc
    if fmt == "json":
        click.echo(to_json(result))
    elif fmt == "csv":
        click.echo(to_csv(result), nl=False)
    else:
        click.echo(f"Session: {session}", err=True)
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for col in result.columns:
            table.add_column(col, overflow="fold")
        for row in result.rows:
            table.add_row(*("NULL" if v is None else str(v) for v in row))
        Console().print(table)
    if result.truncated:
        click.echo(f"(stopped after {max_rows} rows)", err=True)


@cli.command("inspect-session")
@click.argument("session_id", required=False)
@click.option("-n", "preview_rows", default=5, show_default=True, help="Rows to show per table.")
@click.option("--strict", is_flag=True, help="Exit 1 when any error or warning is found (for scripts).")
@click.option("--json", "as_json", is_flag=True, help="Print findings as JSON.")
def inspect_session_cmd(session_id, preview_rows, strict, as_json) -> None:
    """Check a session's integrity and data quality (default: the newest with a database).

    \b
    Examples:
        capsem inspect-session
        capsem inspect-session 20260327-154418-f907 -n 10
        capsem inspect-session --strict --json   # non-zero exit on problems
    """
    from dataclasses import asdict

    from assembler.inspect import inspect_session, mcp_usage, table_counts, tool_usage
    from assembler.sessiondb import SessionNotFound, open_session, resolve

    try:
        session = resolve(session_id)
    except SessionNotFound as exc:
        raise click.ClickException(str(exc)) from exc
    with open_session(session) as conn:
        findings = inspect_session(conn, session)
        counts = table_counts(conn)
        tools, mcp = tool_usage(conn), mcp_usage(conn)
        previews = {t: conn.execute(f"SELECT * FROM {t} ORDER BY id DESC LIMIT ?", (preview_rows,)).fetchall()
                    for t, n in counts.items() if n}  # fmt: skip
    bad = any(f.severity in ("error", "warning") for f in findings)
    if as_json:
        click.echo(json.dumps({"session": session, "counts": counts, "findings": [asdict(f) for f in findings]},
                              indent=2))  # fmt: skip
    else:
        _print_inspection(session, counts, findings, tools, mcp, previews)
    if strict and bad:
        sys.exit(1)


def _print_inspection(session, counts, findings, tools, mcp, previews) -> None:
    console = Console()
    console.print(f"[bold]Session {session}[/bold]")
    console.print("  ".join(f"{t}: {'MISSING' if n is None else n}" for t, n in counts.items()))
    if not findings:
        console.print("[green]✓ no problems found[/green]")
    for f in findings:
        console.print(f"[{_SEVERITY_STYLE[f.severity]}]{f.severity:7}[/] {f.check}: {f.message}")
    if tools:
        table = Table(title="Tool usage", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("tool", "origin", "calls"):
            table.add_column(col)
        for r in tools:
            table.add_row(r["tool_name"], r["origin"], str(r["calls"]))
        console.print(table)
    if mcp:
        table = Table(title="MCP usage", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("server", "tool", "decision", "calls", "avg ms"):
            table.add_column(col)
        for r in mcp:
            table.add_row(
                r["server_name"], r["tool_name"] or "", r["decision"], str(r["calls"]), str(r["avg_ms"])
            )
        console.print(table)
    for name, rows in previews.items():
        table = Table(title=f"Last {len(rows)} {name}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      collapse_padding=True)  # fmt: skip
        columns = [c for c in _PREVIEW_COLUMNS.get(name, ()) if c in rows[0].keys()]  # noqa: SIM118 (sqlite3.Row)
        for col in columns:
            table.add_column(col, overflow="ellipsis", no_wrap=True, min_width=min(len(col), 8))
        for r in rows:
            table.add_row(*("" if r[c] is None else str(r[c]) for c in columns))
        console.print(table)


_PREVIEW_COLUMNS = {
    "net_events": ("id", "domain", "path", "status_code", "decision", "duration_ms"),
    "model_calls": ("id", "model", "input_tokens", "output_tokens", "estimated_cost_usd", "stop_reason"),
    "tool_calls": ("model_call_id", "tool_name", "call_id", "arguments"),
    "tool_responses": ("model_call_id", "is_error", "call_id", "content_preview"),
    "mcp_calls": ("id", "server_name", "method", "tool_name", "decision", "duration_ms"),
    "fs_events": ("id", "action", "path", "size"),
}  # fmt: skip


@cli.command("cost-report")
@click.option("--since", metavar="YYYY-MM-DD", help="First day to include.")
@click.option("--until", metavar="YYYY-MM-DD", help="Last day to include.")
@click.option("--by", "group_by", type=click.Choice(["session", "provider", "model", "day"]), default="model",
              show_default=True, help="How to group the rows.")  # fmt: skip
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True),
              help="Also write a self-contained HTML page with charts.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def cost_report_cmd(since, until, group_by, html_path, as_json) -> None:
    """Cost and tokens over a date range, from the main.db rollup.

    \b
    Examples:
        capsem cost-report
        capsem cost-report --since 2026-11-01 --by day
        capsem cost-report --by provider --html cost.html
    """
    from dataclasses import asdict
    from pathlib import Path

    from assembler.reports import cost_rows, html_report

    try:
        found = cost_rows(group_by, since, until)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from exc
    if html_path:
        page = html_report(cost_rows("day", since, until), cost_rows("model", since, until), since, until)
        Path(html_path).write_text(page, encoding="utf-8")
        click.echo(f"wrote {html_path}", err=True)
    if as_json:
        click.echo(json.dumps([asdict(r) for r in found], indent=2))
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_footer=True)
    total = (sum(r.calls for r in found), sum(r.input_tokens for r in found), sum(r.output_tokens for r in found),
             sum(r.cost for r in found))  # fmt: skip
    table.add_column(group_by, footer="total")
    table.add_column("sessions", justify="right")
    table.add_column("calls", justify="right", footer=str(total[0]))
    table.add_column("input", justify="right", footer=f"{total[1]:,}")
    table.add_column("output", justify="right", footer=f"{total[2]:,}")
    table.add_column("cost", justify="right", footer=f"${total[3]:.4f}")
    for r in found:
        table.add_row(r.key, str(r.sessions), str(r.calls), f"{r.input_tokens:,}", f"{r.output_tokens:,}",
                      f"${r.cost:.4f}")  # fmt: skip
    Console().print(table)


@cli.command("update-prices")
@click.option("--from", "source", required=True, metavar="FILE|URL",
              help="A genai-prices data.json (file path, or an http(s) URL to download).")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Validate and show the changes without installing.")
def update_prices_cmd(source, dry_run) -> None:
    """Replace the price table: validated first, then swapped in atomically.

    The table lands in $CAPSEM_HOME/prices.json and is used for every later session.

    \b
    Examples:
        capsem update-prices --from ./data.json --dry-run
        capsem update-prices --from https://raw.githubusercontent.com/pydantic/genai-prices/main/prices/data.json
    """
    from assembler.prices import update_prices

    try:
        changes = update_prices(source, dry_run=dry_run)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    for label, items in (
        ("added", changes.added),
        ("removed", changes.removed),
        ("changed", changes.changed),
    ):
        click.echo(f"{len(items)} models {label}" + (": " + ", ".join(items[:20]) if items else ""))
        if len(items) > 20:
            click.echo(f"  … and {len(items) - 20} more")
    click.echo("dry run: nothing installed" if dry_run else "installed the new price table")


def main() -> None:
    cli()
