"""`capsem run` (an agent through a fresh session, its summary) and `capsem demo`."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--workspace", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Directory to run the agent in (default: the current one).")  # fmt: skip
@click.option("--mitmdump-args", default="", metavar="ARGS",
              help="Extra mitmdump arguments, e.g. '--mode upstream:http://corp-proxy:3128'.")  # fmt: skip
@click.option("--quiet", "-q", is_flag=True, help="Do not print the session summary.")
@click.option("--broker", is_flag=True,
              help="Give the agent placeholders for the configured credentials; only capsem holds the keys.")  # fmt: skip
@click.option("--view", "view", is_flag=True,
              help="Open the session's live page in the browser (capsem view); it stays up after the agent "
                   "ends, until Ctrl-C.")  # fmt: skip
@click.option("--emulator", is_flag=True,
              help="Send every provider call to the built-in emulator (every API; it answers as a model "
                   "would: a call of the agent's own shell tool, then a final text): try capsem without a key "
                   "or spending money.")  # fmt: skip
@click.option("--name", metavar="NAME", help="A name for this session (list-sessions, the web list).")
@click.option("--tag", "tags", multiple=True, metavar="TAG",
              help="A tag for this session (repeatable); cost-report --by tag, list-sessions --tag.")  # fmt: skip
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(workspace, mitmdump_args, quiet, broker, view, emulator, name, tags, command) -> None:
    """Run an agent and record its LLM traffic.

    The agent gets HTTPS_PROXY and the CA variables (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS,
    REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE...) pointing at a fresh mitmdump with the capsem addon.
    Its exit code is passed through. When its calls are not recorded: capsem doctor -- AGENT.
    Ctrl-C reaches the agent, and the session records until it exits (Ctrl-C again kills it).
    The workspace, its git repository, branch and commit at start are recorded with the session.

    \b
    Examples:
        capsem run -- claude -p "fix the failing test"
        capsem run --emulator -- claude -p "write a haiku"
        capsem run --name fix-ci --tag team-a --tag ci -- claude -p "fix the failing test"
        capsem run --workspace ~/src/app -- codex exec "add a README"
        capsem run -- gemini -p "summarize this repo"
        capsem run -- aider --message "rename foo to bar"
        capsem run --broker -- claude -p "fix the failing test"
    """
    from assembler.run import AgentNotFound, AgentSignals, run_agent
    from assembler.summary import print_session
    from capsem.config import ConfigError
    from capsem.mitm import MitmdumpError

    session_id = page = None
    if view:
        from assembler.view.cli import open_live_view

        session_id, page = open_live_view()
    with AgentSignals() as signals:  # until the summary is printed
        try:
            result = run_agent(list(command), workspace=workspace, mitmdump_args=mitmdump_args, broker=broker,
                               session_id=session_id, signals=signals, emulator=emulator, name=name,
                               tags=tuple(tags))  # fmt: skip
        except AgentNotFound as exc:  # as a shell says it, with its exit code (127, 126); nothing started
            click.echo(f"capsem run: {exc}", err=True)
            sys.exit(exc.exit_code)
        except (
            MitmdumpError,
            RuntimeError,
            ValueError,
            ConfigError,
        ) as exc:  # settings, mitmdump: one line saying why
            raise click.ClickException(str(exc)) from exc
        if not quiet:
            console = Console(stderr=True)
            console.print()
            print_session(result.session_id, console)
            if result.diagnostics is not None:
                console.print(result.diagnostics.summary(), style="dim")
        if result.retention is not None:
            from assembler.retention import summary_line

            if line := summary_line(result.retention):  # even with --quiet: deleting data is never silent
                Console(stderr=True).print(line, style="yellow" if result.retention.of("cull") else "dim",
                                           highlight=False)  # fmt: skip
    if page is not None:
        _keep_serving(page)
    sys.exit(result.exit_code)


def _keep_serving(page: str) -> None:
    """`run --view`: the page stays up after the agent ends, until Ctrl-C (in a terminal only: a
    script is never held)."""
    import time

    if not sys.stdin.isatty():
        click.echo(f"capsem view: {page} stops now (not a terminal); capsem view serves it again", err=True)
        return
    click.echo(f"capsem view: still serving {page} — Ctrl-C stops it", err=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        click.echo("", err=True)


@click.command()
def demo() -> None:
    """Record a scripted agent against a local emulator.

    A real mitmdump with the capsem addon sits between the agent and the emulator.

    \b
    Example:
        capsem demo
        CAPSEM_HOME=/tmp/capsem-demo capsem demo
    """
    from assembler.demo import run_demo
    from capsem.mitm import MitmdumpError

    try:
        run_demo()
    except MitmdumpError as exc:  # e.g. a credential of the user's config.yaml that is not set
        raise click.ClickException(str(exc)) from exc
    except ImportError as exc:
        raise click.ClickException(
            f"the demo needs the provider SDKs: pip install 'capsem[demo]' ({exc})"
        ) from exc
