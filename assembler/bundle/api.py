"""`DebugBundle`: build, open, query, export and serve a bundle from Python (the CLI calls this).

    bundle = DebugBundle.from_directory("./debug/abc123/")
    for row in bundle.query("SELECT tool_name, COUNT(*) FROM tool_invocations GROUP BY tool_name"):
        print(row)
    bundle.export_csv("error_log", "errors.csv")
    bundle.serve()  # Datasette on 127.0.0.1:8001

An opened bundle is read-only (`mode=ro`, `query_only`): it is a finished artifact.
"""

from __future__ import annotations

import base64
import logging
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.bundle.build import BuildReport, build_bundle
from assembler.bundle.errors import BundleError, BundleVersionError, NotABundle
from assembler.bundle.schema import SCHEMA_VERSION
from assembler.bundle.serve import (
    DatasetteServer,
    datasette_metadata,
    open_in_browser,
    start_datasette,
    stop_on_signals,
)
from assembler.bundle.sources import Limits
from assembler.query import QueryResult, query_connection, to_csv, to_json
from capsem.private import write_private

PathLike = str | Path
logger = logging.getLogger("assembler.bundle")


@dataclass(frozen=True)
class BundleStatistics:
    """Summary statistics for a bundle."""

    session_count: int
    log_count: int
    tool_invocation_count: int
    prompt_event_count: int
    file_count: int
    total_input_tokens: int
    """Over captured model calls and executed prompts (token_summary)."""
    total_output_tokens: int
    size_bytes: int
    model_call_count: int = 0
    tool_call_count: int = 0
    net_event_count: int = 0
    anomaly_count: int = 0
    source_count: int = 0
    skipped_records: int = 0
    """Records the importers could not use (sources.errors)."""
    estimated_cost_usd: float = 0.0


def _cell(value: Any) -> Any:
    """A value fit for CSV/JSON: blobs as base64 text."""
    return base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else value


@dataclass(slots=True)
class DebugBundle:
    """A bundle file and a read-only connection to it."""

    path: Path
    _conn: sqlite3.Connection
    report: BuildReport | None = field(default=None)
    """What each input gave (only for a bundle built in this process)."""

    # --- building and opening ------------------------------------------------------------------

    @classmethod
    def from_directory(
        cls, directory: PathLike, *, output: PathLike | None = None, description: str | None = None,
        tags: Mapping[str, str] | None = None, limits: Limits | None = None,
    ) -> DebugBundle:  # fmt: skip
        """Assemble a bundle from every artifact under `directory` (kinds detected by content).

        Args:
            directory: directory of artifacts (searched recursively; hidden directories skipped).
            output: bundle path; default `<directory>/bundle.db`.
            description: free text stored in bundle_meta.
            tags: labels stored in bundle_meta.tags.
            limits: size caps (default `Limits()`).
        Raises:
            BundleError: no directory, nothing to import, or an output that is not a bundle.
        """
        folder = Path(directory)
        if not folder.is_dir():
            raise BundleError(f"{folder} is not a directory")
        out = Path(output) if output else folder / "bundle.db"
        report = build_bundle(out, [folder], description=description, tags=tags, source_directory=folder,
                              limits=limits)  # fmt: skip
        bundle = cls.open(out)
        bundle.report = report
        return bundle

    @classmethod
    def from_artifacts(
        cls, output: PathLike, *, session_snapshots: Sequence[PathLike] = (), log_files: Sequence[PathLike] = (),
        filesystem_archives: Sequence[PathLike] = (), capsem_sessions: Sequence[PathLike] = (),
        diagnostics: Sequence[PathLike] = (), description: str | None = None,
        tags: Mapping[str, str] | None = None, limits: Limits | None = None,
    ) -> DebugBundle:  # fmt: skip
        """Assemble a bundle from named files (or directories).

        The lists only say what the caller expects: every file's kind is detected from its
        content, and a file that turns out to be something else is imported as what it is.
        """
        inputs: Iterable[PathLike] = [*capsem_sessions, *session_snapshots, *log_files, *diagnostics,
                                      *filesystem_archives]  # fmt: skip
        report = build_bundle(Path(output), [Path(p) for p in inputs], description=description, tags=tags,
                              limits=limits)  # fmt: skip
        bundle = cls.open(output)
        bundle.report = report
        return bundle

    @classmethod
    def open(cls, path: PathLike) -> DebugBundle:
        """Open an existing bundle, read-only.

        Raises:
            NotABundle: the file is missing or not a bundle.
            BundleVersionError: the bundle was written by a newer capsem.
        """
        target = Path(path)
        if not target.is_file():
            raise NotABundle(f"no bundle at {target}")
        conn = sqlite3.connect(f"{target.resolve().as_uri()}?mode=ro", uri=True)
        try:
            conn.execute("PRAGMA query_only = ON")
            row = conn.execute("SELECT schema_version FROM bundle_meta WHERE id = 1").fetchone()
        except sqlite3.Error as exc:
            conn.close()
            raise NotABundle(f"{target} is not a capsem bundle ({exc})") from exc
        if row is None:
            conn.close()
            raise NotABundle(f"{target} is not a capsem bundle (bundle_meta is empty)")
        if int(row[0]) > SCHEMA_VERSION:
            conn.close()
            raise BundleVersionError(
                f"bundle {target} has schema v{row[0]}, newer than the v{SCHEMA_VERSION} this capsem reads; "
                "upgrade capsem to open it"
            )
        return cls(target, conn)

    # --- reading ---------------------------------------------------------------------------------

    def query(self, sql: str, params: Sequence[object] = ()) -> sqlite3.Cursor:
        """Execute a SQL query (read-only) and return the cursor."""
        return self._conn.execute(sql, tuple(params))

    def run(
        self, sql: str, params: Sequence[object] = (), *, max_rows: int = 10000, timeout: float = 10.0
    ) -> QueryResult:
        """One read-only statement, at most `max_rows` rows, stopped after `timeout` seconds.

        Raises:
            QueryError: not one read-only statement, or it failed.
        """
        return query_connection(self._conn, sql, params, max_rows=max_rows, timeout=timeout, cell=_cell)

    def relations(self) -> list[str]:
        """Names of the bundle's tables and views."""
        return [r[0] for r in self._conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )]  # fmt: skip

    def table_result(self, table: str) -> QueryResult:
        """Every row of a table or view.

        Raises:
            BundleError: no such table or view.
        """
        if table not in self.relations():
            raise BundleError(f"no table or view {table!r} in {self.path} (see `capsem bundle info`)")
        cur = self._conn.execute(f'SELECT * FROM "{table}"')
        return QueryResult([d[0] for d in cur.description], [tuple(_cell(v) for v in r) for r in cur], False)

    def export_csv(self, table: str, output: PathLike) -> Path:
        """Export a table or view to CSV (blobs as base64)."""
        target = Path(output)
        write_private(target, to_csv(self.table_result(table)), newline="")
        return target

    def export_json(self, sql: str, output: PathLike) -> Path:
        """Export the rows of a read-only query to a JSON array of objects."""
        target = Path(output)
        write_private(target, to_json(self.run(sql, max_rows=10**9, timeout=600)) + "\n")
        return target

    @property
    def meta(self) -> dict[str, Any]:
        cur = self._conn.execute("SELECT * FROM bundle_meta WHERE id = 1")
        return dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))

    @property
    def session_ids(self) -> list[str]:
        """Every session id in the bundle, oldest first."""
        return [
            r[0]
            for r in self._conn.execute("SELECT session_id FROM sessions ORDER BY created_at, session_id")
        ]

    @property
    def statistics(self) -> BundleStatistics:
        def one(sql: str) -> Any:
            return self._conn.execute(sql).fetchone()[0] or 0

        return BundleStatistics(
            session_count=one("SELECT COUNT(*) FROM sessions"),
            log_count=one("SELECT COUNT(*) FROM logs"),
            tool_invocation_count=one("SELECT COUNT(*) FROM tool_invocations"),
            prompt_event_count=one("SELECT COUNT(*) FROM prompt_events"),
            file_count=one("SELECT COUNT(*) FROM files"),
            total_input_tokens=one("SELECT SUM(total_input_tokens) FROM token_summary"),
            total_output_tokens=one("SELECT SUM(total_output_tokens) FROM token_summary"),
            size_bytes=self.path.stat().st_size,
            model_call_count=one("SELECT COUNT(*) FROM model_calls"),
            tool_call_count=one("SELECT COUNT(*) FROM tool_calls"),
            net_event_count=one("SELECT COUNT(*) FROM net_events"),
            anomaly_count=one("SELECT COUNT(*) FROM proc_anomalies"),
            source_count=one("SELECT COUNT(*) FROM sources"),
            skipped_records=one("SELECT SUM(errors) FROM sources"),
            estimated_cost_usd=float(one("SELECT SUM(estimated_cost_usd) FROM model_calls")),
        )

    # --- serving ---------------------------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        """The Datasette metadata for this bundle (titles, descriptions, label columns, canned queries)."""
        return datasette_metadata(self._conn, self.path.stem)

    def start_server(self, *, host: str = "127.0.0.1", port: int = 0) -> DatasetteServer:
        """Start Datasette in the background (port 0: any free port); stop it with `.stop()`."""
        return start_datasette(self.path, self.metadata(), host=host, port=port)

    def serve(self, *, host: str = "127.0.0.1", port: int = 8001, open_browser: bool = True) -> None:
        """Serve the bundle with Datasette until interrupted (Ctrl-C, SIGTERM, SIGHUP; call it from
        the main thread), then stop Datasette.

        Raises:
            BundleError: a non-loopback host, or Datasette did not start.
        """
        with stop_on_signals():
            server = self.start_server(host=host, port=port)
            with server:
                logger.info("debug_bundle.serve url=%s/%s", server.url, server.database)
                if open_browser:
                    open_in_browser(f"{server.url}/{server.database}")
                server.wait_until_interrupted()

    # --- lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the database connection."""
        self._conn.close()

    def __enter__(self) -> DebugBundle:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()
