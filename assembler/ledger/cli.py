"""`capsem verify` and `capsem export attestation`.

Exit codes of `capsem verify`: 0 every session named (or all) verifies; 1 a row changed, removed
or added, a cut end, a session missing, a signature that does not hold, or an attestation that
does not verify; 3 nothing could be checked (no `ledger.pub`, or sessions recorded before
capsem kept a ledger) and nothing failed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from assembler.cli_support import counted, user_errors
from assembler.ledger.attestation import (
    HEAD_SUBJECT,
    envelope,
    file_sha256,
    open_envelope,
    predicate,
    statement,
)
from assembler.ledger.check import HomeReport, public_key, verify_home, verify_one
from assembler.sessiondb import db_file, main_row, open_path, resolve
from capsem.paths import capsem_home
from capsem.private import write_private
from capsem.store.keys import KEY_NAME, PUB_NAME, signing_key
from capsem.store.verify import Problem, Verdict

UNCHECKED = 3


def _state(v: Verdict) -> str:
    """verified, failed, or unchecked (only sessions recorded before the ledger, or no key)."""
    if v.ok:
        return "verified"
    return "unchecked" if {p.what for p in v.problems} == {"uncovered"} else "failed"


def verdict_line(v: Verdict) -> str:
    """One session's verdict in words."""
    if v.ok:
        if v.rows == 0 and v.note:
            return f"{v.session_id}  ok        {v.note}"
        end = "signed end" if v.last and v.last.final else (v.note or "no signed end")
        return (f"{v.session_id}  verified  {counted(v.rows, 'row')} in "
                f"{counted(v.batches, 'signed batch', 'signed batches')}, {end}")  # fmt: skip
    more = f" (+{len(v.problems) - 1} more)" if len(v.problems) > 1 else ""
    label = "UNCHECKED" if _state(v) == "unchecked" else "FAILED   "
    return f"{v.session_id}  {label} {v.first}{more}"


def _print(report: HomeReport) -> None:
    for v in report.sessions:
        click.echo(verdict_line(v))
    if report.no_key:
        click.echo(report.no_key)
    elif report.chain:
        click.echo(f"main.db chain          FAILED    {report.chain[0]}")
    else:
        click.echo(f"main.db chain          verified  {counted(report.chain_entries, 'entry', 'entries')}")


def _problem_json(p: Problem) -> dict:
    return {"what": p.what, "table": p.table, "key_name": p.key_name if p.table else None,
            "key": p.key, "detail": p.detail or None, "text": str(p)}  # fmt: skip


def _verdict_json(v: Verdict) -> dict:
    return {
        "session_id": v.session_id,
        "state": _state(v),
        "rows": v.rows,
        "signed_batches": v.batches,
        "signed_end": bool(v.last and v.last.final),
        "head_sha256": v.last.head.hex() if v.last else None,
        "note": v.note or None,
        "problems": [_problem_json(p) for p in sorted(v.problems, key=lambda p: p.order)],
    }


def _report_json(report: HomeReport | None, attestations: list[AttestationCheck]) -> dict:
    out: dict = {"ok": all(a.ok for a in attestations) and (report is None or report.ok)}
    if report is not None:
        out["sessions"] = [_verdict_json(v) for v in report.sessions]
        out["main_chain"] = {
            "state": "unchecked" if report.no_key else "failed" if report.chain else "verified",
            "entries": report.chain_entries,
            "problems": [_problem_json(p) for p in report.chain],
        }
        out["no_key"] = report.no_key
    if attestations:
        out["attestations"] = [
            {
                "path": str(a.path),
                "state": "verified" if a.ok else "failed",
                "session_id": a.session_id,
                "detail": a.detail,
            }
            for a in attestations
        ]
    return out


@click.command("verify")
@click.argument("targets", nargs=-1, metavar="[SESSION_ID|ATTESTATION]...")
@click.option(
    "--all", "all_", is_flag=True, help="Every session under $CAPSEM_HOME, and the ones that are gone."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of lines.")
def verify(targets: tuple[str, ...], all_: bool, as_json: bool) -> None:
    """Check that sessions are as recorded: every row against its signed hash chain.

    Exits 0 when every row matches its ledger entry, nothing is missing or added, every head's
    signature holds under $CAPSEM_HOME/ledger.pub and a session that says it stopped has its
    signed end; 1 naming the first row changed, removed or added (table and id), a cut end, a
    session gone from main.db's chain or a bad signature; 3 when nothing could be checked. A
    crashed session verifies up to its last signed batch. An ATTESTATION file (from `capsem
    export attestation`) is checked too: its DSSE signature, and its head against the session.
    With neither, the newest session. `--json` prints every session's state (verified, failed,
    unchecked), its rows, signed batches and head, and every problem found; the exit code is the same.

    \b
    Examples:
        capsem verify --all
        capsem verify 20260327-154418-f907
        capsem verify run.intoto.json
        capsem verify --all --json | jq '.sessions[] | select(.state != "verified")'
    """
    files = [Path(t) for t in targets if Path(t).is_file()]
    sessions = [t for t in targets if not Path(t).is_file()]
    checks = [_check_attestation(path) for path in files]
    failed = not all(c.ok for c in checks)
    report = None
    if sessions or all_ or not files:
        with user_errors():
            ids = None if all_ else [_resolve(s) for s in sessions] if sessions else [resolve(None)]
        report = verify_home(ids)
    if as_json:
        click.echo(json.dumps(_report_json(report, checks), indent=2, default=str))
    else:
        for c in checks:
            click.echo(f"{c.path}  {'verified ' if c.ok else 'FAILED   '} {c.detail}")
        if report is not None:
            _print(report)
    if report is not None and not report.ok:
        sys.exit(UNCHECKED if report.uncovered and not failed else 1)
    if failed:
        sys.exit(1)


def _resolve(session_id: str) -> str:
    """A named session, kept as given when its folder is gone (verify then says it is missing)."""
    from assembler.sessiondb import SessionNotFound

    try:
        return resolve(session_id)
    except SessionNotFound:
        if main_row(session_id) is None and not (capsem_home() / "sessions" / session_id).exists():
            raise
        return session_id


@dataclass(frozen=True)
class AttestationCheck:
    """One attestation file's verdict."""

    path: Path
    ok: bool
    detail: str
    session_id: str | None = None


def _check_attestation(path: Path) -> AttestationCheck:
    public = public_key()
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        return AttestationCheck(path, False, f"not an attestation: {exc}")
    found = open_envelope(data, public) if public else None
    if found is None:
        return AttestationCheck(path, False, f"its signature does not hold under {capsem_home() / PUB_NAME}")
    heads = [s for s in found.get("subject", []) if str(s.get("name", "")).startswith(HEAD_SUBJECT)]
    if not heads:
        return AttestationCheck(path, False, "no ledger head among its subjects")
    session_id = heads[0]["name"].removeprefix(HEAD_SUBJECT)
    if db_file(session_id) is None:
        return AttestationCheck(
            path, True, f"signature holds (session {session_id} is not on this machine)", session_id
        )
    verdict = verify_one(session_id, public, main_row(session_id), [])
    chained = verdict.last and verdict.last.head.hex() == heads[0]["digest"]["sha256"]
    if not verdict.ok or not chained:
        why = verdict.first if not verdict.ok else "its head is not the session's"
        return AttestationCheck(path, False, f"session {session_id}: {why}", session_id)
    return AttestationCheck(path, True, f"signature holds; session {session_id} ends at its head", session_id)


@click.command("attestation")
@click.argument("session_id", required=False, metavar="[SESSION_ID]")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write it here (default: stdout)."
)
def attestation(session_id: str | None, output: Path | None) -> None:
    """A session as an in-toto Statement v1 in a DSSE envelope signed with the ledger key.

    Subjects: the session's last signed chain head and session.db's SHA-256. Predicate: the agent's
    command, workspace and git commit, models, calls, tokens, cost, every decision that was not a
    plain allow, and the capture status. Any DSSE verifier checks it with $CAPSEM_HOME/ledger.pub;
    so does `capsem verify FILE`. A session that does not verify is refused.
    """
    with user_errors():
        session_id = resolve(session_id)
    if not (capsem_home() / KEY_NAME).is_file():
        raise click.ClickException(f"no ledger key at {capsem_home() / KEY_NAME}: nothing was signed here")
    row = main_row(session_id)
    report = verify_home([session_id])
    verdict = report.sessions[0]
    if not verdict.ok or verdict.last is None:
        raise click.ClickException(
            f"session {session_id} does not verify: {verdict.first or 'nothing signed'}"
        )
    path = db_file(session_id)
    assert path is not None
    with open_path(path) as conn:
        facts = predicate(conn, row)
    doc = envelope(statement(session_id, verdict.last, file_sha256(path), facts), signing_key())
    text = json.dumps(doc, indent=2) + "\n"
    if output:
        write_private(output, text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)
