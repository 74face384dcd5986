"""`capsem approvals`, `capsem approve ID`, `capsem deny ID`: the requests `ask` rules hold in the
running sessions, and the answers (assembler/approvals.py does the work)."""

from __future__ import annotations

import json
import textwrap

import click

from assembler.approvals import ApprovalError, WaitingRequest, decide, waiting_requests
from assembler.cli_support import capsem_command, console, counted, json_option, user_errors

ARGUMENTS_SHOWN = 300
"""Characters of a tool's arguments shown in the listing (`--json` has them whole)."""


@click.command("approvals")
@json_option
def approvals_cmd(as_json: bool) -> None:
    """List the requests waiting for a person, in every running session.

    A policy rule with `action: ask` holds its request (an HTTP request or an MCP
    tools/call) in the proxy until it is approved, denied, or times out after
    policy.ask_timeout_s. Tool arguments are shown scrubbed.

    \b
    Examples:
        capsem approvals
        capsem approvals --json
    """
    waiting, problems = waiting_requests()
    if as_json:
        click.echo(json.dumps({"waiting": [w.as_dict() for w in waiting], "problems": problems}, indent=2))
        return
    out = console()
    for problem in problems:
        out.print(f"[yellow]{problem}[/]", highlight=False)
    if not waiting:
        out.print("Nothing waits for a person.", highlight=False)
        return
    width = max(40, min(out.width, 160))
    for w in waiting:
        out.print(_block(w, width), highlight=False, markup=False, soft_wrap=True)
    capsem = capsem_command()
    out.print(f"{counted(len(waiting), 'request')} waiting. Answer with `{capsem} approve ID` or\n"
              f"`{capsem} deny ID [--reason TEXT]`; --always: for the rest of the session.", highlight=False)  # fmt: skip


def _block(w: WaitingRequest, width: int) -> str:
    """One waiting request in a few lines that read well at 80 columns and wide."""
    lines = [f"{w.id}  waiting {w.waiting_s:.0f} s  rule {w.rule}  session {w.session_id}",
             f"    {w.target}", f"    from {w.process}"]  # fmt: skip
    if w.arguments:
        args = w.arguments if len(w.arguments) <= ARGUMENTS_SHOWN else w.arguments[:ARGUMENTS_SHOWN] + "…"
        lines += textwrap.wrap(
            f"arguments {args}",
            width - 4,
            initial_indent="    ",
            subsequent_indent="      ",
            break_on_hyphens=False,
        )
    return "\n".join(lines) + "\n"


def _answer(approval_id: str, approve: bool, reason: str | None, always: bool) -> None:
    with user_errors(ApprovalError):
        w = decide(approval_id, approve, "cli", reason, always)
    verb = "approved" if approve else "denied"
    rest = " (and the same requests for the rest of the session)" if always else ""
    click.echo(f"{verb} {w.id}: {w.target} in session {w.session_id}{rest}")


@click.command("approve")
@click.argument("approval_id", metavar="ID")
@click.option("--always", is_flag=True, help="Approve the same requests for the rest of the session.")
def approve_cmd(approval_id: str, always: bool) -> None:
    """Let a waiting request go upstream unchanged.

    ID is shown by `capsem approvals`. With --always the answer becomes a rule
    for the rest of that session: the same rule on the same MCP server and tool
    (or the same method, host and path) is approved without asking.

    \b
    Examples:
        capsem approve 3f9c2a
        capsem approve 3f9c2a --always
    """
    _answer(approval_id, True, None, always)


@click.command("deny")
@click.argument("approval_id", metavar="ID")
@click.option("--reason", help="Why (sent to the agent in the error, and recorded).")
@click.option("--always", is_flag=True, help="Deny the same requests for the rest of the session.")
def deny_cmd(approval_id: str, reason: str | None, always: bool) -> None:
    """Refuse a waiting request: the proxy answers it with an error naming the rule.

    ID is shown by `capsem approvals`. With --always the answer becomes a rule
    for the rest of that session.

    \b
    Examples:
        capsem deny 3f9c2a
        capsem deny 3f9c2a --reason "not on the production database" --always
    """
    _answer(approval_id, False, reason, always)
