"""The `capsem diff` command (the work is in assembler/diff/)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import click

from assembler.cli_support import console, user_errors
from capsem.private import write_private


@click.command("diff")
@click.argument("a", metavar="A")
@click.argument("b", metavar="[B]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the diff page (as `capsem view` shows it at /diff/A/B) to one HTML file.")  # fmt: skip
def diff(a: str, b: str | None, as_json: bool, html_out: Path | None) -> None:
    """Compare two sessions call by call: what changed from A to B.

    With one session, it is compared with its original when it is a replay (`capsem replay`),
    else with the session before it in its project.

    The calls of both are lined up in order (a call only one session made is shown as such) and
    for each pair it shows what changed: the system prompt (a unified diff), tools added, removed
    or changed, the new items sent, the answer, the tool calls the model made and their results,
    model, tokens and cost; then the totals. Ids and timings differ on every run and are never
    counted as changes (dimmed). A and B: session ids or unique prefixes of them. The same
    comparison is a page in `capsem view` (/diff/A/B, or "compare with…" on a session's page).

    \b
    Examples:
        capsem diff 20260327-154418-f907 20260327-160102-a1b2
        capsem diff 20260327-160102-a1b2
        capsem diff 20260327-1544 20260327-1601 --json
        capsem diff 20260327-1544 20260327-1601 --html diff.html
    """
    from assembler.diff.compare import compare
    from assembler.diff.load import load_session
    from assembler.diff.text import as_json as to_json
    from assembler.diff.text import render
    from assembler.sessiondb import open_session, resolve
    from assembler.view.queries import IncompleteDatabase

    with user_errors(IncompleteDatabase, sqlite3.DatabaseError, OSError):
        ids = (resolve(a), resolve(b)) if b is not None else _with_base(resolve(a))
        if html_out is not None:
            from assembler.view.app import View

            page = View().export_diff(*ids)
            write_private(html_out, page)
            console().print(f"wrote {html_out} ({len(page.encode()):,} bytes): {ids[0]} → {ids[1]}")
            return
        runs = [load_session(open_session, session_id) for session_id in ids]
    found = compare(*runs)
    if as_json:
        click.echo(json.dumps(to_json(found), indent=2, ensure_ascii=False))
        return
    render(found, console())


def _with_base(session_id: str) -> tuple[str, str]:
    """(the session `session_id` is compared with by default, `session_id`)."""
    from assembler.diff.page import base_of

    base = base_of(session_id)
    if base is None:
        raise click.ClickException(
            f"session {session_id} is no replay and has no earlier session with a database: name B"
        )
    return base, session_id
