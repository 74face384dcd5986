"""The `capsem` command line: thin click commands over the library functions."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from assembler.cli_support import console as _console
from assembler.cli_support import counted, query_options, user_errors
from capsem import __version__

if TYPE_CHECKING:
    from assembler.inspect import Inspection

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}

F = TypeVar("F", bound=Callable[..., Any])


# --- shared flags and error handling ---------------------------------------------------------


def json_option(f: F) -> F:
    """`--json`: machine-readable output instead of the table."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(f)


def dry_run_option(f: F) -> F:
    """`--dry-run`: show what would change, change nothing."""
    return click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")(f)


def session_argument(f: F) -> F:
    """Optional SESSION_ID; the newest session with a database when left out."""
    return click.argument("session_id", required=False, metavar="[SESSION_ID]")(f)


def _stderr_progress() -> Progress:
    """A transient progress bar on stderr (only when stderr is a terminal)."""
    return Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=Console(stderr=True), transient=True,
        disable=not sys.stderr.isatty(),
    )  # fmt: skip


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
@click.option("--broker", is_flag=True,
              help="Give the agent placeholders for the configured credentials; only capsem holds the keys.")  # fmt: skip
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(workspace, mitmdump_args, quiet, broker, command) -> None:
    """Run an agent and record its LLM traffic.

    The agent gets HTTPS_PROXY and the CA variables (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS,
    REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE...) pointing at a fresh mitmdump with the capsem addon.
    Its exit code is passed through. When its calls are not recorded: capsem doctor -- AGENT.

    \b
    Examples:
        capsem run -- claude -p "fix the failing test"
        capsem run --workspace ~/src/app -- codex exec "add a README"
        capsem run -- gemini -p "summarize this repo"
        capsem run -- aider --message "rename foo to bar"
        capsem run --broker -- claude -p "fix the failing test"
    """
    from assembler.run import run_agent
    from assembler.summary import print_session
    from capsem.config import ConfigError
    from capsem.mitm import MitmdumpError

    try:
        result = run_agent(list(command), workspace=workspace, mitmdump_args=mitmdump_args, broker=broker)
    except (MitmdumpError, RuntimeError, ConfigError) as exc:
        raise click.ClickException(str(exc)) from exc
    if not quiet:
        console = Console(stderr=True)
        console.print()
        print_session(result.session_id, console)
        if result.diagnostics is not None:
            console.print(result.diagnostics.summary())
    sys.exit(result.exit_code)


@cli.command()
def demo() -> None:
    """Record a scripted agent against a local emulator.

    A real mitmdump with the capsem addon sits between the agent and the emulator.

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


# --- sessions ----------------------------------------------------------------------------------


@cli.command("list-sessions")
@click.option("-n", "limit", default=10, show_default=True, type=click.IntRange(min=0),
              help="How many sessions to show.")  # fmt: skip
@click.option("--all", "include_vacuumed", is_flag=True, help="Include vacuumed (and culled) sessions.")
@click.option("--with-db", is_flag=True, help="Only sessions whose session.db (or .gz) is on disk.")
@click.option("--with-model", is_flag=True, help="Only sessions with AI model calls (tokens > 0).")
@click.option("--with-net", is_flag=True, help="Only sessions with network events.")
@click.option("--with-mcp", is_flag=True, help="Only sessions with MCP calls.")
@click.option("--with-tools", is_flag=True, help="Only sessions with tool calls.")
@click.option("--min-cost", type=float, metavar="USD", help="Only sessions that cost at least this much.")
@json_option
def list_sessions_cmd(limit, include_vacuumed, with_db, with_model, with_net, with_mcp, with_tools, min_cost,
                      as_json) -> None:  # fmt: skip
    """List recent sessions from main.db, newest first.

    Reads only main.db, so vacuumed and culled sessions keep their numbers. A `*` after the
    id means the session's database is on disk (queryable). Times are UTC.

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
    with user_errors():
        found = list_sessions(filters)
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    if not found:
        click.echo("No sessions found")
        return
    header = ("ID", "Created", "Duration", "Status", "Cost", "net", "tokens", "tools", "mcp", "fs")
    lines = [
        (r["id"] + ("*" if r["has_db"] else " "), created(r), duration(r),
         r["status"] + ("!" if r.get("capture_status") in ("degraded", "failed") else ""),
         f"${r['total_estimated_cost']:.4f}", str(r["total_requests"]),
         f"{r['total_input_tokens'] + r['total_output_tokens']:,}", str(r["total_tool_calls"]),
         str(r["total_mcp_calls"]), str(r["total_file_events"]))
        for r in found
    ]  # fmt: skip
    widths = [max(len(x[i]) for x in [header, *lines]) for i in range(len(header))]
    left = {0, 1, 3}

    def fmt(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    click.echo(click.style(fmt(header), bold=True))
    for line in lines:
        click.echo(fmt(line))
    click.echo("* = session.db on disk (queryable)")
    lossy = [line for line in lines if line[3].endswith("!")]
    if lossy:
        click.secho(f"! = capture lost data in {len(lossy)} session{'s' if len(lossy) != 1 else ''}: "
                    "capsem inspect-session ID says what", fg="red")  # fmt: skip


@cli.command("query-session")
@click.argument("sql")
@session_argument
@query_options
def query_session_cmd(sql, session_id, params, fmt, max_rows, timeout) -> None:
    """Run one read-only SQL query on a session database.

    SESSION_ID defaults to the newest session with a database; vacuumed sessions
    (session.db.gz) work too. Only SELECT, WITH, EXPLAIN and VALUES are accepted, one
    statement, on a read-only connection. Blobs print as <blob N bytes>.

    \b
    Examples:
        capsem query-session "SELECT decision, COUNT(*) FROM net_events GROUP BY decision"
        capsem query-session "SELECT model, input_tokens FROM model_calls WHERE provider = ?" -p anthropic
        capsem query-session "SELECT * FROM tool_calls" 20260327-154418-f907 --format csv
    """
    from assembler.query import run_query, to_csv, to_json
    from assembler.sessiondb import resolve

    with user_errors():
        session = resolve(session_id)
        result = run_query(session, sql, list(params), max_rows=max_rows, timeout=timeout)
    if fmt == "json":
        click.echo(to_json(result))
    elif fmt == "csv":
        click.echo(to_csv(result), nl=False)
    else:
        click.echo(f"Session: {session}", err=True)
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for col in result.columns:
            table.add_column(escape(col), overflow="fold")
        for row in result.rows:
            table.add_row(*(escape("NULL" if v is None else str(v)) for v in row))
        _console().print(table)
        click.echo(f"({len(result.rows)} rows)", err=True)
    if result.truncated:
        click.echo(f"(stopped after {max_rows} rows; use --max-rows for more)", err=True)


@cli.command("inspect-session")
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
    unpriced models, usage breakdowns, truncated streams, decode and parse errors, HTTP
    errors, main.db rollup vs session.db, leftover -wal; then MCP and tool usage and the last
    rows of each table. Exit code 0, or 1 with --strict when there is an error or warning.

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
    if strict and result.problems:
        sys.exit(1)


_PREVIEW_COLUMNS = {
    "net_events": ("id", "timestamp", "domain", "path", "status_code", "decision", "duration_ms"),
    "model_calls": ("id", "provider", "model", "input_tokens", "output_tokens", "estimated_cost_usd",
                    "stop_reason"),
    "tool_calls": ("id", "model_call_id", "tool_name", "call_id", "arguments"),
    "tool_responses": ("id", "model_call_id", "call_id", "is_error", "content_preview"),
    "mcp_calls": ("id", "server_name", "method", "tool_name", "decision", "duration_ms"),
    "fs_events": ("id", "timestamp", "action", "path", "size"),
}  # fmt: skip


def _cut(value: Any, width: int = 60) -> str:
    text = "" if value is None else " ".join(str(value).split())
    return escape(text if len(text) <= width else text[: width - 3] + "...")


def _print_inspection(result: Inspection) -> None:
    console = _console()
    where = result.path + ("  (gzipped; read from a temporary copy)" if result.path.endswith(".gz") else "")
    console.print(f"[bold]Session {result.session_id}[/bold] ({result.status or 'not in main.db'})")
    console.print(f"[dim]{escape(where)}[/dim]")
    counts = Table(title="Tables", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    counts.add_column("table")
    counts.add_column("rows", justify="right")
    for name, n in result.counts.items():
        counts.add_row(name, "[bold red]MISSING[/]" if n is None else str(n))
    if result.counts:
        console.print(counts)
    else:
        console.print("[bold red]the tables cannot be read[/]")
    if not result.findings:
        console.print("[green]✓ no problems found[/green]")
    for f in result.findings:
        console.print(
            f"[{_SEVERITY_STYLE[f.severity]}]{f.severity:7}[/] {escape(f.check)}: {escape(f.message)}"
        )
    by = {s: sum(f.severity == s for f in result.findings) for s in _SEVERITY_STYLE}
    console.print(f"{by['error']} errors, {by['warning']} warnings, {by['info']} info", style="bold")
    if result.mcp:
        table = Table(title="MCP usage", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("server", "tool", "decision", "calls", "avg ms", "bytes"):
            table.add_column(col, justify="right" if col in ("calls", "avg ms", "bytes") else "left")
        for r in result.mcp:
            table.add_row(escape(r["server_name"]), escape(r["tool_name"] or ""), escape(r["decision"]),
                          str(r["calls"]), str(r["avg_ms"]), f"{r['bytes']:,}")  # fmt: skip
        console.print(table)
    if result.inputs:
        top = result.inputs[0]
        if top["cost_share"] is not None:
            console.print(f"{top['part'].replace('_', ' ')} were {top['cost_share']:.0%} of this session's input cost "
                          "(estimated split of the reported input tokens)")  # fmt: skip
        table = Table(title="Input by source", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("part", "tokens", "share", "cached", "cost", "cost share"):
            table.add_column(col, justify="left" if col == "part" else "right")
        for r in result.inputs:
            cost = "–" if r["cost_usd"] is None else f"${r['cost_usd']:.4f}"
            share = "–" if r["cost_share"] is None else f"{r['cost_share']:.0%}"
            table.add_row(r["part"].replace("_", " "), f"{r['tokens']:,}", f"{r['token_share']:.0%}",
                          f"{r['cache_read']:,}", cost, share)  # fmt: skip
        console.print(table)
    if result.tools:
        table = Table(title="Tool usage", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("tool", "origin", "calls", "results", "errors"):
            table.add_column(col, justify="right" if col in ("calls", "results", "errors") else "left")
        for r in result.tools:
            table.add_row(escape(r["tool_name"]), escape(r["origin"]), str(r["calls"]), str(r["results"]),
                          str(r["errors"]))  # fmt: skip
        console.print(table)
    for name, rows in result.previews.items():
        table = Table(title=f"Last {len(rows)} {name}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      collapse_padding=True)  # fmt: skip
        columns = [c for c in _PREVIEW_COLUMNS.get(name, ()) if c in rows[0]]
        for col in columns:
            table.add_column(col, overflow="ellipsis", no_wrap=True, min_width=min(len(col), 8))
        for r in rows:
            table.add_row(*(_cut(r[c]) for c in columns))
        console.print(table)


# --- cost and prices ---------------------------------------------------------------------------


@cli.command("cost-report")
@click.option("--since", type=click.DateTime(["%Y-%m-%d"]), metavar="YYYY-MM-DD",
              help="First day to include (UTC, by session start).")  # fmt: skip
@click.option("--until", type=click.DateTime(["%Y-%m-%d"]), metavar="YYYY-MM-DD",
              help="Last day to include (inclusive).")  # fmt: skip
@click.option("--by", "group_by", type=click.Choice(["session", "provider", "model", "day"]), default="model",
              show_default=True, help="How to group the rows.")  # fmt: skip
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Also write one self-contained HTML page with charts (no scripts, no network).")  # fmt: skip
@json_option
def cost_report_cmd(since, until, group_by, html_path, as_json) -> None:
    """Cost and tokens by model, provider, day or session.

    Numbers come from the main.db rollup over a date range (UTC days of session start), so
    vacuumed and culled sessions count; running sessions are read live from their
    session.db. Unpriced models count as $0 and are reported.

    \b
    Examples:
        capsem cost-report
        capsem cost-report --since 2026-11-01 --until 2026-11-30 --by day
        capsem cost-report --by provider --html cost.html
    """
    from assembler.reports import cost_report, html_report

    since_s, until_s = (d.date().isoformat() if d else None for d in (since, until))
    if since_s and until_s and since_s > until_s:
        raise click.BadParameter(f"--since {since_s} is after --until {until_s}")
    with user_errors(), _stderr_progress() as progress:
        task = progress.add_task("aggregating sessions", total=None)
        report = cost_report(
            since_s, until_s, lambda done, total: progress.update(task, completed=done, total=total)
        )
    if html_path:
        try:
            html_path.write_text(html_report(report), encoding="utf-8")
        except OSError as exc:
            raise click.ClickException(f"cannot write {html_path}: {exc}") from exc
        click.echo(f"wrote {html_path}", err=True)
    if as_json:
        click.echo(json.dumps(report.to_json(group_by), indent=2))
        return
    rows, total = report.rows(group_by), report.totals()
    if not rows:
        click.echo(f"No model calls between {since_s or 'the first session'} and {until_s or 'now'} "
                   f"({report.sessions} sessions)")  # fmt: skip
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_footer=True)
    table.add_column(group_by, footer="total")
    table.add_column("sessions", justify="right", footer=str(total.sessions))
    table.add_column("calls", justify="right", footer=f"{total.calls:,}")
    table.add_column("input", justify="right", footer=f"{total.input_tokens:,}")
    table.add_column("output", justify="right", footer=f"{total.output_tokens:,}")
    table.add_column("cost", justify="right", footer=f"${total.cost:.4f}")
    for r in rows:
        table.add_row(escape(r.key), str(r.sessions), f"{r.calls:,}", f"{r.input_tokens:,}", f"{r.output_tokens:,}",
                      f"${r.cost:.4f}")  # fmt: skip
    console = _console()
    console.print(table)
    if report.unpriced_calls:
        console.print(
            f"{report.unpriced_calls} model calls have no known price (counted as $0)", style="yellow"
        )
    if report.live:
        console.print(f"{len(report.live)} running session(s) read live from session.db", style="dim")


@cli.command("update-prices")
@click.option("--from", "source", metavar="FILE|URL",
              help="A genai-prices data.json: a file, or an http(s) URL to download. "
                   "Without it, the default table (config/genai-prices.json) is restored.")  # fmt: skip
@dry_run_option
@json_option
def update_prices_cmd(source, dry_run, as_json) -> None:
    """Install a new price table (validated, atomic).

    The new table lands in $CAPSEM_HOME/prices.json and prices every later session. An
    invalid file changes nothing. Prints the models added, removed and repriced, per
    provider. Offline unless --from is an http(s) URL.

    \b
    Examples:
        capsem update-prices --from ./data.json --dry-run
        capsem update-prices --from https://raw.githubusercontent.com/pydantic/genai-prices/main/prices/data.json
        capsem update-prices            # back to the default table, config/genai-prices.json
    """
    from assembler.prices import update_prices

    try:
        update = update_prices(source, dry_run=dry_run)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(update.to_json(), indent=2))
        return
    click.echo(f"current: {update.old_source}")
    click.echo(f"new:     {update.source}")
    if not update.providers:
        click.echo("no model or price changes")
    for provider, ch in update.providers.items():
        click.echo(f"{provider}: {len(ch.added)} added, {len(ch.removed)} removed, {len(ch.changed)} changed")
        for model, what in ch.changed[:25]:
            click.echo(f"  ~ {model}: {what}")
        for sign, models in (("+", ch.added), ("-", ch.removed)):
            shown = models[:25]
            for model in shown:
                click.echo(f"  {sign} {model}")
            if len(models) > len(shown):
                click.echo(f"  {sign} ... and {len(models) - len(shown)} more")
    click.echo(f"total: {update.count('added')} added, {update.count('removed')} removed, "
               f"{update.count('changed')} changed")  # fmt: skip
    for note in update.notes:
        click.echo(note)
    if dry_run:
        click.echo("dry run: nothing installed")
    elif update.installed:
        click.echo(
            f"installed: {update.target}" if source else f"removed {update.target}; using the default table"
        )


# --- retention -----------------------------------------------------------------------------------


@cli.command("vacuum")
@dry_run_option
@json_option
def vacuum_cmd(dry_run, as_json) -> None:
    """Compress finished sessions and cull old ones.

    Finished (stopped/crashed) sessions are checkpointed, VACUUMed and gzipped to
    session.db.gz (every command still reads them). Sessions beyond retention_days,
    max_sessions (empty ones first, min_content_keep protected) or max_disk_gb are deleted
    and marked terminated; their main.db rollup stays. Running sessions are never touched.
    Settings: the `retention:` section of config/default.yaml, overridden by
    $CAPSEM_HOME/config.yaml. Every `capsem run` applies the same rules beside the agent,
    compressing only sessions finished more than `vacuum_after_hours` ago (`auto: false`
    switches that off); this command compresses every finished session now.

    \b
    Examples:
        capsem vacuum --dry-run
        capsem vacuum
        capsem vacuum --json
    """
    from dataclasses import asdict

    from assembler.retention import apply_retention

    with user_errors(), _stderr_progress() as progress:
        task = progress.add_task("retention", total=None)
        report = apply_retention(
            dry_run=dry_run, on_progress=lambda what: progress.update(task, description=what)
        )
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "policy": asdict(report.policy),
                               "actions": [asdict(a) for a in report.actions], "errors": report.errors,
                               "running": report.running, "disk_before": report.disk_before,
                               "disk_after": report.disk_after}, indent=2))  # fmt: skip
        sys.exit(1 if report.errors else 0)
    console = _console()
    p = report.policy
    console.print(f"retention: {_opt(p.retention_days)} days, {_opt(p.max_sessions)} sessions max, "
                  f"{_opt(p.max_disk_gb)} GB max, keep {p.min_content_keep} with content", style="dim")  # fmt: skip
    if report.actions:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("session", "action", "why", "before", "after"):
            table.add_column(col, justify="right" if col in ("before", "after") else "left")
        for a in report.actions:
            verb = ("would " if dry_run else "") + ("vacuum" if a.kind == "vacuum" else "cull")
            table.add_row(a.session_id, verb, escape(a.reason), _size(a.bytes_before),
                          "?" if dry_run and a.kind == "vacuum" else _size(a.bytes_after))  # fmt: skip
        console.print(table)
    else:
        console.print("nothing to do")
    for error in report.errors:
        click.echo(f"error: {error}", err=True)
    if report.running:
        console.print(f"{counted(len(report.running), 'running session')} left alone", style="dim")
    n_v, n_c = len(report.of("vacuum")), len(report.of("cull"))
    verb = "would vacuum" if dry_run else "vacuumed"
    console.print(f"{verb} {n_v}, {'would cull' if dry_run else 'culled'} {n_c}; sessions/ "
                  f"{_size(report.disk_before)} -> {'~' if dry_run else ''}{_size(report.disk_after)}")  # fmt: skip
    if report.errors:
        sys.exit(1)


def _opt(value: float | None) -> str:
    return "no" if not value else f"{value:g}"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# --- bundles (assembler/bundle) ------------------------------------------------------------------

from assembler.bundle.cli import bundle  # noqa: E402  (after `cli`: the group is defined in its own package)

cli.add_command(bundle)

from assembler.config_cli import config  # noqa: E402  (after `cli`, like bundle)

cli.add_command(config)

from assembler.show_call_cli import show_call  # noqa: E402

cli.add_command(show_call)

from assembler.budget import budget  # noqa: E402  (after `cli`, like bundle)

cli.add_command(budget)

from assembler.doctor_cli import doctor  # noqa: E402  (after `cli`, like bundle)

cli.add_command(doctor)


def main() -> None:
    cli()
