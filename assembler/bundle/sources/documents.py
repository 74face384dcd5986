"""Any other JSON document (AutoSkillit token_usage.json, step_timing.json, ...) kept whole in
`documents`, tied to the diagnostics session of its directory when there is one."""

from __future__ import annotations

from typing import IO

from assembler.bundle.sources.base import SourceContext, dumps, read_document
from assembler.bundle.sources.diagnostics import diag_session


def import_document(ctx: SourceContext, stream: IO[bytes]) -> None:
    doc = read_document(ctx, stream)
    if doc is None:
        return
    session_id = None
    for path in ctx.siblings.get("diag_sessions", []):
        if path.parent == ctx.path.parent and path != ctx.path:
            session_id, _ = diag_session(ctx)
            break
    ctx.insert("documents", {"session_id": session_id, "name": ctx.path.name, "kind": "json",
                             "source_id": ctx.source_id, "correlation": "directory" if session_id else None,
                             "raw": dumps(doc)})  # fmt: skip
