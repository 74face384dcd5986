"""The `capsem` command line: thin click commands over the library functions."""

from __future__ import annotations

import click

from capsem import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="capsem")
def cli() -> None:
    """capsem: a flight recorder for AI agents.

    Capture runs inside mitmdump (`mitmdump -s addons/capsem_addon.py`); these commands work on
    what it recorded under $CAPSEM_HOME (default ~/.capsem).
    """


@cli.command()
def demo() -> None:
    """Run a scripted agent through mitmdump + capsem against the local provider emulator.

    \b
    Example:
        capsem demo
        CAPSEM_HOME=/tmp/capsem-demo capsem demo
    """
    from assembler.demo import run_demo

    try:
        run_demo()
    except ImportError as exc:
        raise click.ClickException(
            f"the demo needs the provider SDKs: pip install 'capsem[demo]' ({exc})"
        ) from exc


def main() -> None:
    cli()
