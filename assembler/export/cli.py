"""`capsem export ...`: one subcommand per format, each defined in its own module."""

from __future__ import annotations

import click

from assembler.export.files_cli import har, jsonl, parquet
from assembler.export.otlp_cli import otlp
from assembler.ledger.cli import attestation


@click.group("export")
def export() -> None:
    """Export sessions: OTLP traces, HAR, JSONL, Parquet, a signed attestation."""


for _command in (otlp, har, jsonl, parquet, attestation):
    export.add_command(_command)
