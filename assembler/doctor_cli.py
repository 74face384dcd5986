"""`capsem doctor [-- AGENT…]`: the checks of `assembler.doctor`, one line each as they come."""

from __future__ import annotations

import json
import sys
import textwrap

import click
from rich.console import Console
from rich.markup import escape

from assembler.cli_support import console, counted
from assembler.doctor import Finding, Report

_INDENT = 14
_MARK = {"ok": "[green]✓[/]", "warn": "[yellow]![/]", "fail": "[bold red]✗[/]", "skip": "[dim]-[/]"}


def print_finding(out: Console, finding: Finding) -> None:
    """`✓ check       detail`, wrapped under itself, then `→ what to do` for a problem."""
    width = max(out.width - _INDENT, 30)
    lines = _wrap(finding.detail, width)
    if finding.fix:
        lines += _wrap(f"→ {finding.fix}", width, hang=2)
    head = f"{_MARK[finding.status]} {escape(finding.check.ljust(_INDENT - 3))} "
    for n, line in enumerate(lines):
        out.print((head if n == 0 else " " * _INDENT) + escape(line), highlight=False, soft_wrap=True)


def _wrap(text: str, width: int, hang: int = 0) -> list[str]:
    """Each line of `text` wrapped to `width` at spaces only (a URL or path longer than the line
    stays whole, to be copied); the rest of an indented line (or of any line, by `hang`) goes two
    columns further in."""
    lines = []
    for line in text.splitlines():
        indent = " " * (len(line) - len(line.lstrip(" ")))
        more = indent + " " * (2 if indent else hang)
        lines += textwrap.wrap(line.strip(), width, initial_indent=indent, subsequent_indent=more,
                               break_on_hyphens=False, break_long_words=False) or [""]  # fmt: skip
    return lines


def summary(report: Report) -> str:
    failed, warned = report.of("fail"), report.of("warn")
    if not failed and not warned:
        return f"everything holds ({counted(len(report.of('ok')), 'check')} passed)"
    parts = [counted(len(failed), "problem")] if failed else []
    parts += [counted(len(warned), "warning")] if warned else []
    names = ", ".join(dict.fromkeys(f.check for f in failed + warned))
    return f"{' and '.join(parts)}: {names}"


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
@click.argument("agent", nargs=-1, type=click.UNPROCESSED, metavar="[-- AGENT...]")
def doctor(as_json, agent) -> None:
    """Check that recording works, and say what to do about each problem.

    Checks that mitmdump and the addon load, which reading path the recorder takes (the compiled
    fast path, or pure Python when it could not be built), the configuration is valid, $CAPSEM_HOME is
    writable with free space, mitmproxy's CA is there (made when missing), and the price table
    prices the models seen lately; then sends one request through a fresh mitmdump to the
    built-in emulator, and reads back what was recorded (in a temporary CAPSEM_HOME: your
    sessions are untouched). With an agent command (not run): its runtime, the variables
    `capsem run` gives it, and one HTTPS request through the proxy made with that runtime, to
    prove it trusts the CA. Exit 0 when everything holds (warnings allowed), else 1.

    \b
    Examples:
        capsem doctor
        capsem doctor -- claude
        capsem doctor -- codex
        capsem doctor --json -- python3
    """
    from assembler.doctor import run_doctor

    out = console()
    report = run_doctor(agent, None if as_json else lambda finding: print_finding(out, finding))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        out.print(summary(report), style="bold" if report.ok else "bold red", highlight=False)
    sys.exit(0 if report.ok else 1)
