"""The `capsem show-call` command (the work is in assembler/show_call.py)."""

from __future__ import annotations

import sys

import click

from assembler.cli_support import user_errors


@click.command("show-call")
@click.argument("call_id", type=int, metavar="ID")
@click.argument("session_id", required=False, metavar="[SESSION_ID]")
@click.option("--request", "which", flag_value="request", help="Only the request.")
@click.option("--response", "which", flag_value="response", help="Only the response.")
@click.option("--raw", is_flag=True, help="The exact stored bytes on stdout (needs --request or --response).")
def show_call(call_id: int, session_id: str | None, which: str | None, raw: bool) -> None:
    """Show one model call's exact request and response (ID = model_calls.id).

    The bodies are what crossed the proxy, decoded (gzip, br, zstd…), except spans the scrubber
    replaced (`[redacted hash:…]`). Without --raw they are shown readable: JSON indented, a
    stream one event per block.

    \b
    Examples:
        capsem show-call 12
        capsem show-call 12 --request --raw > request.json
        capsem show-call 3 20260327-154418-f907 --response
    """
    from assembler.sessiondb import resolve
    from assembler.show_call import CallNotFound, call_bodies, render

    if raw and which is None:
        raise click.UsageError("--raw writes one body: add --request or --response")
    with user_errors(CallNotFound):
        bodies = call_bodies(resolve(session_id), call_id)
    chosen = [b for b in (bodies.request, bodies.response) if b is not None and which in (None, b.direction)]
    if not chosen:
        kept = which or "body"
        raise click.ClickException(
            f"model call {call_id} has no stored {kept} (recorded before bodies were kept)"
        )
    if raw:
        sys.stdout.buffer.write(chosen[0].data)
        return
    call = bodies.call
    click.echo(
        f"model call {call_id}: {call['provider']} {call['model'] or '?'}, status {call['status_code']}"
    )
    if bodies.inputs and which is None:
        total = sum(p["tokens"] for p in bodies.inputs) or 1
        click.echo(f"input tokens by source (estimated, scaled to the reported {call['input_tokens']:,}):")
        for p in bodies.inputs:
            cost = "" if p["cost_usd"] is None else f"  ${p['cost_usd']:.5f}"
            cached = f"  ({p['cache_read_tokens']:,} cached)" if p["cache_read_tokens"] else ""
            name = p["part"].replace("_", " ")
            click.echo(f"  {name:22} {p['tokens']:>9,}  {p['tokens'] / total:>4.0%}{cost}{cached}")
    for body in chosen:
        cut = ", truncated" if body.truncated else ""
        click.secho(f"\n── {body.direction} ({body.size:,} bytes{cut}) ──", bold=True)
        click.echo(render(body))
