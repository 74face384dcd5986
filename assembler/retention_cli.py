"""Retention by hand: vacuum (compress and cull) and keep (spare a session)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click
from rich import box
from rich.markup import escape
from rich.table import Table

from assembler.cli_support import console as _console
from assembler.cli_support import (
    counted,
    dry_run_option,
    json_option,
    user_errors,
)
from assembler.cli_support import stderr_progress as _stderr_progress

if TYPE_CHECKING:
    from assembler.retention import Action


@click.command("vacuum")
@dry_run_option
@json_option
def vacuum_cmd(dry_run, as_json) -> None:
    """Compress finished sessions and cull old ones.

    Finished (stopped/crashed) sessions are checkpointed, VACUUMed and gzipped to
    session.db.gz (every command still reads them). Sessions beyond retention_days,
    max_sessions (empty ones first, min_content_keep protected) or max_disk_gb are deleted
    and marked culled, with the rule that culled them; their main.db rollup stays. Running
    sessions, sessions less than a day old and sessions marked with `capsem keep ID` are
    never culled.
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
                               "running": report.running, "spared": report.spared, "disk_before": report.disk_before,
                               "disk_after": report.disk_after}, indent=2))  # fmt: skip
        sys.exit(1 if report.errors else 0)
    console = _console()
    p = report.policy
    console.print(f"retention: {_opt(p.retention_days)} days, {_opt(p.max_sessions)} sessions max, "
                  f"{_opt(p.max_disk_gb)} GB max, keep {p.min_content_keep} with content", style="dim")  # fmt: skip
    if report.actions:
        console.print(_actions_table(report.actions, dry_run))
    else:
        console.print("nothing to do")
    for error in report.errors:
        click.echo(f"error: {error}", err=True)
    if report.running:
        console.print(f"{counted(len(report.running), 'running session')} left alone", style="dim")
    if report.spared:
        console.print("never culled: " + _spared_counts(report.spared), style="dim")
    n_v, n_c = len(report.of("vacuum")), len(report.of("cull"))
    verb = "would vacuum" if dry_run else "vacuumed"
    console.print(f"{verb} {n_v}, {'would cull' if dry_run else 'culled'} {n_c}; sessions/ "
                  f"{_size(report.disk_before)} -> {'~' if dry_run else ''}{_size(report.disk_after)}")  # fmt: skip
    if report.errors:
        sys.exit(1)


def _actions_table(actions: list[Action], dry_run: bool) -> Table:
    """What vacuum did (or would do) to each session, with the sizes before and after."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("session", "action", "why", "before", "after"):
        table.add_column(col, justify="right" if col in ("before", "after") else "left")
    for a in actions:
        verb = ("would " if dry_run else "") + ("vacuum" if a.kind == "vacuum" else "cull")
        table.add_row(a.session_id, verb, escape(a.reason), _size(a.bytes_before),
                      ("~" if dry_run and a.kind == "vacuum" else "") + _size(a.bytes_after))  # fmt: skip
    return table


def _spared_counts(spared: list[tuple[str, str]]) -> str:
    """`2 less than a day old, 1 marked to keep`: how many sessions each reason spared, in first-seen order."""
    why: dict[str, int] = {}
    for _, reason in spared:
        why[reason] = why.get(reason, 0) + 1
    return ", ".join(f"{n} {reason}" for reason, n in why.items())


@click.command("keep")
@click.argument("session_id", metavar="SESSION_ID")
@click.option("--undo", is_flag=True, help="Let retention cull the session again.")
def keep_cmd(session_id, undo) -> None:
    """Never let retention cull a session.

    SESSION_ID may be any unique start of an id. A kept session is still compressed (vacuumed)
    when finished, never deleted; list-sessions shows it `stopped kept` (or `vacuumed kept`...).

    \b
    Examples:
        capsem keep 20260327-154418-f907
        capsem keep 20260327-1544 --undo
    """
    from assembler.retention import keep_session

    with user_errors(LookupError):
        full = keep_session(session_id, keep=not undo)
    click.echo(
        f"session {full}: " + ("retention may cull it again" if undo else "kept (retention never culls it)")
    )


def _opt(value: float | None) -> str:
    return "no" if not value else f"{value:g}"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
