"""Process diagnostics in AutoSkillit's format (seed 002) into proc_samples, proc_anomalies and
diag_sessions: the same tables capsem's own `capsem run` diagnostics fill.

- `proc_trace.jsonl`: one snapshot per line; fields are renamed to capsem's (`comm` -> name,
  `vm_rss_kb` -> rss_kb, `fd_count` -> fds, `fd_soft_limit` -> fd_limit, `captured_at` -> ts).
- `anomalies.jsonl`: one finding per line (`ts` is the detection time; the offending snapshot's
  `captured_at` becomes first_ts/last_ts). When a trace has no anomalies file next to it, the
  anomalies are derived with capsem's own detector (assembler/procdiag), marked `derived`.
- `summary.json` (one document) and `sessions.jsonl` (one line per session): diag_sessions.

A trace sits in `sessions/<dir_name>/` next to its summary.json, which names the session; without
one, the directory name is the session (AutoSkillit names directories by session id).
"""

from __future__ import annotations

import json
from typing import IO, Any

from assembler.bundle.sources.base import (
    SourceContext,
    as_float,
    as_int,
    as_text,
    dumps,
    json_lines,
    normalize_ts,
    text_stream,
)
from assembler.procdiag import detect
from assembler.procdiag.detect import (
    FD_HIGH_RATIO,
    HIGH_CPU_PERCENT,
    OOM_CRITICAL,
    OOM_SPIKE_DELTA,
    RSS_GROWTH_FACTOR,
    ZOMBIE_PERSISTENT_SAMPLES,
)
from capsem.ids import utc_now

SAMPLE_FIELDS = {
    "pid": "pid", "comm": "name", "state": "state", "vm_rss_kb": "rss_kb", "threads": "threads",
    "fd_count": "fds", "fd_soft_limit": "fd_limit", "ctx_switches_voluntary": "ctx_switches_voluntary",
    "ctx_switches_involuntary": "ctx_switches_involuntary", "cpu_percent": "cpu_percent",
    "oom_score": "oom_score", "wchan": "wchan", "sig_pnd": "sig_pnd", "sig_blk": "sig_blk", "sig_cgt": "sig_cgt",
}  # fmt: skip
# kind -> (detail key holding the measured value, threshold) for AutoSkillit findings
ANOMALY_VALUES = {
    "oom_spike": ("delta", OOM_SPIKE_DELTA), "oom_critical": ("oom_score", OOM_CRITICAL),
    "fd_high": ("ratio", FD_HIGH_RATIO), "rss_growth": ("growth_factor", RSS_GROWTH_FACTOR),
    "high_cpu_sustained": ("cpu_percent", HIGH_CPU_PERCENT),
    "zombie_persistent": ("consecutive_count", ZOMBIE_PERSISTENT_SAMPLES),
}  # fmt: skip


def diag_session(ctx: SourceContext) -> tuple[str, str]:
    """(session id, correlation) of a trace or anomalies file: its directory's summary.json, else the
    directory name."""
    for path in ctx.siblings.get("diag_sessions", []):
        if path.parent != ctx.path.parent:
            continue
        try:
            doc = json.loads(path.read_bytes()[: ctx.limits.max_document_bytes])
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(doc, dict) and (sid := doc.get("session_id") or doc.get("dir_name")):
            return str(sid), "directory"
    return ctx.path.parent.name or ctx.path.stem, "directory"


def _next_id(ctx: SourceContext, table: str, session_id: str) -> int:
    row = ctx.conn.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table} WHERE session_id = ?", (session_id,))
    return int(row.fetchone()[0]) + 1


def sample_row(obj: dict[str, Any]) -> dict[str, Any]:
    """An AutoSkillit snapshot as proc_samples columns."""
    row = {col: obj.get(key) for key, col in SAMPLE_FIELDS.items()}
    for col in ("pid", "rss_kb", "threads", "fds", "fd_limit", "ctx_switches_voluntary",
                "ctx_switches_involuntary", "oom_score"):  # fmt: skip
        row[col] = as_int(row[col])
    row["cpu_percent"] = as_float(row["cpu_percent"])
    row["ts"] = normalize_ts(obj.get("captured_at") or obj.get("ts"))
    row["seq"] = as_int(obj.get("seq"))
    return row


def import_proc_trace(ctx: SourceContext, stream: IO[bytes]) -> None:
    """proc_trace.jsonl into proc_samples (and derived anomalies when none were recorded)."""
    session_id, how = diag_session(ctx)
    ctx.ensure_session(session_id, None, "diagnostics")
    next_id = _next_id(ctx, "proc_samples", session_id)
    samples = []
    for number, obj, text in json_lines(ctx, stream):
        if not isinstance(obj, dict) or obj.get("event", "snapshot") != "snapshot":
            ctx.malformed(number, "not a proc_trace snapshot")
            continue
        row = sample_row(obj)
        if row["ts"] is None or row["pid"] is None:
            ctx.malformed(number, "snapshot without a time or pid")
            continue
        row["seq"] = row["seq"] if row["seq"] is not None else number - 1
        ctx.insert("proc_samples", {"session_id": session_id, "id": next_id, **row, "source_id": ctx.source_id,
                                    "correlation": how, "raw": text})  # fmt: skip
        next_id += 1
        samples.append(row)
    _touch_session(ctx, session_id, [s["ts"] for s in samples])
    if samples and not any(p.parent == ctx.path.parent for p in ctx.siblings.get("anomalies", [])):
        _derive_anomalies(ctx, session_id, how, samples)


def _derive_anomalies(ctx: SourceContext, session_id: str, how: str, samples: list[dict[str, Any]]) -> None:
    next_id = _next_id(ctx, "proc_anomalies", session_id)
    for a in detect(samples):
        ctx.insert("proc_anomalies", {
            "session_id": session_id, "id": next_id, "kind": a.kind, "severity": a.severity, "pid": a.pid,
            "name": a.name, "first_ts": a.first_ts, "last_ts": a.last_ts, "samples": a.samples, "value": a.value,
            "threshold": a.threshold, "detail": dumps({**a.detail, "derived": True}), "detected_at": utc_now(),
            "source_id": ctx.source_id, "correlation": how,
        })  # fmt: skip
        next_id += 1


def import_anomalies(ctx: SourceContext, stream: IO[bytes]) -> None:
    """anomalies.jsonl into proc_anomalies."""
    session_id, how = diag_session(ctx)
    ctx.ensure_session(session_id, None, "diagnostics")
    next_id = _next_id(ctx, "proc_anomalies", session_id)
    times = []
    for number, obj, text in json_lines(ctx, stream):
        if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
            ctx.malformed(number, "not an anomaly (no kind)")
            continue
        snapshot = obj.get("snapshot") if isinstance(obj.get("snapshot"), dict) else {}
        detail = obj.get("detail") if isinstance(obj.get("detail"), dict) else {}
        at = normalize_ts(snapshot.get("captured_at")) or normalize_ts(obj.get("ts"))
        key, threshold = ANOMALY_VALUES.get(obj["kind"], (None, None))
        ctx.insert("proc_anomalies", {
            "session_id": session_id, "id": next_id, "kind": obj["kind"],
            "severity": as_text(obj.get("severity")) or "warning", "pid": as_int(obj.get("pid")),
            "name": as_text(snapshot.get("comm")), "first_ts": at, "last_ts": at, "samples": 1,
            "value": as_float(detail.get(key)) if key else None, "threshold": threshold,
            "detail": dumps(detail), "detected_at": normalize_ts(obj.get("ts")), "source_id": ctx.source_id,
            "correlation": how, "raw": text,
        })  # fmt: skip
        next_id += 1
        times.append(at)
    _touch_session(ctx, session_id, times)


def _touch_session(ctx: SourceContext, session_id: str, times: list[str | None]) -> None:
    """Widen a diagnostics session's time span to cover `times`."""
    known = sorted(t for t in times if t)
    if known:
        ctx.conn.execute(
            "UPDATE sessions SET created_at = CASE WHEN created_at = '' OR created_at > ? THEN ? ELSE created_at END,"
            " ended_at = CASE WHEN ended_at IS NULL OR ended_at < ? THEN ? ELSE ended_at END WHERE session_id = ?",
            (known[0], known[0], known[-1], known[-1], session_id),
        )


def diag_row(obj: dict[str, Any]) -> dict[str, Any]:
    """A summary.json document or a sessions.jsonl line as diag_sessions columns."""
    text_cols = ("dir_name", "cwd", "skill_command", "subtype", "termination_reason")
    int_cols = ("pid", "exit_code", "snapshot_count", "anomaly_count", "peak_rss_kb", "peak_oom_score",
                "input_tokens", "output_tokens")  # fmt: skip
    success = obj.get("success")
    return {
        **{c: as_text(obj.get(c)) for c in text_cols}, **{c: as_int(obj.get(c)) for c in int_cols},
        "success": int(success) if isinstance(success, bool) else None,
        "start_ts": normalize_ts(obj.get("start_ts") or obj.get("timestamp")), "end_ts": normalize_ts(obj.get("end_ts")),
        "duration_seconds": as_float(obj.get("duration_seconds")),
    }  # fmt: skip


def import_diag_sessions(ctx: SourceContext, stream: IO[bytes]) -> None:
    """summary.json (one JSON document) or sessions.jsonl (one line per session) into diag_sessions and
    sessions."""
    limit = ctx.limits.max_document_bytes
    data = stream.read(limit + 1)
    records: list[tuple[int | None, Any, str | None]] = []
    kind = "index"
    if len(data) > limit:
        ctx.warn(f"only the first {limit} bytes were read")
        data = data[: data.rfind(b"\n") + 1]
    else:
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict):
            records, kind = [(None, doc, None)], "summary"
    if not records:
        records = list(json_lines(ctx, text_stream(data)))
    for number, obj, text in records:
        if not isinstance(obj, dict) or not (obj.get("session_id") or obj.get("dir_name")):
            ctx.malformed(number, "not a diagnostics session record (no session_id or dir_name)")
            continue
        row = diag_row(obj)
        session_id = str(obj.get("session_id") or obj.get("dir_name"))
        ctx.ensure_session(session_id, row["start_ts"], "diagnostics", ended_at=row["end_ts"], status=row["subtype"],
                           command=row["skill_command"], raw=dumps(obj))  # fmt: skip
        ctx.insert("diag_sessions", {"session_id": session_id, "record_kind": kind, **row,
                                     "source_id": ctx.source_id, "line": number, "raw": text or dumps(obj)})  # fmt: skip
