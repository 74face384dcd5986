"""`capsem config check|show`: check the settings without starting anything, and show each
effective value with where it came from (thin click commands over `capsem.settings.load`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml

from capsem.settings import DEFAULT, OVERRIDE, Settings, load

F = TypeVar("F", bound=Callable[..., Any])


def _overrides(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, Any]:
    """`KEY=VALUE` pairs; each VALUE is read as YAML (`4096`, `false`, `null`, `[a, b]`)."""
    out = {}
    for item in values:
        key, eq, text = item.partition("=")
        if not eq or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE (e.g. capture.preview_bytes=4096)")
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise click.BadParameter(
                f"{item!r}: the value is not YAML ({' '.join(str(exc).split())})"
            ) from exc
    return out


def settings_options(f: F) -> F:
    """`--file` and `--set`: which settings to read."""
    f = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", callback=_overrides,
                     help="Override one setting (dotted key, YAML value), as mitmdump's --set does.")(f)  # fmt: skip
    return click.option("--file", "user_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                        help="Your settings file (default: $CAPSEM_HOME/config.yaml).")(f)  # fmt: skip


def _load(user_file: Path | None, overrides: dict[str, Any]) -> Settings:
    from assembler.cli_support import user_errors

    with user_errors():
        settings = load(user_file, overrides)
    return settings


@click.group("config")
def config() -> None:
    """Check and show capsem's settings.

    Settings come from config/default.yaml (every key, documented), overridden by
    $CAPSEM_HOME/config.yaml, then by mitmdump `--set capsem_*` options.

    \b
    Examples:
        capsem config check
        capsem config show
    """


@config.command("check")
@settings_options
def check_cmd(user_file, overrides) -> None:
    """Check the settings without starting anything.

    Prints `config OK: <files>`, or the first problem in one line (file, key, the bad value and
    what is allowed) and exits 1.

    \b
    Examples:
        capsem config check
        capsem config check --file ./team-config.yaml
        capsem config check --set capture.preview_bytes=4096
    """
    settings = _load(user_file, overrides)
    click.echo("config OK: " + ", ".join(str(path) for path in settings.files))


@config.command("show")
@settings_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def show_cmd(user_file, overrides, as_json) -> None:
    """Show the effective settings and where each came from.

    The origin of a value is `default` (config/default.yaml), your config.yaml (its path is
    on the first line; `--json` gives it for each value), or `--set`. Values are shown as
    YAML; 0 or null limits show as null (no limit).

    \b
    Examples:
        capsem config show
        capsem config show --json
        capsem config show --set retention.max_sessions=20
    """
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from assembler.cli_support import console as _console

    settings = _load(user_file, overrides)
    entries = settings.entries()
    if as_json:
        click.echo(json.dumps({"files": [str(p) for p in settings.files],
                               "settings": {e.key: {"value": _shown(e.key, e.value), "origin": e.origin}
                                            for e in entries}},
                              indent=2))  # fmt: skip
        return
    out = _console()
    out.print("from " + ", ".join(escape(str(p)) for p in settings.files), style="dim", highlight=False)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("key", no_wrap=True)
    table.add_column("value", overflow="fold", ratio=1)
    table.add_column("from", no_wrap=True)
    for entry in entries:
        table.add_row(entry.key, escape(_yaml(_shown(entry.key, entry.value))), escape(_origin(entry.origin)))
    out.print(table)


SECRET_VALUES = ("export.otlp.headers",)
"""Settings whose values are credentials (an Authorization header): shown by name only."""


def _shown(key: str, value: object) -> object:
    """`value` as `config show` prints it: the values of credential settings hidden."""
    if key in SECRET_VALUES and isinstance(value, dict):
        return {name: "(hidden)" for name in value}
    if key == "team.url" and isinstance(value, str):  # postgresql://user:PASSWORD@host/db
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        if parts.password:
            return value.replace(f":{parts.password}@", ":(hidden)@", 1)
    return value


def _origin(origin: str) -> str:
    """`default`, `--set`, or the name of the file (its path is on the line above the table)."""
    return origin if origin in (DEFAULT, OVERRIDE) else Path(origin).name


def _yaml(value: Any) -> str:
    """A value as one line of YAML (a list of rules, named budgets or credentials: one per line)."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return "\n".join("- " + _yaml(item) for item in value)
    if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
        return "\n".join(f"{name}: {_yaml(item)}" for name, item in value.items())
    return (
        yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**9)
        .removesuffix("\n...\n")
        .strip()
    )
