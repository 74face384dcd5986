"""`capsem replay SESSION -- AGENT`: the command and its end summary."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console


@click.command(context_settings={"ignore_unknown_options": True})  # options before `--`, the agent after
@click.argument("session")
@click.option("--workspace", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Directory to run the agent in (default: the current one).")  # fmt: skip
@click.option(
    "--strict", is_flag=True, help="Exit 1 when any call missed (the agent's own status otherwise)."
)
@click.option("--speed", type=click.FloatRange(min=0.001), metavar="X",
              help="Send each answer at the recorded pace times X (1: as recorded); default: at once.")  # fmt: skip
@click.option("--from", "live_from", type=click.IntRange(min=1), metavar="N",
              help="With --live: model calls from call N on go to the real provider.")  # fmt: skip
@click.option("--live", is_flag=True, help="Let the calls from --from N on go to the real provider (a fork).")
@click.option("--model", metavar="M", help="With --live: the live calls ask for model M instead.")
@click.option("--live-via", metavar="URL", help="With --live: an HTTP proxy the live calls go through.")
@click.option("--live-ca", type=click.Path(dir_okay=False, exists=True), metavar="FILE",
              help="With --live: the CA that the live calls' servers are verified with.")  # fmt: skip
@click.option("--mitmdump-args", default="", metavar="ARGS", help="Extra mitmdump arguments.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the replay's counts, not the session summary.")
@click.option("--name", metavar="NAME", help="A name for the replay session.")
@click.option(
    "--tag", "tags", multiple=True, metavar="TAG", help="A tag for the replay session (repeatable)."
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def replay(session, workspace, strict, speed, live_from, live, model, live_via, live_ca, mitmdump_args, quiet,
           name, tags, command) -> None:  # fmt: skip
    """Run an agent again, answered from a recorded session (SESSION: its id or the start of it).

    The agent runs as under capsem run (proxy and CA in its environment), but every model and MCP
    call is answered from SESSION, matched by endpoint, position and content (dates, ids, the
    workspace path and Claude Code's billing line may differ). Nothing leaves the machine. A
    request with no recorded answer gets an error in the provider's shape naming the first
    differing item. The replay is recorded as a session of its own (replay_of = SESSION).
    Answers are the recorded bodies: scrubbed secrets come back as their markers.

    \b
    Examples:
        capsem replay 20261125-214333-0882 -- claude -p "fix the failing test"
        capsem replay 20261125-214333-0882 --strict -- python agent.py
        capsem replay 20261125-214333 --speed 1 -- codex exec "add a README"
        capsem replay 20261125-2143 --from 3 --live --model gpt-5-mini -- codex exec "..."
    """
    from assembler.replay.recording import RecordingError
    from assembler.replay.run import replay as run_replay
    from assembler.replay.server import Options
    from assembler.run import AgentNotFound, AgentSignals
    from assembler.sessiondb import SessionDbError, SessionNotFound, resolve
    from capsem.config import ConfigError
    from capsem.mitm import MitmdumpError

    if live != (live_from is not None):
        raise click.UsageError("--from N and --live go together (the calls from N on go live)")
    if (model or live_via or live_ca) and not live:
        raise click.UsageError(
            "--model, --live-via and --live-ca apply to the live part: add --from N --live"
        )
    options = Options(speed=speed, live_from=live_from, model=model, via=live_via, via_ca=live_ca)
    try:
        original = resolve(session)
    except (SessionNotFound, SessionDbError) as exc:
        raise click.ClickException(str(exc)) from exc
    with AgentSignals() as signals:
        try:
            result = run_replay(original, list(command), options=options, workspace=workspace, signals=signals,
                                mitmdump_args=mitmdump_args, name=name, tags=tuple(tags))  # fmt: skip
        except AgentNotFound as exc:
            click.echo(f"capsem replay: {exc}", err=True)
            sys.exit(exc.exit_code)
        except (RecordingError, SessionNotFound, SessionDbError, MitmdumpError, RuntimeError, ValueError,
                ConfigError) as exc:  # fmt: skip
            raise click.ClickException(str(exc)) from exc
        console = Console(stderr=True)
        if not quiet:
            from assembler.summary import print_session

            console.print()
            print_session(result.run.session_id, console)
        for line in summary_lines(result):
            console.print(line, highlight=False, markup=False, soft_wrap=False)
    if strict and result.report.missed:
        sys.exit(1)
    sys.exit(result.run.exit_code)


def summary_lines(result) -> list[str]:
    """The replay's end summary: what matched, missed and went live, and the first divergence."""
    from assembler.replay.run import first_miss

    report = result.report
    counts = [f"{report.matched} matched", f"{len(report.missed)} missed"]
    if report.live:
        counts.append(f"{report.live} live")
    if report.other:
        counts.append(f"{report.other} other requests not replayed")
    lines = [f"replay of {result.original} (its {result.model_calls} model calls): " + ", ".join(counts)]
    where = first_miss(report)
    lines.append(
        f"first divergence: {where}" if where else "no divergence: every call was answered from the recording"
    )
    for miss in report.missed[1:4]:
        what = f"model call {miss.number}" if miss.number is not None else "an MCP call"
        lines.append(f"  then {what}: {miss.difference}")
    if len(report.missed) > 4:
        lines.append(f"  … and {len(report.missed) - 4} more misses")
    return lines
