"""One reader per kind of input; `READERS` maps a detected kind to its reader, in import order.

Capsem sessions come first, so that later sources can be correlated with their time spans; a
main.db after them, since it only enriches sessions already imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

from assembler.bundle.sources.archives import import_archive
from assembler.bundle.sources.base import Limits, SourceContext
from assembler.bundle.sources.capsem import import_capsem_main, import_capsem_session
from assembler.bundle.sources.diagnostics import import_anomalies, import_diag_sessions, import_proc_trace
from assembler.bundle.sources.documents import import_document
from assembler.bundle.sources.logs import import_logs
from assembler.bundle.sources.snapshots import import_snapshots

Reader = Callable[[SourceContext, IO[bytes]], None]

READERS: dict[str, Reader] = {
    "capsem_session": import_capsem_session,
    "capsem_main": import_capsem_main,
    "snapshot": import_snapshots,
    "log": import_logs,
    "jsonl": import_logs,
    "diag_sessions": import_diag_sessions,
    "proc_trace": import_proc_trace,
    "anomalies": import_anomalies,
    "archive": import_archive,
    "document": import_document,
}

__all__ = ["READERS", "Limits", "Reader", "SourceContext"]
