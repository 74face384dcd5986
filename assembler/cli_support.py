"""What the click commands share: expected failures as one-line errors, and the console.

Kept apart from `assembler.cli` so that command groups defined in their own modules (e.g.
`assembler.bundle.cli`) use them without importing the top-level CLI that adds those groups.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

F = TypeVar("F", bound=Callable[..., Any])


def capsem_command() -> str:
    """How to run this capsem from a new shell: `capsem` when that name on PATH is this very
    program, else its absolute path (`/home/me/capsem/.venv/bin/capsem`), else this Python with
    `-m assembler`. Every command capsem suggests starts with it, so a pasted line works."""
    import shlex
    import shutil
    from pathlib import Path

    running = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if running is not None and running.name == "capsem" and running.exists():
        on_path = shutil.which("capsem")
        if on_path is not None and Path(on_path).resolve() == running.resolve():
            return "capsem"
        return shlex.quote(str(running.absolute()))
    on_path = shutil.which("capsem")
    if on_path is not None and Path(on_path).absolute().parent == Path(sys.executable).absolute().parent:
        return "capsem"
    return f"{shlex.quote(sys.executable)} -m assembler"


def query_options(f: F) -> F:
    """`-p/--param`, `--format`, `--max-rows`, `--timeout`: the flags of the commands that run one SQL query."""
    for option in reversed([
        click.option("-p", "--param", "params", multiple=True, metavar="VALUE",
                     help="Bind a value to the next ? placeholder (repeatable)."),
        click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table",
                     show_default=True, help="Output format."),
        click.option("--max-rows", default=10000, show_default=True, type=click.IntRange(min=1),
                     help="Stop after this many rows."),
        click.option("--timeout", default=10.0, show_default=True, type=click.FloatRange(min=0.1),
                     metavar="SECONDS", help="Stop a query that runs longer."),
    ]):  # fmt: skip
        f = option(f)
    return f


def serve_options(port: int = 8001) -> Callable[[F], F]:
    """`--port` and `--no-open` (alias `--no-browser`): the flags every command that serves pages shares."""

    def decorate(f: F) -> F:
        f = click.option("--no-open", "--no-browser", "no_open", is_flag=True,
                         help="Do not open a browser.")(f)  # fmt: skip
        return click.option("--port", default=port, show_default=True, type=click.IntRange(0, 65535),
                            help="Port to listen on; 0 picks a free one.")(f)  # fmt: skip

    return decorate


@contextmanager
def user_errors(*extra: type[Exception]) -> Iterator[None]:
    """Turn the library's expected failures (and `extra` ones) into one-line click errors (exit 1)."""
    from assembler.query import QueryError
    from assembler.sessiondb import SessionDbError, SessionNotFound
    from capsem.config import ConfigError

    try:
        yield
    except (FileNotFoundError, SessionNotFound, SessionDbError, QueryError, ConfigError, *extra) as exc:
        raise click.ClickException(str(exc)) from exc


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and its noun, agreeing: `1 session`, `2 sessions`, `1 model call has`... (`plural` when
    it is not noun + s: `counted(2, "entry", "entries")`)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def stderr_progress() -> Progress:
    """A transient progress bar on stderr (only when stderr is a terminal)."""
    return Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=Console(stderr=True), transient=True,
        disable=not sys.stderr.isatty(),
    )  # fmt: skip


def console() -> Console:
    """The terminal's console; a wide one when output goes to a file or pipe (no folding at 80),
    unless $COLUMNS says how wide."""
    out = Console()
    return out if out.is_terminal or os.environ.get("COLUMNS", "").isdigit() else Console(width=160)


F = TypeVar("F", bound=Callable[..., Any])


def json_option(f: F) -> F:
    """`--json`: machine-readable output instead of the table."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(f)


def dry_run_option(f: F) -> F:
    """`--dry-run`: show what would change, change nothing."""
    return click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")(f)


def session_argument(f: F) -> F:
    """Optional SESSION_ID; the newest session with a database when left out."""
    return click.argument("session_id", required=False, metavar="[SESSION_ID]")(f)
