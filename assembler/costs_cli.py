"""Money: cost-report and update-prices (and the DAY type the export commands share)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from assembler.cli_support import console as _console
from assembler.cli_support import (
    counted,
    dry_run_option,
    json_option,
    user_errors,
)
from assembler.cli_support import stderr_progress as _stderr_progress
from capsem.private import write_private

if TYPE_CHECKING:
    from rich.console import Console

    from assembler.costs import Usage
    from assembler.reports import CostReport, CostRow


class _Day(click.ParamType):
    """A UTC day: YYYY-MM-DD, or `7d` / `2w` ago, or `today`."""

    name = "day"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from assembler.reports import parse_day

        try:
            return parse_day(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.command("cost-report")
@click.option("--since", type=_Day(), metavar="DAY", help="First day to include: YYYY-MM-DD, 7d, 2w or today (UTC, "
              "by session start).")  # fmt: skip
@click.option("--until", type=_Day(), metavar="DAY", help="Last day to include (inclusive), same forms.")
@click.option("--by", "group_by", type=click.Choice(["session", "provider", "model", "day", "week", "month", "project",
              "branch", "tag", "user", "machine"]), default="model", show_default=True,
              help="How to group the rows (user and machine: with --team).")  # fmt: skip
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Also write one self-contained HTML page with charts (no scripts, no network).")  # fmt: skip
@click.option("--include-emulated", is_flag=True,
              help="Count emulated sessions too (run --emulator, demo, replays: nothing was spent).")  # fmt: skip
@click.option(
    "--team", "team", is_flag=True, help="The whole team's sessions, from its PostgreSQL (see `capsem team`)."
)
@json_option
def cost_report_cmd(since, until, group_by, html_path, include_emulated, team, as_json) -> None:
    """Cost and tokens by model, provider, session, day, week, month, project, branch or tag.

    Numbers come from the main.db rollup over a date range (UTC days of session start), so
    vacuumed and culled sessions count; running sessions are read live from their
    session.db. Tokens are shown as ccusage shows them: input (uncached), cache write, cache
    read, output (reasoning included) and reasoning; the cost is split by token type below the
    table. Unpriced models count as $0 and are reported. Project (the git repository's or
    workspace's folder), branch (project@branch) and tags are those capsem run recorded; a
    session with several tags counts under each. Sessions whose answers cost nothing (`run
    --emulator`, `demo`, replays) are left out unless --include-emulated.

    \b
    Examples:
        capsem cost-report
        capsem cost-report --since 7d --by day
        capsem cost-report --since 2026-11-01 --until 2026-11-30 --by week
        capsem cost-report --by provider --html cost.html
        capsem cost-report --since 30d --by project
        capsem cost-report --team --by user --since 7d
    """
    if since and until and since > until:
        raise click.BadParameter(f"--since {since} is after --until {until}")
    if group_by in ("user", "machine") and not team:
        raise click.BadParameter(f"--by {group_by} needs --team (this machine's sessions are all one user's)")
    if team:
        from assembler.team.cli import team_connection, the_team
        from assembler.team.report import team_cost_report

        pg = team_connection(the_team())
        try:
            report = team_cost_report(pg, since, until, include_emulated=include_emulated)
        finally:
            pg.close()
    else:
        report = _local_report(since, until, include_emulated)
    _show_report(report, group_by, html_path, include_emulated, as_json)


def _local_report(since: str | None, until: str | None, include_emulated: bool) -> CostReport:
    from assembler.reports import cost_report

    with user_errors(), _stderr_progress() as progress:
        task = progress.add_task("aggregating sessions", total=None)
        return cost_report(since, until, lambda done, total: progress.update(task, completed=done, total=total),
                           include_emulated=include_emulated)  # fmt: skip


def _show_report(report: CostReport, group_by: str, html_path: Path | None, include_emulated: bool,
                 as_json: bool) -> None:  # fmt: skip
    from assembler.reports import html_report
    from assembler.tables import Column, fit_table

    since, until = report.since, report.until
    if html_path:
        try:
            write_private(html_path, html_report(report))
        except OSError as exc:
            raise click.ClickException(f"cannot write {html_path}: {exc}") from exc
        click.echo(f"wrote {html_path}", err=True)
    if as_json:
        click.echo(json.dumps(report.to_json(group_by), indent=2))
        return
    rows, total = report.rows(group_by), report.totals()
    if not rows:
        click.echo(f"No model calls between {since or 'the first session'} and {until or 'now'} "
                   f"({counted(report.sessions, 'session')})")  # fmt: skip
        if report.emulated and not include_emulated:
            click.echo(_emulated_note(report))
        return
    console = _console()

    footer = _cost_cells(total)
    footer[0] = "total"
    names = [(group_by, "left", 10), ("sessions", "right", 1), ("calls", "right", 3), ("input", "right", 8),
             ("cache\nwrite", "right", 7), ("cache\nread", "right", 7), ("output", "right", 8),
             ("reasoning", "right", 2), ("cost", "right", 10), ("lost to\ncache breaks", "right", 9)]  # fmt: skip
    table = [_cost_cells(r) for r in rows]
    if not total.usage.cache_break_cost:  # the column only where cache breaks cost something
        names, footer, table = names[:-1], footer[:-1], [r[:-1] for r in table]
    columns = [Column(n, j, p, footer=f) for (n, j, p), f in zip(names, footer, strict=True)]  # type: ignore[arg-type]
    console.print(fit_table(columns, table, console.width, footer=True))
    _print_cost_notes(console, report, total.usage)


def _cost_cells(r: CostRow) -> list[str]:
    """One row of the cost-report table (the totals row too), in the order of its columns."""
    u = r.usage
    unpriced = not u.cost and bool(u.input_tokens or u.output_tokens)
    return [r.key, str(r.sessions), f"{u.calls:,}", f"{u.uncached_input:,}", f"{u.cache_write_tokens:,}",
            f"{u.cache_read_tokens:,}", f"{u.output_tokens:,}", f"{u.reasoning_tokens:,}",
            "unpriced" if unpriced else f"${u.cost:.4f}",
            f"${u.cache_break_cost:.4f}" if u.cache_break_cost else "–"]  # fmt: skip


def _print_cost_notes(console: Console, report: CostReport, total: Usage) -> None:
    """The lines under the cost-report table: the cost by token type, unpriced calls, live sessions."""
    from assembler.costs import split_line

    if split := split_line(total):
        console.print(f"cost by token type: {split}")
    if report.unpriced_calls:
        console.print(f"{counted(report.unpriced_calls, 'model call')} with tokens but no known price "
                      "(counted as $0)", style="yellow")  # fmt: skip
    if report.live:
        console.print(
            f"{counted(len(report.live), 'running session')} read live from session.db", style="dim"
        )
    if report.emulated:
        console.print(_emulated_note(report), style="dim", highlight=False)


def _emulated_note(report: CostReport) -> str:
    if report.include_emulated:
        return f"{counted(report.emulated, 'emulated session')} counted (nothing was spent in them)"
    return (f"{counted(report.emulated, 'emulated session')} left out (run --emulator, demo, replays: "
            "nothing was spent); --include-emulated counts them")  # fmt: skip


@click.command("update-prices")
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
