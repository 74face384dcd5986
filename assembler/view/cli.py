"""`capsem view` and `capsem search`."""

from __future__ import annotations

import re
import socket
import threading
import webbrowser
from pathlib import Path

import click

from assembler.cli_support import console, serve_options, user_errors
from capsem.private import write_private


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on loopback (`port` 0: any free port).

    Raises:
        click.ClickException: not a loopback address, or the port is taken.
    """
    from assembler.bundle.errors import BundleError
    from assembler.bundle.serve import check_host

    try:
        check_host(host)
    except BundleError as exc:
        raise click.ClickException(f"refusing to serve on {host!r}: sessions are served on loopback only "
                                   "(127.0.0.1, ::1, localhost)") from exc  # fmt: skip
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(128)
    return sock


def server(sock: socket.socket):
    """A uvicorn server for the view app on an already bound socket (run it with `.run(sockets=[sock])`)."""
    import uvicorn

    from assembler.view.app import create_app

    host = str(sock.getsockname()[0])  # a loopback address (`bind` refuses any other)
    app = create_app(hosts=(host,))
    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))


def url_of(sock: socket.socket, path: str = "/") -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{path}"


def open_live_view() -> tuple[str, str]:
    """For `capsem run --view`: serve the view from a daemon thread of this process (it ends with
    the process), open the page of the session about to start, and return that session's id and
    the page's URL."""
    from capsem.ids import new_session_id

    session_id = new_session_id()
    sock = bind("127.0.0.1", 0)
    srv = server(sock)
    threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, name="capsem-view", daemon=True).start()
    url = url_of(sock, f"/s/{session_id}")
    click.echo(f"capsem view: {url}", err=True)
    threading.Timer(1.0, webbrowser.open, args=(url,)).start()
    return session_id, url


@click.command()
@click.argument("session_id", required=False, metavar="[SESSION_ID]")
@serve_options(port=0)
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address to listen on.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write SESSION's pages to one self-contained HTML file instead of serving.")  # fmt: skip
@click.option("--team", "team", is_flag=True, help="Open the team's page (every machine's sessions, from the team's "
              "PostgreSQL), over --since (default 30d).")  # fmt: skip
@click.option("--since", metavar="DAY", default="30d", show_default=True,
              help="With --team: the first day (UTC), as cost-report takes it.")  # fmt: skip
def view(session_id, no_open, port, host, html_out, team, since) -> None:
    """Look at sessions in the browser: list, timeline tree, calls, live, search.

    Serves every session under $CAPSEM_HOME on 127.0.0.1 only (nothing leaves the machine; no
    asset comes from the network). With SESSION_ID it opens that session's page. A running
    session's pages update themselves. Stop with Ctrl-C.

    \b
    Examples:
        capsem view
        capsem view 20260413-100211-ab12 --no-open --port 8765
        capsem view 20260413-100211-ab12 --html session.html
        capsem view --team --since 7d
    """
    import sqlite3

    if team:
        _view_team(since, no_open, port, host, html_out)
        return

    from assembler.sessiondb import resolve
    from assembler.view.queries import IncompleteDatabase

    with user_errors(IncompleteDatabase, sqlite3.DatabaseError, OSError):
        sid = resolve(session_id) if session_id or html_out is not None else None
        if html_out is not None:
            from assembler.view.app import View

            page = View().export(sid)
            write_private(html_out, page)
            console().print(
                f"wrote {html_out} ({len(page.encode()):,} bytes): session {sid}; open it in any browser"
            )
            return
    path = f"/s/{sid}" if sid else "/"
    sock = bind(host, port)
    url = url_of(sock, path)
    srv = server(sock)
    click.echo(f"capsem view: {url}  (Ctrl-C to stop)")
    if not no_open:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    srv.run(sockets=[sock])  # uvicorn stops on SIGINT and SIGTERM
    sock.close()


def _view_team(since: str, no_open: bool, port: int, host: str, html_out: Path | None) -> None:
    """`view --team`: the team page, served with this machine's own pages behind it (or written)."""
    import uvicorn

    from assembler.reports import parse_day
    from assembler.team.cli import team_app, team_connection, the_team

    try:
        day = parse_day(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from exc
    if html_out is not None:
        from assembler.team.page import team_page

        t = the_team()
        pg = team_connection(t)
        try:
            page = team_page(pg, day, t.machine)
        finally:
            pg.close()
        write_private(html_out, page)
        console().print(f"wrote {html_out} ({len(page.encode()):,} bytes): the team's page")
        return
    sock = bind(host, port)
    url = url_of(sock, "/team")
    app = team_app((str(sock.getsockname()[0]),), day)
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    click.echo(f"capsem view: {url}  (Ctrl-C to stop)")
    if not no_open:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    srv.run(sockets=[sock])
    sock.close()


@click.command("search")
@click.argument("text", nargs=-1, required=True)
@click.option(
    "-n", "limit", default=20, show_default=True, type=click.IntRange(min=1), help="Most hits to show."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def search(text, limit, as_json) -> None:
    """Full-text search across every session: messages, thinking, tool arguments and results,
    MCP payloads. Each hit names its session and model call (`capsem show-call CALL SESSION`).

    The index ($CAPSEM_HOME/search.db) is brought up to date first; gzipped sessions are included.

    \b
    Examples:
        capsem search "permission denied"
        capsem search TODO -n 50 --json
    """
    import json

    from rich import box
    from rich.table import Table
    from rich.text import Text

    from assembler.view.search import search as run_search

    with user_errors():
        hits = run_search(" ".join(text), limit)
    if as_json:
        click.echo(json.dumps([h.__dict__ for h in hits], indent=2, ensure_ascii=False))
        return
    out = console()
    if not hits:
        out.print(f"no match for {' '.join(text)!r}")
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, expand=True)
    table.add_column("session · call · where", no_wrap=True, max_width=28, overflow="ellipsis")
    table.add_column("text", ratio=1, overflow="fold")
    for h in hits:
        snippet = Text()
        for i, part in enumerate(re.split(r"[«»]", h.snippet.replace("\n", " "))):
            snippet.append(part, style="bold yellow" if i % 2 else "")
        where = Text(h.session_id, style="cyan")
        where.append(f"\n#{h.call_id}" if h.call_id else "\n—")
        where.append(f" {h.kind}" + (f" {h.label}" if h.label else ""), style="dim")
        table.add_row(where, snippet)
    out.print(table)
    out.print(f"{len(hits)} hit{'' if len(hits) == 1 else 's'}; open one: capsem view SESSION", style="dim")
