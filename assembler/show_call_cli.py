"""The `capsem show-call` command (the work is in assembler/show_call.py)."""

from __future__ import annotations

import json
import sys

import click

from assembler.cli_support import user_errors


@click.command("show-call")
@click.argument("call_id", type=int, metavar="ID")
@click.argument("session_id", required=False, metavar="[SESSION_ID]")
@click.option("--request", "which", flag_value="request", help="Only the request (with --json or --raw).")
@click.option("--response", "which", flag_value="response", help="Only the response (with --json or --raw).")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON document: the model_calls row and each stored body (a stream as a list of events).",
)
@click.option("--raw", is_flag=True, help="The exact stored bytes on stdout (needs --request or --response).")
def show_call(call_id: int, session_id: str | None, which: str | None, as_json: bool, raw: bool) -> None:
    """Show one model call: what it was asked, what it cost, what it answered (ID = model_calls.id).

    By default it reads as `capsem view`'s call page does: model, status, tokens, cost and where
    the input tokens went; the system prompt and each tool definition on a line (new in this call
    or as before); the conversation with its new items marked +, tool calls beside their results;
    then the answer assembled. On a terminal it opens in a pager. --json prints one JSON
    document (the call's row and its stored bodies, for jq), --raw the exact bytes: what
    crossed the proxy, decoded (gzip, br, zstd…), except spans the scrubber replaced
    (`[redacted hash:…]`).

    \b
    Examples:
        capsem show-call 12
        capsem show-call 12 --json
        capsem show-call 12 --request --raw > request.json
        capsem show-call 3 20260327-154418-f907 --response --json
    """
    from assembler.sessiondb import resolve
    from assembler.show_call import CallNotFound, call_bodies, document

    if raw and which is None:
        raise click.UsageError("--raw writes one body: add --request or --response")
    if which is not None and not (raw or as_json):
        as_json = True  # one body: shown as JSON
    session = resolve(session_id)
    if not (raw or as_json):
        _readable(session, call_id)
        return
    with user_errors(CallNotFound):
        bodies = call_bodies(session, call_id)
    chosen = [b for b in (bodies.request, bodies.response) if b is not None and which in (None, b.direction)]
    if not chosen:
        kept = which or "body"
        raise click.ClickException(
            f"model call {call_id} has no stored {kept} (recorded before bodies were kept)"
        )
    if raw:
        sys.stdout.buffer.write(chosen[0].data)
        return
    click.echo(json.dumps(document(bodies, which), indent=2, ensure_ascii=False, default=str))


def _readable(session_id: str, call_id: int) -> None:
    """The call as the call page shows it, through a pager on a terminal."""
    import shutil
    import sqlite3

    from assembler.sessiondb import open_session
    from assembler.show_call_text import render_call
    from assembler.view.queries import IncompleteDatabase, call_view

    with user_errors(IncompleteDatabase, sqlite3.DatabaseError), open_session(session_id) as conn:
        view = call_view(conn, session_id, call_id)
    if view is None:
        raise click.ClickException(f"session {session_id} has no model call {call_id}")
    width = min(shutil.get_terminal_size((80, 24)).columns, 120)
    text = render_call(view, width)
    if sys.stdout.isatty():
        click.echo_via_pager(text + "\n")
    else:
        click.echo(text)
