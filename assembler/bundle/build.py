"""Assemble a bundle: find the inputs, detect each one's kind, import, correlate, write atomically.

The bundle is written to a temporary file next to the output and renamed over it only when
complete, so a crash or a bad input never leaves a half-written bundle behind. Each input is
imported inside its own savepoint: one that fails part way is rolled back whole, recorded in
`sources` with the error, and the build goes on. Nothing in the inputs is modified.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from addons.feed import ADDRESS_FILE
from assembler.bundle.correlate import correlate
from assembler.bundle.detect import Detection, detect
from assembler.bundle.errors import BundleError
from assembler.bundle.schema import SCHEMA_VERSION, create_schema
from assembler.bundle.sources import READERS, Limits, SourceContext
from assembler.bundle.sources.base import open_binary
from assembler.bundle.views import create_views
from assembler.procdiag import scrubber_for
from capsem import __version__, health
from capsem.approval_wire import CHANNEL_FILE
from capsem.ids import utc_now
from capsem.markers import KEY_FILE
from capsem.private import private_file
from capsem.store.keys import KEY_NAME as LEDGER_KEY
from capsem.store.keys import PUB_NAME as LEDGER_PUB

VERIFIED_CACHE = "verified.json"
"""`assembler/ledger/marks.py`'s cache (a name, not an import: the bundle does not load the ledger's display)."""

logger = logging.getLogger("assembler.bundle")

# Files SQLite keeps next to a database, never inputs of their own.
_SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


@dataclass
class SourceReport:
    """What one input gave."""

    path: str
    kind: str
    records: int
    errors: int
    warnings: list[str] = field(default_factory=list)


@dataclass
class BuildReport:
    path: Path
    bundle_id: str
    sources: list[SourceReport]

    @property
    def warnings(self) -> list[str]:
        return [f"{s.path}: {w}" for s in self.sources for w in s.warnings]


_CAPSEM_HOME_FILES = {
    "retention.lock",
    "config.yaml",
    "prices.json",
    KEY_FILE,
    "search.db",
    LEDGER_KEY,
    LEDGER_PUB,
}
"""capsem's own files at the top of a $CAPSEM_HOME (beside main.db); the ledger's private key above all."""
_SESSION_FILES = {"mitmdump.log", health.FILE_NAME, CHANNEL_FILE, ADDRESS_FILE}
"""capsem's own files in a session's folder (beside session.db): mitmproxy's log, the capture counts
(read with the session, `capsem/health.py`), the approvals channel's port and token, the recorder's
socket address."""


def _capsem_own(path: Path) -> bool:
    """capsem's own files in a $CAPSEM_HOME being bundled, which are not data to import: each
    session's files beside its session.db, the retention lock, the settings, the price table, the
    hashing key and the search index, and mitmproxy's CA (whose private key, like the hashing key,
    must never travel in a bundle)."""
    parent = path.parent
    if path.name == "mitmproxy" and (path / "mitmproxy-ca.pem").exists():
        return True
    if path.name in _SESSION_FILES:
        return (
            (parent / "session.db").exists()
            or (parent / "session.db.gz").exists()
            or parent.parent.name == "sessions"
        )
    return path.name in _CAPSEM_HOME_FILES and (parent / "main.db").exists()


def collect_inputs(paths: Iterable[Path], exclude: Iterable[Path] = ()) -> list[Path]:
    """Files named, and every file under the directories named (sorted; hidden directories, symbolic
    links, SQLite side files and capsem's own files of a $CAPSEM_HOME skipped).

    Raises:
        BundleError: a named path does not exist.
    """
    skip = {p.resolve() for p in exclude}
    found: list[Path] = []
    for path in paths:
        if not path.exists():
            raise BundleError(f"input {path} does not exist")
        if path.is_dir():
            for root, dirs, files in os.walk(path, followlinks=False):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not _capsem_own(Path(root) / d))
                for name in sorted(files):
                    if not _capsem_own(Path(root) / name):
                        found.append(Path(root) / name)
        else:
            found.append(path)
    out: list[Path] = []
    for path in found:
        real = path.resolve()
        if path.is_symlink() or not path.is_file() or real in skip or path.name.startswith("."):
            continue
        if path.name.endswith(_SQLITE_SIDE_FILES):
            continue
        skip.add(real)  # each file once, however it was named
        out.append(path)
    return out


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _display(path: Path, base: Path | None) -> str:
    """The path as stored in `sources`: relative to the source directory when under it."""
    if base is not None:
        try:
            return str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            pass
    return str(path)


def _check_output(output: Path) -> None:
    if output.is_dir():
        raise BundleError(f"output {output} is a directory; give a file name such as {output / 'bundle.db'}")
    if output.exists() and detect(output).kind != "bundle":
        raise BundleError(f"output {output} exists and is not a bundle; refusing to overwrite it")


def build_bundle(
    output: Path,
    inputs: Iterable[Path],
    *,
    description: str | None = None,
    tags: Mapping[str, str] | None = None,
    source_directory: Path | None = None,
    limits: Limits | None = None,
) -> BuildReport:
    """Build a bundle at `output` from `inputs` (files or directories).

    Args:
        output: the bundle file to write (replaced atomically if it is an older bundle).
        inputs: artifact files and directories; kinds are detected from content.
        description: free text stored in bundle_meta.
        tags: key/value labels stored in bundle_meta.tags.
        source_directory: the directory the inputs came from (stored; source paths are relative to it).
        limits: size caps (defaults: `Limits()`).
    Returns:
        What each input gave, with its warnings.
    Raises:
        BundleError: no usable input, a missing input, or an output that is not a bundle.
    """
    output = Path(output)
    _check_output(output)
    tmp = output.parent / f".{output.name}.{os.getpid()}.tmp"
    files = collect_inputs([Path(p) for p in inputs], exclude=[output, tmp])
    if not files:
        raise BundleError(
            "no input files found (give session databases, logs, snapshots, diagnostics or zips)"
        )
    detected = [(path, detect(path)) for path in files]
    by_kind: dict[str, list[Path]] = {}
    for path, found in detected:
        by_kind.setdefault(found.kind, []).append(path)
    order = list(READERS)
    detected.sort(key=lambda pd: order.index(pd[1].kind) if pd[1].kind in order else len(order))
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(private_file(tmp), isolation_level=None)  # a bundle holds the session: 0600
    try:
        conn.execute("PRAGMA synchronous = OFF")  # a temporary file: a crash discards it anyway
        conn.execute("BEGIN")
        create_schema(conn)
        bundle_id = str(uuid.uuid4())
        reports, source_dirs = _import_all(conn, detected, by_kind, source_directory, limits or Limits())
        correlate(conn, source_dirs)
        create_views(conn)
        _write_meta(conn, bundle_id, description, tags, source_directory)
        conn.execute("COMMIT")
        conn.execute("PRAGMA optimize")
    except BaseException:
        conn.close()
        tmp.unlink(missing_ok=True)
        raise
    conn.close()
    os.replace(tmp, output)
    logger.info("debug_bundle.create path=%s bundle_id=%s sources=%d", output, bundle_id, len(reports))
    return BuildReport(output, bundle_id, reports)


def _import_all(
    conn: sqlite3.Connection, detected: list[tuple[Path, Detection]], by_kind: Mapping[str, list[Path]],
    base: Path | None, limits: Limits,
) -> tuple[list[SourceReport], dict[int, Path]]:  # fmt: skip
    scrubber = scrubber_for(os.environ)
    reports: list[SourceReport] = []
    source_dirs: dict[int, Path] = {}
    for path, found in detected:
        try:
            digest, size = _sha256(path), path.stat().st_size
        except OSError as exc:
            digest, size, found = None, None, Detection("unknown", f"cannot read: {exc}")
        cur = conn.execute(
            "INSERT INTO sources (path, kind, sha256, size, detail, imported_at) VALUES (?, ?, ?, ?, ?, ?)",
            (_display(path, base), found.kind, digest, size, found.detail, utc_now()),
        )
        source_id = int(cur.lastrowid or 0)
        source_dirs[source_id] = path.resolve().parent
        ctx = SourceContext(conn, scrubber, source_id, path, limits, siblings=by_kind)
        reader = READERS.get(found.kind)
        if reader is None:
            why = "a bundle is never imported into another" if found.kind == "bundle" else "not recognised"
            ctx.warn(f"{why} ({found.detail}); not imported")
        else:
            conn.execute("SAVEPOINT source")
            try:
                with open_binary(path) as stream:
                    reader(ctx, stream)
            except Exception as exc:  # one broken input must not lose the others: record it, go on
                conn.execute("ROLLBACK TO source")
                ctx.records, ctx.errors = 0, ctx.errors + 1
                ctx.warn(f"import failed and was rolled back: {exc!r}")
            conn.execute("RELEASE source")
            logger.debug("debug_bundle.import_%s path=%s records=%d errors=%d", found.kind, path, ctx.records,
                         ctx.errors)  # fmt: skip
        warnings = ctx.warnings + (
            [f"... and {ctx.warning_count - len(ctx.warnings)} more warnings"]
            if ctx.warning_count > len(ctx.warnings) else []
        )  # fmt: skip
        conn.execute(
            "UPDATE sources SET records = ?, errors = ?, warnings = ? WHERE id = ?",
            (
                ctx.records,
                ctx.errors,
                json.dumps(warnings, ensure_ascii=False) if warnings else None,
                source_id,
            ),
        )
        reports.append(SourceReport(_display(path, base), found.kind, ctx.records, ctx.errors, warnings))
    return reports, source_dirs


def root_session(conn: sqlite3.Connection) -> str | None:
    """The bundle's root session: the capsem session if there is one, else the earliest root session."""
    capsem = [
        r[0]
        for r in conn.execute("SELECT session_id FROM sessions WHERE kind = 'capsem' ORDER BY created_at")
    ]
    if len(capsem) == 1:
        return capsem[0]
    row = conn.execute(
        "SELECT session_id FROM sessions WHERE parent_session_id IS NULL ORDER BY kind != 'capsem', "
        "kind != 'snapshot', created_at = '', created_at LIMIT 1"
    ).fetchone()
    return row[0] if row else None


def _write_meta(
    conn: sqlite3.Connection, bundle_id: str, description: str | None, tags: Mapping[str, str] | None,
    source_directory: Path | None,
) -> None:  # fmt: skip
    conn.execute(
        "INSERT INTO bundle_meta (id, bundle_id, created_at, capsem_version, schema_version, root_session_id, "
        "source_directory, description, tags) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?)",
        (bundle_id, utc_now(), __version__, SCHEMA_VERSION, root_session(conn),
         str(source_directory) if source_directory else None, description,
         json.dumps(dict(tags), ensure_ascii=False) if tags else None),
    )  # fmt: skip
