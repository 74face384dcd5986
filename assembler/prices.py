"""`capsem update-prices`: replace the price table, validated first, swapped atomically.

The new file (genai-prices' `data.json` schema) is loaded through `pricing.load_table`
before anything changes; only then is it written to `$CAPSEM_HOME/prices.json` through a
temporary file and `os.replace`. Works offline from a file; fetches only an explicit URL.
"""

from __future__ import annotations

import os
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from pricing import PriceTable, load_table, reset_table, user_prices_path


@dataclass
class PriceChanges:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)


def _prices(table: PriceTable) -> dict[str, str]:
    out = {}
    for provider in table.snapshot.providers:
        for model in provider.models:
            out[f"{provider.id}/{model.id}"] = repr(model.prices)
    return out


def diff_tables(old: PriceTable, new: PriceTable) -> PriceChanges:
    a, b = _prices(old), _prices(new)
    return PriceChanges(
        added=sorted(b.keys() - a.keys()),
        removed=sorted(a.keys() - b.keys()),
        changed=sorted(k for k in a.keys() & b.keys() if a[k] != b[k]),
    )


def fetch(source: str, *, timeout: float = 30.0) -> Path:
    """A local path for `source`: the file itself, or a temporary download of an http(s) URL."""
    if source.startswith(("http://", "https://")):
        handle, name = tempfile.mkstemp(prefix="capsem-prices-", suffix=".json")
        with urllib.request.urlopen(source, timeout=timeout) as resp, os.fdopen(handle, "wb") as out:
            out.write(resp.read())
        return Path(name)
    path = Path(source).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no price file at {path}")
    return path


def update_prices(source: str, *, dry_run: bool = False) -> PriceChanges:
    """Validate `source`, report what changes, and (unless `dry_run`) install it atomically.

    Raises:
        ValueError: the file is not a valid genai-prices data file (nothing is changed).
        FileNotFoundError: the file does not exist.
    """
    path = fetch(source)
    new = load_table(path)  # raises ValueError before anything is touched
    changes = diff_tables(load_table(), new)
    if not dry_run:
        target = user_prices_path()
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=target.parent, prefix=".prices-", suffix=".json")
        with os.fdopen(handle, "wb") as out:
            out.write(path.read_bytes())
        os.replace(tmp, target)
        reset_table()
    return changes
