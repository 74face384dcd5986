"""`capsem export otlp`: send recorded sessions to an OpenTelemetry endpoint, from each one's
watermark on (what live export could not send, or sessions recorded without it)."""

from __future__ import annotations

from dataclasses import dataclass

import click

from assembler.cli_support import counted, user_errors
from assembler.cli_support import stderr_progress as _stderr_progress
from assembler.costs_cli import _Day


@dataclass
class Outcome:
    session_id: str
    spans: int
    state: str
    """`sent`, `up to date`, `failed` or `skipped (...)`."""
    failure: tuple[int | None, str] | None = None
    """When failed: the HTTP status (None: no answer) and what happened (`addons.recorder.otlp.send.failure_of`)."""


def failure_message(url: str, failure: tuple[int | None, str] | None) -> str:
    """One line: what the endpoint said, the URL the spans were posted to, and what to do."""
    from addons.recorder.otlp.send import traces_url

    posted = traces_url(url)
    status, what = failure or (None, "no answer")
    if status is None:
        hint = "nothing accepted the connection: is the collector running and listening there (OTLP/HTTP: port 4318)?"
    elif status in (404, 405, 415, 501):
        hint = ("that server does not take OTLP/HTTP protobuf there: point --endpoint at the collector's OTLP/HTTP "
                "receiver (port 4318; /v1/traces is added)")  # fmt: skip
    elif status in (401, 403):
        hint = "the collector refused the credentials: set them in export.otlp.headers"
    elif status == 413:
        hint = "the batch was too large for the collector: raise its limit, or export without --content"
    else:
        hint = "the collector failed: look at its log, then run this again to send the rest"
    return f"{what} from {posted}: {hint}"


@click.command("otlp")
@click.argument("session_id", required=False, metavar="[SESSION_ID]")
@click.option("--since", type=_Day(), metavar="DAY",
              help="Only sessions started on or after this UTC day: YYYY-MM-DD, 7d, 2w or today.")  # fmt: skip
@click.option("--endpoint", metavar="URL", help="OTLP/HTTP endpoint (default: export.otlp.endpoint).")
@click.option(
    "--content/--no-content",
    default=None,
    help="Message content on the spans (default: export.otlp.content).",
)
@click.option(
    "--profile",
    type=click.Choice(["latest", "compat"]),
    help="Attribute names (default: export.otlp.profile).",
)
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True, metavar="SECONDS",
              help="How long one request may take, retries of a refused connection included.")  # fmt: skip
def otlp(session_id: str | None, since: str | None, endpoint: str | None, content: bool | None,
         profile: str | None, timeout: float) -> None:  # fmt: skip
    """Send sessions to an OpenTelemetry backend as GenAI spans (OTLP/HTTP).

    Without SESSION_ID, every finished session (of --since on) is sent from its watermark in
    main.db: spans the endpoint already accepted, live or by an earlier run, are not sent again.
    A running session is left to its recorder's live export. Span and trace ids derive from
    capsem's ids, so the same session sent to a new endpoint is the same data.

    \b
    Examples:
        capsem export otlp --endpoint http://localhost:4318
        capsem export otlp --since 7d
        capsem export otlp 5f2c --content --profile compat
    """
    from addons.recorder.otlp.send import Target
    from addons.recorder.otlp.spans import Options
    from capsem.settings import load

    with user_errors():
        settings = load().export
        url = endpoint or settings.otlp_endpoint
        if url is None:
            raise click.UsageError(
                "no endpoint: pass --endpoint URL or set export.otlp.endpoint in config.yaml"
            )
        if not url.startswith(("http://", "https://")):
            raise click.BadParameter(f"{url!r} is not an http:// or https:// URL", param_hint="--endpoint")
        options = Options(
            settings.otlp_content if content is None else content, profile or settings.otlp_profile
        )
        target = Target(url, dict(settings.otlp_headers), options)
        outcomes = backfill(target, session_id, since, timeout)
    for o in outcomes:
        click.echo(f"{o.session_id}  {o.state}" + (f"  {counted(o.spans, 'span')}" if o.spans else ""))
    sent = sum(o.spans for o in outcomes)
    failed = [o for o in outcomes if o.state == "failed"]
    click.echo(f"{counted(sent, 'span')} sent to {url} from {counted(len(outcomes), 'session')}")
    if failed:
        raise click.ClickException(
            f"{counted(len(failed), 'session')} could not be sent: {failure_message(url, failed[0].failure)}"
        )


def backfill(target, session_id: str | None, since: str | None, timeout: float = 10.0) -> list[Outcome]:
    """Send each chosen session from its watermark; the first failure of the endpoint stops."""
    from addons.recorder.otlp.send import exporter
    from assembler.sessiondb import open_main, resolve
    from capsem.paths import main_db_path
    from capsem.store.schema import open_main_db

    with open_main() as main:
        if session_id is not None:
            session_id = resolve(session_id)
            chosen = main.execute("SELECT id, status FROM sessions WHERE id = ?", (session_id,)).fetchall()
            if not chosen:
                chosen = [(session_id, "stopped")]  # a session.db whose main.db row is gone
        else:
            chosen = main.execute(
                "SELECT id, status FROM sessions WHERE created_at >= ? ORDER BY created_at", (since or "",)
            ).fetchall()
    outcomes: list[Outcome] = []
    send = exporter(target, timeout)
    writer = open_main_db(main_db_path())
    try:
        with _stderr_progress() as progress:
            task = progress.add_task("sending spans", total=len(chosen))
            total = 0

            def spans_sent(n: int) -> None:  # a long session moves the line too, not only the bar
                nonlocal total
                total += n
                progress.update(task, description=f"sending spans ({total:,} sent)")

            for sid, status in chosen:
                outcome = _one(sid, status, target, send, writer, spans_sent)
                outcomes.append(outcome)
                progress.advance(task)
                if outcome.state == "failed":
                    break
    finally:
        send.shutdown()
        writer.close()
    return outcomes


def _one(sid: str, status: str, target, send, writer, progress) -> Outcome:
    """Send one session from its watermark (a running one is its recorder's)."""
    from addons.recorder.otlp.send import export_session
    from assembler.sessiondb import db_file, open_session

    if status == "running":
        return Outcome(sid, 0, "skipped (running: its live export sends it)")
    if db_file(sid) is None:
        return Outcome(sid, 0, "skipped (no session.db)")
    from addons.recorder.otlp.send import failure_of

    with open_session(sid) as session:
        sent = export_session(session, writer, sid, target, send, finished=True, progress=progress)
    if sent.failed:
        return Outcome(sid, sent.spans, "failed", failure_of(send))
    return Outcome(sid, sent.spans, "sent" if sent.spans else "up to date")
