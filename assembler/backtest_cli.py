"""`capsem policy test`: a policy's rules and budgets tried on recorded sessions, printed for a
person (rich, readable at 80 columns) or as JSON (the evaluation: `assembler/backtest.py`)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from addons.budgets import usd
from assembler.backtest import Finding, Pricer, Refusal, Report, ToolFinding
from assembler.cli_support import counted, json_option, user_errors

FAIL_ON = {"deny": "denied", "warn": "warned", "ask": "asked"}
FINDINGS_EXIT = 3
"""Exit status when `--fail-on` names a decision that was found (1 is an error, 2 a usage error)."""
EXAMPLES = 3
PHRASES = {"warned": "warned about", "asked": "asked for"}
"""How a decision reads after "would have" (any other decision reads as itself: `denied`)."""
SESSION_ROWS = 20


@dataclass(frozen=True)
class Tried:
    source: str
    """The settings file (or `current config`)."""
    rules: int
    budgets: int
    skipped: int
    missing: int
    mcp_only: bool = False
    """Every request rule is an MCP rule: only requests that carried a tools/call were read."""
    tool_rules: bool = False
    """A tool rule exists: the tool calls of the models' answers were decided."""
    request_rules: bool = True
    """A request (or MCP) rule exists: the requests were decided."""


@click.group("policy")
def policy() -> None:
    """Network policy and budgets: try them on recorded sessions."""


@policy.command("test")
@click.argument("args", nargs=-1, metavar="[FILE] [SESSION]...")
@click.option("--since", type=str, metavar="DAY",
              help="Only sessions created since: YYYY-MM-DD, 7d, 2w or today (UTC).")  # fmt: skip
@click.option("--fail-on", "fail_on", type=click.Choice(list(FAIL_ON)), multiple=True,
              help=f"Exit {FINDINGS_EXIT} if anything would have been denied, warned about or asked for "
                   "(repeatable; for CI).")  # fmt: skip
@json_option
def test_cmd(args: tuple[str, ...], since: str | None, fail_on: tuple[str, ...], as_json: bool) -> None:
    """What a policy would have done to recorded sessions, as if it had been in force.

    FILE is a YAML file shaped like config.yaml (its `policy:` and `budgets:` are tried, laid over
    the defaults and checked like config.yaml); without it, your current config. SESSIONs are
    session ids (or the start of one); without them, every session in main.db (--since: those
    created since that day). Requests, MCP tool calls and the tool calls of the models' answers
    (tool rules) are decided by the proxy's own rule matching; model calls by the budgets, over
    the spend of the calls before them that would still have been made. Every rule that matched
    nothing is named.

    \b
    Examples:
        capsem policy test
        capsem policy test strict.yaml --since 7d
        capsem policy test strict.yaml 20261125-101010-ab12 --json
        capsem policy test strict.yaml --fail-on deny
    """
    from addons.proxy.policy import Policy
    from assembler.backtest import Backtest
    from assembler.backtest_source import Needs, NothingToTest, pick, run
    from assembler.cli_support import stderr_progress
    from assembler.reports import parse_day
    from capsem.settings import SettingsError, load

    file, sessions = _split(args)
    with user_errors(SettingsError, NothingToTest):
        if since is not None:
            try:
                since = parse_day(since)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--since") from None
        settings = load(file)
        rules, budgets = Policy.from_settings(settings), settings.budgets.entries
        source = str(file) if file else "current config"
        if not rules.rules and not budgets:
            raise click.ClickException(f"{source} has no policy rules and no budgets: nothing to test")
        needs = Needs.of(rules, budgets)
        picked = pick(sessions, since, needs)
        with stderr_progress() as progress:
            task = progress.add_task("testing sessions", total=len(picked.sessions))
            report = run(Backtest(rules, budgets, _pricer() if budgets else None), picked.sessions, needs,
                         lambda done, total: progress.update(task, completed=done, total=total))  # fmt: skip
    tried = Tried(source, len(rules.rules), len(budgets), picked.skipped, picked.missing, needs.mcp_only,
                  needs.tools, needs.requests)  # fmt: skip
    if as_json:
        click.echo(json.dumps(as_data(tried, report), indent=2))
    else:
        show(tried, report)
    found = report.decisions() & {FAIL_ON[f] for f in fail_on}
    if found:
        what = "requests or tool calls" if tried.tool_rules else "requests"
        click.echo(f"--fail-on: {what} would have been {', '.join(sorted(found))}", err=True)
        raise SystemExit(FINDINGS_EXIT)


def _split(args: tuple[str, ...]) -> tuple[Path | None, tuple[str, ...]]:
    """FILE (a first argument that is a file, or is named *.yaml / *.yml) and the SESSIONs."""
    if args and (Path(args[0]).is_file() or args[0].endswith((".yaml", ".yml"))):
        file = Path(args[0])
        if not file.is_file():
            raise click.ClickException(f"{file}: no such file")
        return file, args[1:]
    return None, args


# --- JSON ----------------------------------------------------------------------------------------


def _finding(f: Finding, report: Report) -> dict[str, Any]:
    r = f.request
    mcp = None
    if f.call is not None:
        mcp = {"call_id": f.call.id, "server": f.call.servers[-1], "servers": list(f.call.servers),
               "tool": f.call.tool, "arguments": report.arguments.get((f.session, f.call.id))}  # fmt: skip
    return {"session": f.session, "rule": f.rule, "decision": f.decision, "net_event_id": r.id,
            "timestamp": r.timestamp, "method": r.method, "host": r.host, "port": r.port, "path": r.path,
            "process": r.process, "pid": r.pid, "live_decision": r.live, "mcp": mcp}  # fmt: skip


def _tool_finding(f: ToolFinding) -> dict[str, Any]:
    c = f.call
    return {"session": f.session, "rule": f.rule, "decision": f.decision, "tool_call_id": c.id,
            "model_call_id": c.model_call_id, "call_id": c.call_id, "timestamp": c.timestamp, "tool": c.name,
            "arguments": dict(c.arguments) if c.arguments is not None else None, "agent": c.agent,
            "process": c.process, "live_decision": c.live, "live_rule": c.live_rule}  # fmt: skip


def _refusal(r: Refusal | None) -> dict[str, Any] | None:
    if r is None:
        return None
    c = r.call
    return {"session": r.session, "model_call_id": c.id, "timestamp": c.timestamp, "provider": c.provider,
            "model": c.model, "host": c.host, "cost_usd": c.cost, "spent_usd": r.spent}  # fmt: skip


def as_data(tried: Tried, report: Report) -> dict[str, Any]:
    """The report as JSON-ready data: every finding, per rule and per session counts, each budget."""
    rules = []
    for (rule, decision), found in _by_rule(report).items():
        rules.append({"rule": rule, "decision": decision, "requests": len(found),
                      "sessions": dict(Counter(f.session for f in found))})  # fmt: skip
    for (rule, decision), tools in _tools_by_rule(report).items():
        rules.append({"rule": rule, "decision": decision, "tool_calls": len(tools),
                      "sessions": dict(Counter(f.session for f in tools))})  # fmt: skip
    budgets = [
        {"name": o.budget.name, "scope": o.budget.scope, "limit_usd": o.budget.limit_usd,
         "refused_calls": len(o.refused), "saved_usd": o.saved, "first_refused": _refusal(o.refused[0] if o.refused
         else None), "sessions": dict(Counter(r.session for r in o.refused)), "warned_calls": o.warned,
         "first_warned": _refusal(o.first_warned)}
        for o in report.budgets
    ]  # fmt: skip
    totals = {"requests": report.requests, "mcp_calls": report.mcp_calls, "model_calls": report.model_calls}
    if tried.tool_rules:
        totals["tool_calls"] = report.tool_calls
    return {
        "file": tried.source,
        "sessions": {
            "tested": report.sessions,
            "skipped": tried.skipped,
            "missing": tried.missing,
            "unreadable": report.unreadable,
        },
        "totals": totals,
        "rules": rules,
        "findings": [_finding(f, report) for f in report.findings],
        "tool_findings": [_tool_finding(f) for f in report.tool_findings],
        "unmatched_rules": [
            {"rule": u.rule, "action": u.action, "kind": u.kind, "hint": u.hint} for u in report.unmatched
        ],
        "budgets": budgets,
    }


def _by_rule(report: Report) -> dict[tuple[str, str], list[Finding]]:
    out: dict[tuple[str, str], list[Finding]] = {}
    for f in report.findings:
        out.setdefault((f.rule, f.decision), []).append(f)
    return out


def _tools_by_rule(report: Report) -> dict[tuple[str, str], list[ToolFinding]]:
    out: dict[tuple[str, str], list[ToolFinding]] = {}
    for f in report.tool_findings:
        out.setdefault((f.rule, f.decision), []).append(f)
    return out


# --- text ----------------------------------------------------------------------------------------


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _example(f: Finding, report: Report, width: int) -> list[str]:
    """The request; the MCP call (server, tool, arguments); the session and the agent process."""
    r = f.request
    lines = [f"  {r.method} {r.host}:{r.port}{r.path}"]
    if f.call is not None:
        args = report.arguments.get((f.session, f.call.id), "")
        lines.append(f"    MCP {f.call.servers[-1]} > {f.call.tool} {args}")
    who = f"{r.process or 'unknown'}{f' (pid {r.pid})' if r.pid else ''}"
    lines.append(f"    session {f.session} #{r.id}, {r.timestamp[11:19]}, process {who}")
    return [_cut(line, width) for line in lines]


def show(tried: Tried, report: Report) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from assembler.cli_support import console

    out = console()
    width = out.width
    extra = [f"{counted(tried.skipped, 'session')} with nothing to match"] if tried.skipped else []
    extra += [f"{counted(tried.missing, 'session')} culled"] if tried.missing else []
    out.print(f"{escape(tried.source)}: {counted(tried.rules, 'rule')}, {counted(tried.budgets, 'budget')}",
              highlight=False)  # fmt: skip
    decided = []
    if tried.rules and tried.request_rules:  # with MCP rules only, only requests with a tools/call are read
        noun = "MCP request" if tried.mcp_only else "request"
        decided += [counted(report.requests, noun), counted(report.mcp_calls, "MCP tool call")]
    decided += [counted(report.tool_calls, "tool call") + " in answers"] if tried.tool_rules else []
    decided += [counted(report.model_calls, "model call")] if tried.budgets else []
    out.print(f"tried on {counted(len(report.sessions), 'session')}"
              + (f" ({', '.join(extra)} not read)" if extra else "")
              + f": {', '.join(decided)}", highlight=False)  # fmt: skip
    for session_id, reason in report.unreadable.items():
        out.print(f"[yellow]not read:[/] {escape(session_id)}: {escape(reason)}", highlight=False)
    by_rule = _by_rule(report)
    tools_by_rule = _tools_by_rule(report)
    if tried.rules:
        out.print()
        if not by_rule and not tools_by_rule:
            what = "no request or tool call" if tried.tool_rules else "no request"
            out.print(f"Rules: {what} would have been denied, warned about or asked for.", highlight=False)
        for (rule, decision), found in by_rule.items():
            sessions = Counter(f.session for f in found)
            style = {"denied": "bold red", "warned": "yellow"}.get(decision, "bold")
            already = sum(1 for f in found if f.request.live == decision)
            note = f" ({already:,} {decision} live)" if already else ""
            out.print(f"[{style}]{escape(rule)}[/] would have {PHRASES.get(decision, decision)} "
                      f"{counted(len(found), 'request')} "
                      f"in {counted(len(sessions), 'session')}{note}, e.g.:", highlight=False)  # fmt: skip
            for f in found[:EXAMPLES]:
                for line in _example(f, report, width):
                    out.print(escape(line), highlight=False, overflow="ignore", crop=True)
        _tool_findings(out, tools_by_rule, width)
        _unmatched(out, report, width)
        if by_rule or tools_by_rule:
            out.print()
            table = Table(title="Per session", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
            for name, justify in (("session", "left"), ("rule", "left"), ("would have", "left"),
                                  ("requests" if not tools_by_rule else "calls", "right")):  # fmt: skip
                table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
            per = Counter((f.session, f.rule, f.decision) for f in [*report.findings, *report.tool_findings])
            for (session, rule, decision), n in list(per.items())[:SESSION_ROWS]:
                table.add_row(session, escape(rule), decision, f"{n:,}")
            out.print(table)
            if len(per) > SESSION_ROWS:
                out.print(f"… and {len(per) - SESSION_ROWS:,} more (--json lists them all)", highlight=False)
    if report.budgets:
        if not by_rule and not tools_by_rule:  # a table ends with a blank line of its own
            out.print()
        _budgets(out, report)


def _tool_findings(out: Any, by_rule: dict[tuple[str, str], list[ToolFinding]], width: int) -> None:
    """Each tool rule's findings: how many calls in how many sessions, and a few of them."""
    from rich.markup import escape

    for (rule, decision), found in by_rule.items():
        sessions = len({f.session for f in found})
        style = {"denied": "bold red", "warned": "yellow"}.get(decision, "bold")
        already = sum(1 for f in found if f.call.live == decision)
        note = f" ({already:,} {decision} live)" if already else ""
        out.print(f"[{style}]{escape(rule)}[/] would have {PHRASES.get(decision, decision)} "
                  f"{counted(len(found), 'tool call')} in {counted(sessions, 'session')}{note}, e.g.:",
                  highlight=False)  # fmt: skip
        for f in found[:EXAMPLES]:
            c = f.call
            args = json.dumps(c.arguments, ensure_ascii=False, separators=(",", ":")) if c.arguments else ""
            who = ", ".join(x for x in (f"agent {c.agent}" if c.agent else "", f"process {c.process}"
                                        if c.process else "") if x)  # fmt: skip
            lines = [f"  {c.name} {args}", f"    session {f.session}, model call #{c.model_call_id}, "
                     f"{c.timestamp[11:19]}", *([f"    {who}"] if who else [])]  # fmt: skip
            for line in lines:
                out.print(escape(_cut(line, width)), highlight=False, overflow="ignore", crop=True)


def _unmatched(out: Any, report: Report, width: int) -> None:
    """The rules that decided nothing: a rule that can never match is a mistake to hear about."""
    from rich.markup import escape

    kinds = {"tool": "tool rule", "mcp": "MCP rule", "request": "request rule"}
    for u in report.unmatched:
        line = f"{u.rule} ({kinds[u.kind]}, {u.action}) matched nothing"
        out.print(f"[yellow]{escape(_cut(line, width))}[/]", highlight=False)
        if u.hint:
            out.print(escape(f"  {u.hint}"), highlight=False)


def _budgets(out: Any, report: Report) -> None:
    from rich.markup import escape

    for o in report.budgets:
        b = o.budget
        head = f"budget {escape(b.name)} ({b.scope}, {usd(b.limit_usd)})"
        if not o.refused:
            warned = f"; would have warned on {counted(o.warned, 'call')}" if o.warned else ""
            out.print(f"{head}: would have refused no call{warned}.", highlight=False)
            continue
        first = o.refused[0]
        c = first.call
        sessions = len({r.session for r in o.refused})
        out.print(f"[bold red]{head}[/] would have refused {counted(len(o.refused), 'model call')} in "
                  f"{counted(sessions, 'session')}, saving {usd(o.saved)}; the first:", highlight=False)  # fmt: skip
        for line in (f"  model call {c.id} ({c.model or c.provider}) with {usd(first.spent)} spent",
                     f"    session {first.session}, {c.timestamp[11:19]}"):  # fmt: skip
            out.print(escape(_cut(line, out.width)), highlight=False, crop=True)


def _pricer() -> Pricer:
    """The budgets' prices (`pricing/worst.py`), as the proxy reserves them."""
    from pricing.worst import rates, worst_cost

    return rates, worst_cost
