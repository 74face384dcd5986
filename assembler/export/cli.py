"""`capsem export ...`: one subcommand per format, each defined in its own module."""

from __future__ import annotations

import click

from assembler.export.files_cli import har, jsonl, parquet
from assembler.export.otlp_cli import otlp


@click.group("export")
def export() -> None:
    """Export sessions: OTLP traces, HAR, JSONL, Parquet."""


for _command in (otlp, har, jsonl, parquet):
    export.add_command(_command)
