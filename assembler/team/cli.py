"""`capsem team init|push|status|local-server`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from assembler.cli_support import counted, json_option


def the_team():
    """The configured team, or a click error saying how to set one."""
    from capsem.team.config import team_of

    team = team_of()
    if team is None:
        raise click.ClickException("no team is set: put `team: {url: postgresql://...}` in $CAPSEM_HOME/config.yaml "
                                   "or set CAPSEM_TEAM_URL")  # fmt: skip
    return team


def team_connection(team):
    """A connection to the team's PostgreSQL whose schema this capsem writes (or a click error)."""
    from addons.recorder.team_push import connect_team
    from capsem.team.schema import SchemaError, check

    try:
        pg = connect_team(team)
    except Exception as exc:
        raise click.ClickException(f"cannot reach the team database {team.where}: {team.said(exc)}") from exc
    try:
        check(pg)
    except SchemaError as exc:
        pg.close()
        raise click.ClickException(str(exc)) from exc
    return pg


@click.group("team")
def team() -> None:
    """A team's sessions in one PostgreSQL: set it up, push, see what waits.

    Point a machine at the team with `team: {url: postgresql://...}` in
    $CAPSEM_HOME/config.yaml (or CAPSEM_TEAM_URL); every later session is pushed while it
    runs and when it ends. See docs/team.md.
    """


@team.command("init")
def init_cmd() -> None:
    """Create the team schema in the team's PostgreSQL, or bring it up to date.

    Refuses a schema newer than this capsem's. Safe to run again and from several machines.
    """
    from addons.recorder.team_push import connect_team
    from capsem.team.schema import SchemaError, init

    t = the_team()
    try:
        pg = connect_team(t)
    except Exception as exc:
        raise click.ClickException(f"cannot reach the team database {t.where}: {t.said(exc)}") from exc
    try:
        before, after = init(pg)
    except SchemaError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        pg.close()
    if before == after:
        click.echo(f"team schema in {t.where} is up to date (version {after})")
    else:
        click.echo(f"team schema in {t.where}: version {before} -> {after}")


@team.command("push")
@click.argument("sessions", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every session of this machine, from its first row.")
@json_option
def push_cmd(sessions, everything, as_json) -> None:
    """Push sessions to the team now: those waiting in the outbox, or SESSION..., or --all.

    Pushing again is harmless: every row is keyed by machine, session and row id, so
    nothing counts twice.

    \b
    Examples:
        capsem team push
        capsem team push 20261128-101500-ab12
        capsem team push --all
    """
    from addons.recorder.team_push import push_waiting
    from assembler.sessiondb import open_main, resolve
    from capsem.team import outbox

    t = the_team()
    team_connection(t).close()  # says why when the server cannot be used
    box = outbox.open_outbox()
    try:
        if everything:
            with open_main() as main:
                chosen = [r[0] for r in main.execute("SELECT id FROM sessions ORDER BY created_at")]
        else:
            chosen = [resolve(s) for s in sessions]
        if chosen:
            outbox.enqueue(box, chosen, again=True)
    finally:
        box.close()
    done, errors = push_waiting(t, only=chosen or None)
    if as_json:
        click.echo(json.dumps({"pushed": [{"session": d.session_id, "rows": d.rows, "final": d.final} for d in done],
                               "errors": errors}, indent=2))  # fmt: skip
    else:
        for d in done:
            click.echo(
                f"{d.session_id}: {counted(d.rows, 'row')} sent" + ("" if d.final else " (still running)")
            )
        for session_id, error in errors.items():
            click.echo(f"{session_id}: not pushed: {error}", err=True)
        if not done and not errors:
            click.echo("nothing waits to be pushed")
    if errors:
        raise SystemExit(1)


@team.command("status")
@json_option
def status_cmd(as_json) -> None:
    """What is pushed, what waits and why."""
    from capsem.team import outbox

    t = the_team()
    box = outbox.open_outbox()
    try:
        found = outbox.entries(box)
    finally:
        box.close()
    if as_json:
        click.echo(json.dumps({"machine": t.machine, "user": t.user, "share": t.share, "server": t.where,
                               "sessions": [e.__dict__ for e in found]}, indent=2))  # fmt: skip
        return
    click.echo(f"team: {t.where} as {t.user} on {t.machine}, share: {t.share}")
    waiting = [e for e in found if e.state == "waiting"]
    click.echo(f"{counted(len(found) - len(waiting), 'session')} pushed, {len(waiting)} waiting")
    for e in waiting:
        why = f"failed {counted(e.attempts, 'time')}: {e.error}" if e.error else "running, pushed as it goes"
        click.echo(f"  {e.session_id}: {counted(e.rows, 'row')} sent so far; {why}")


@team.command("local-server")
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Where the cluster lives (default: $CAPSEM_HOME/team/postgres).")  # fmt: skip
@click.option("--pg-port", "pg_port", type=int, default=5432, show_default=True,
              help="The port PostgreSQL listens on (127.0.0.1 only).")  # fmt: skip
def local_server_cmd(folder, pg_port) -> None:
    """Start a PostgreSQL on this machine to try the team features (Ctrl-C stops it).

    Needs PostgreSQL's server package (Debian: apt-get install postgresql). Prints the
    CAPSEM_TEAM_URL to use; trusted connections from 127.0.0.1 only.
    """
    from capsem.paths import capsem_home
    from capsem.team.cluster import Cluster, binaries, start_cluster

    folder = folder or capsem_home() / "team" / "postgres"
    try:
        if (folder / "data" / "PG_VERSION").is_file():
            from capsem.team.cluster import run_as

            cluster = Cluster(folder, pg_port, binaries() or Path("/nonexistent"), run_as())
            cluster.start()
        else:
            cluster = start_cluster(folder, pg_port)
    except Exception as exc:
        raise click.ClickException(f"cannot start PostgreSQL: {exc}") from exc
    click.echo(
        f"PostgreSQL is running in {cluster.folder}\n  export CAPSEM_TEAM_URL={cluster.url}\n  capsem team init"
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()


def list_team_sessions(limit: int, as_json: bool) -> None:
    """`list-sessions --team`: the team's newest sessions, every machine's."""
    from assembler.cli_support import console
    from assembler.tables import Column, fit_table
    from assembler.team.report import team_sessions

    pg = team_connection(the_team())
    try:
        found = team_sessions(pg, limit=limit or 1_000_000)
    finally:
        pg.close()
    if as_json:
        click.echo(json.dumps(found, indent=2, default=str))
        return
    if not found:
        click.echo("No sessions pushed to the team yet")
        return
    columns = [Column("machine", "left", 7), Column("user", "left", 6), Column("ID", "left", 10),
               Column("Created", "left", 7), Column("Status", "left", 7), Column("Cost", "right", 9),
               Column("calls", "right", 5), Column("tools", "right", 2), Column("mcp", "right", 1),
               Column("denied", "right", 3), Column("errors", "right", 3), Column("project", "left", 6, wrap=True),
               Column("program", "left", 4, wrap=True)]  # fmt: skip
    rows = [[r["machine"], r["user"], r["session_id"], r["created_at"][:16].replace("T", " "), r["status"],
             f"${r['total_estimated_cost']:.4f}", f"{r['total_model_calls']:,}", f"{r['total_tool_calls']:,}",
             f"{r['total_mcp_calls']:,}", f"{r['denied_requests']:,}", f"{r['total_errors']:,}",
             "@".join(p for p in (r["project"], r["git_branch"]) if p), r["program"] or ""] for r in found]  # fmt: skip
    out = console()
    out.print(fit_table(columns, rows, out.width))


def team_app(hosts: tuple[str, ...], since: str) -> Any:
    """The view's app with the team's pages in front: `/team` and `/team/<machine>/<session>`
    (each read from PostgreSQL when opened); every other path is this machine's own view."""
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse, RedirectResponse
    from starlette.routing import Mount, Route

    from assembler.team.page import team_page, team_session_page
    from assembler.view.app import create_app

    t = the_team()

    def page(request: Any) -> Any:  # a plain function: Starlette runs it in its thread pool
        pg = team_connection(t)
        try:
            return HTMLResponse(team_page(pg, since, t.machine))
        finally:
            pg.close()

    def session(request: Any) -> Any:
        machine, sid = request.path_params["machine"], request.path_params["sid"]
        if machine == t.machine:
            return RedirectResponse(f"/s/{sid}")
        pg = team_connection(t)
        try:
            found = team_session_page(pg, machine, sid)
        finally:
            pg.close()
        return HTMLResponse(found or "no such session in the team", status_code=200 if found else 404)

    return Starlette(routes=[Route("/team", page), Route("/team/{machine}/{sid}", session),
                             Mount("/", app=create_app(hosts=hosts))])  # fmt: skip
