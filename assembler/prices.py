"""`capsem update-prices`: replace the price table, validated first, swapped atomically.

The new file (genai-prices' `data.json` schema) is loaded through `pricing.load_table` before
anything changes; only then is it written to `$CAPSEM_HOME/prices.json` through a temporary
file in the same directory and `os.replace`, so a reader sees the old table or the new one,
never half a file. Offline by default: without `--from`, the default table
`config/genai-prices.json` is restored (the saved override is removed). The network is used
only for an explicit http(s) URL.
"""

from __future__ import annotations

import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from capsem.private import FILE_MODE, private_dir
from pricing import PriceTable, default_table, load_table, reset_table, user_prices_path

MAX_DOWNLOAD_BYTES = 64 * 1024 * 1024
UPSTREAM_URL = "https://raw.githubusercontent.com/pydantic/genai-prices/main/prices/data.json"


@dataclass
class ProviderChanges:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[tuple[str, str]] = field(default_factory=list)
    """(model id, what changed)"""

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


@dataclass
class PriceUpdate:
    source: str
    """Where the new table came from (path, URL, or the default table)."""
    old_source: str
    providers: dict[str, ProviderChanges] = field(default_factory=dict)
    installed: bool = False
    target: str = ""
    notes: list[str] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(len(getattr(p, kind)) for p in self.providers.values())

    def to_json(self) -> dict:
        return {
            "source": self.source, "previous": self.old_source, "installed": self.installed, "target": self.target,
            "notes": self.notes,
            "providers": {k: {"added": v.added, "removed": v.removed,
                              "changed": [{"model": m, "change": c} for m, c in v.changed]}
                          for k, v in self.providers.items()},
        }  # fmt: skip


def _models(table: PriceTable) -> dict[str, dict[str, object]]:
    return {p.id: {m.id: m.prices for m in p.models} for p in table.snapshot.providers}


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, Decimal):
        return f"${value.normalize():f}"
    base, tiers = getattr(value, "base", None), getattr(value, "tiers", None) or []
    if isinstance(base, Decimal):
        return _fmt(base) + "".join(f" (${t.price.normalize():f} from {t.start:,} tokens)" for t in tiers)
    return str(value)


_FIELDS = {"input_mtok": "input", "output_mtok": "output", "cache_read_mtok": "cache read",
           "cache_write_mtok": "cache write", "input_audio_mtok": "audio input", "output_audio_mtok": "audio output",
           "requests_kcount": "per 1k requests"}  # fmt: skip


def describe_change(old: object, new: object) -> str:
    """`input $3 -> $4, output $15 -> $20 (per Mtok)`, or a coarser description."""
    if isinstance(old, list) or isinstance(new, list):
        return "conditional (dated) prices changed"
    parts = [f"{label} {_fmt(getattr(old, name, None))} -> {_fmt(getattr(new, name, None))}"
             for name, label in _FIELDS.items() if getattr(old, name, None) != getattr(new, name, None)]  # fmt: skip
    return ", ".join(parts) + " (per Mtok)" if parts else "other price fields changed"


def diff_tables(old: PriceTable, new: PriceTable) -> dict[str, ProviderChanges]:
    """Per provider: models added, removed, and whose prices changed."""
    a, b = _models(old), _models(new)
    out: dict[str, ProviderChanges] = {}
    for provider in sorted(a.keys() | b.keys()):
        pa, pb = a.get(provider, {}), b.get(provider, {})
        changes = ProviderChanges(
            added=sorted(pb.keys() - pa.keys()),
            removed=sorted(pa.keys() - pb.keys()),
            changed=[
                (m, describe_change(pa[m], pb[m])) for m in sorted(pa.keys() & pb.keys()) if pa[m] != pb[m]
            ],
        )
        if changes:
            out[provider] = changes
    return out


def fetch(source: str, *, timeout: float = 30.0) -> tuple[Path, bool]:
    """A local path for `source` and whether it is a temporary download (http(s) URLs only).

    Raises:
        FileNotFoundError: no such file.
        OSError: the download failed.
    """
    if source.startswith(("http://", "https://")):
        handle, name = tempfile.mkstemp(prefix="capsem-prices-", suffix=".json")
        try:
            with urllib.request.urlopen(source, timeout=timeout) as resp, os.fdopen(handle, "wb") as out:
                data = resp.read(MAX_DOWNLOAD_BYTES + 1)
                if len(data) > MAX_DOWNLOAD_BYTES:
                    raise OSError(f"{source} is larger than {MAX_DOWNLOAD_BYTES} bytes")
                out.write(data)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            Path(name).unlink(missing_ok=True)
            raise OSError(f"cannot download {source}: {exc}") from exc
        return Path(name), True
    path = Path(source).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no price file at {path}")
    return path, False


def _current() -> tuple[PriceTable | None, str]:
    try:
        table = load_table()
        return table, table.source
    except (OSError, ValueError) as exc:
        return None, f"{user_prices_path()} (unreadable: {exc})"


def _write_atomically(data: bytes, target: Path) -> None:
    private_dir(target.parent)
    handle, tmp = tempfile.mkstemp(dir=target.parent, prefix=".prices-", suffix=".json.tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def update_prices(source: str | None = None, *, dry_run: bool = False) -> PriceUpdate:
    """Validate the new table, report what changes, and (unless `dry_run`) install it atomically.

    `source` is a genai-prices `data.json` file or http(s) URL; None restores the default table
    `config/genai-prices.json` (removing `$CAPSEM_HOME/prices.json`).

    Raises:
        ValueError: the file is not a valid genai-prices data file (nothing is changed).
        FileNotFoundError: the file does not exist.
        OSError: the download or the write failed (nothing is changed).
    """
    old, old_source = _current()
    target = user_prices_path()
    if source is None:
        new = default_table()
        update = PriceUpdate(new.source, old_source, target=str(target))
        if old is not None:
            update.providers = diff_tables(old, new)
        if not dry_run and target.is_file():
            target.unlink()
            update.installed = True
        elif not target.is_file():
            update.notes.append("already using the default table")
        update.notes.append(f"to fetch the newest prices: capsem update-prices --from {UPSTREAM_URL}")
        reset_table()
        return update
    path, temporary = fetch(source)
    try:
        data = path.read_bytes()
        new = _validated(path, source)  # raises ValueError before anything is touched
        if not new.snapshot.providers or not any(p.models for p in new.snapshot.providers):
            raise ValueError(
                f"{source} holds no providers or models; refusing to install an empty price table"
            )
        update = PriceUpdate(source, old_source, target=str(target))
        if old is None:
            update.notes.append("the saved table could not be read; it is replaced as a whole")
        else:
            update.providers = diff_tables(old, new)
        if not dry_run:
            _write_atomically(data, target)
            update.installed = True
            reset_table()
    finally:
        if temporary:
            path.unlink(missing_ok=True)
    return update


def _validated(path: Path, source: str) -> PriceTable:
    """`load_table(path)` with a short error: the first few validation problems, not thousands."""
    try:
        return load_table(path)
    except ValueError as exc:
        cause = exc.__cause__
        if hasattr(cause, "errors") and hasattr(cause, "error_count"):
            first = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in cause.errors()[:3]]
            more = cause.error_count() - len(first)
            detail = "; ".join(first) + (f" (and {more} more problems)" if more > 0 else "")
        else:
            detail = str(cause or exc).splitlines()[0][:300]
        raise ValueError(f"{source} is not a genai-prices data file: {detail}") from exc
