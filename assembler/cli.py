"""The `capsem` command line: one click group whose commands live in modules of their own, each
imported only when it is run or listed (`capsem run` does not pay for the others before it starts
mitmdump)."""

from __future__ import annotations

import click

from capsem import __version__

_LAZY = {
    "approvals": "assembler.approvals_cli:approvals_cmd",
    "approve": "assembler.approvals_cli:approve_cmd",
    "budget": "assembler.budget:budget",
    "bundle": "assembler.bundle.cli:bundle",
    "config": "assembler.config_cli:config",
    "cost-report": "assembler.costs_cli:cost_report_cmd",
    "demo": "assembler.run_cli:demo",
    "deny": "assembler.approvals_cli:deny_cmd",
    "diff": "assembler.diff.cli:diff",
    "doctor": "assembler.doctor_cli:doctor",
    "export": "assembler.export.cli:export",
    "inspect-session": "assembler.sessions_cli:inspect_session_cmd",
    "keep": "assembler.retention_cli:keep_cmd",
    "list-sessions": "assembler.sessions_cli:list_sessions_cmd",
    "policy": "assembler.backtest_cli:policy",
    "query-session": "assembler.sessions_cli:query_session_cmd",
    "replay": "assembler.replay.cli:replay",
    "run": "assembler.run_cli:run",
    "schema": "assembler.sessions_cli:schema_cmd",
    "search": "assembler.view.cli:search",
    "show-call": "assembler.show_call_cli:show_call",
    "tail": "assembler.sessions_cli:tail_cmd",
    "team": "assembler.team.cli:team",
    "update-prices": "assembler.costs_cli:update_prices_cmd",
    "vacuum": "assembler.retention_cli:vacuum_cmd",
    "verify": "assembler.ledger.cli:verify",
    "view": "assembler.view.cli:view",
}
"""Command name -> `module:function`, imported when the command is run or listed."""


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        for name in _LAZY:
            self.get_command(ctx, name)
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in _LAZY and name not in self.commands:
            import importlib

            module, attr = _LAZY[name].split(":")
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="capsem")
def cli() -> None:
    """capsem: a flight recorder for AI agents.

    Capture runs inside mitmdump (`mitmdump -s addons/capsem_addon.py`); these commands work on
    what it recorded under $CAPSEM_HOME (default ~/.capsem).
    """
    from capsem.log_scrub import scrub_logs

    scrub_logs()  # every line a command logs goes through the scrubber (its rules loaded at the first)


def main() -> None:
    cli()
