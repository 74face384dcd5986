"""`capsem export ...`: one subcommand per format, each defined in its own module."""

from __future__ import annotations

import click


@click.group("export")
def export() -> None:
    """Export sessions: OTLP traces, HAR, JSONL, Parquet."""
