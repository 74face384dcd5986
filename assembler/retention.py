"""Retention: compress finished sessions and cull old ones (`capsem vacuum`).

Lifecycle: `running -> stopped|crashed -> vacuumed -> culled` (Capsem calls the last `terminated`;
rows culled before issue 25 were migrated to `culled`, and `terminated` is still read as culled).

No rule ever culls a session created less than a day ago (`MIN_AGE`), a session marked to keep
(`capsem keep ID`, main.db `keep = 1`) or a running one.

1. Cull by age: finished sessions created more than `retention_days` ago.
2. Cull by count: beyond `max_sessions` (running ones count but are never culled), empty
   sessions go first (oldest first), then the oldest sessions with content, keeping at least
   the newest `min_content_keep` sessions with content.
3. Vacuum every remaining finished (`stopped`/`crashed`) session: WAL checkpoint, journal mode
   DELETE (so the archive is one self-contained file), VACUUM, gzip to `session.db.gz` (written
   to a temporary name, then renamed), main.db status `vacuumed` with `compressed_size_bytes`
   and `vacuumed_at`, then session.db / -wal / -shm are removed. A session never rolled up is
   rolled up first.
4. Cull by disk: while the session directories use more than `max_disk_gb`, cull finished
   sessions, empty ones first, then oldest first.

Culling deletes the session's directory and sets its main.db status to `culled`, with
`culled_at` and `culled_reason` (the rule); its main.db row and rollup (`ai_usage`,
`tool_usage`, `mcp_usage`) stay, so list-sessions --all and cost-report keep the history.
`running` sessions are never touched. A setting of 0 or null switches its rule off. `capsem run`
prints one line saying what it culled and why (`summary_line`).
"""

from __future__ import annotations

import gzip
import os
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from assembler.sessiondb import DB_NAME, GZ_NAME, MainDbMissing, disk_usage
from capsem import health
from capsem.ids import rfc3339, utc_now
from capsem.paths import main_db_path, session_dir
from capsem.private import open_private
from capsem.rollup import open_main, rollup
from capsem.settings import Settings, load
from capsem.store.sessions_chain import record

FINISHED = ("stopped", "crashed")
GONE = ("culled", "terminated")
"""Statuses of culled sessions (`terminated`: Capsem's name, and ours before issue 25)."""
MIN_AGE = timedelta(days=1)
"""No rule culls a session younger than this."""
KEPT = ("stopped", "crashed", "vacuumed")
"""Statuses of sessions that still have (or may have) data on disk and may be culled."""


@dataclass(frozen=True)
class RetentionPolicy:
    retention_days: float | None = 30
    max_sessions: int | None = 100
    max_disk_gb: float | None = 10
    min_content_keep: int = 5

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> RetentionPolicy:
        """The rules of `Settings.retention` (None: load the settings).

        Raises:
            SettingsError: a bad setting (any of them, when loading).
        """
        r = (settings or load()).retention
        return cls(r.retention_days, r.max_sessions, r.max_disk_gb, r.min_content_keep)


@dataclass(frozen=True)
class Action:
    session_id: str
    kind: Literal["vacuum", "cull"]
    reason: str
    bytes_before: int = 0
    bytes_after: int = 0


@dataclass
class RetentionReport:
    policy: RetentionPolicy
    dry_run: bool
    actions: list[Action] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    spared: list[tuple[str, str]] = field(default_factory=list)
    """Finished sessions no rule may cull, with why (`less than a day old`, `marked to keep`)."""
    disk_before: int = 0
    disk_after: int = 0

    def of(self, kind: str) -> list[Action]:
        return [a for a in self.actions if a.kind == kind]


# --- planning (pure) -------------------------------------------------------------------------


def is_empty(row: dict[str, Any]) -> bool:
    """No traffic, tokens, tool, MCP or file events: nothing worth keeping."""
    return not any(row.get(k) for k in ("total_requests", "total_input_tokens", "total_output_tokens",
                                         "total_tool_calls", "total_mcp_calls", "total_file_events"))  # fmt: skip


def _created(row: dict[str, Any]) -> datetime:
    try:
        moment = datetime.fromisoformat(str(row["created_at"]).replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _oldest_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (_created(r), r["id"]))


def spared(row: dict[str, Any], now: datetime | None = None) -> str | None:
    """Why no rule may cull this session (marked to keep, younger than a day), or None."""
    if row.get("keep"):
        return "marked to keep"
    if _created(row) > (now or datetime.now(UTC)) - MIN_AGE:
        return "less than a day old"
    return None


def _cullable(rows: list[dict[str, Any]], now: datetime | None) -> list[dict[str, Any]]:
    """Finished sessions, oldest first, that a rule may cull."""
    return _oldest_first([r for r in rows if r["status"] in KEPT and spared(r, now) is None])


def plan_age(rows: list[dict[str, Any]], policy: RetentionPolicy, now: datetime) -> list[tuple[str, str]]:
    """Finished sessions older than `retention_days`: (id, reason)."""
    if not policy.retention_days:
        return []
    limit = now - timedelta(days=policy.retention_days)
    return [(r["id"], f"older than {policy.retention_days:g} days (retention_days)")
            for r in _cullable(rows, now) if _created(r) < limit]  # fmt: skip


def plan_count(
    rows: list[dict[str, Any]], policy: RetentionPolicy, now: datetime | None = None
) -> list[tuple[str, str]]:
    """Sessions beyond `max_sessions` (all rows not culled count), empty ones first."""
    if not policy.max_sessions:
        return []
    alive = [r for r in rows if r["status"] not in GONE]
    excess = len(alive) - policy.max_sessions
    if excess <= 0:
        return []
    finished = _cullable(alive, now)
    empty = [r for r in finished if is_empty(r)]
    content = [r for r in _oldest_first([r for r in alive if r["status"] in KEPT]) if not is_empty(r)]
    protected = (
        {r["id"] for r in content[len(content) - policy.min_content_keep :]}
        if policy.min_content_keep
        else set()
    )
    cullable = {r["id"] for r in finished}
    order = empty + [r for r in content if r["id"] not in protected and r["id"] in cullable]
    reason = f"more than {policy.max_sessions} sessions (max_sessions"
    return [(r["id"], reason + ("; empty)" if is_empty(r) else ")")) for r in order[:excess]]


def plan_disk(
    rows: list[dict[str, Any]], sizes: dict[str, int], policy: RetentionPolicy, now: datetime | None = None
) -> list[tuple[str, str]]:
    """Finished sessions to cull until the session directories fit `max_disk_gb`, empty first."""
    if not policy.max_disk_gb:
        return []
    cap = int(policy.max_disk_gb * 1024**3)
    total = sum(sizes.values())
    out = []
    finished = [r for r in _cullable(rows, now) if sizes.get(r["id"])]
    for r in [r for r in finished if is_empty(r)] + [r for r in finished if not is_empty(r)]:
        if total <= cap:
            break
        total -= sizes[r["id"]]
        out.append((r["id"], f"session directories above {policy.max_disk_gb:g} GB (max_disk_gb)"))
    return out


# --- doing ------------------------------------------------------------------------------------


def vacuum_session(main: sqlite3.Connection, row: dict[str, Any]) -> Action:
    """Compress one finished session (see the module docstring) and record it in main.db.

    Raises:
        sqlite3.Error, OSError: the session could not be vacuumed (it is left as it was).
    """
    session_id = row["id"]
    folder = session_dir(session_id)
    db, gz = folder / DB_NAME, folder / GZ_NAME
    before = disk_usage(folder) if folder.is_dir() else 0
    if db.is_file():
        if not row.get("rolled_up_at"):
            rollup(main, session_id, db)
        conn = sqlite3.connect(db, isolation_level=None, timeout=5)  # rows change only through the writer
        try:
            _fold_health(conn, db, folder)  # the counts kept for a full disk go into the archive
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode = DELETE")
            conn.execute("VACUUM")
        finally:
            conn.close()
        tmp = folder / (GZ_NAME + ".tmp")
        with (
            open(db, "rb") as src,
            open_private(tmp, "wb") as raw,
            gzip.open(raw, "wb", compresslevel=6) as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, gz)
    size = gz.stat().st_size if gz.is_file() else 0
    main.execute(
        "UPDATE sessions SET status = 'vacuumed', compressed_size_bytes = ?, vacuumed_at = ? "
        "WHERE id = ? AND status IN ('stopped', 'crashed')",
        (size, utc_now(), session_id),
    )
    for name in (DB_NAME, DB_NAME + "-wal", DB_NAME + "-shm", DB_NAME + "-journal", health.FILE_NAME):
        (folder / name).unlink(missing_ok=True)
    after = disk_usage(folder) if folder.is_dir() else 0
    reason = "compressed" if size else "no database on disk; marked vacuumed"
    return Action(session_id, "vacuum", reason, before, after)


def _fold_health(conn: sqlite3.Connection, db: Path, folder: Path) -> None:
    """The health file's counts into session_meta, through the store's writer (so they are chained);
    read first on `conn`, so a session with nothing to add (most) gets no writer."""
    from capsem.store.writer import SessionWriter

    meta = dict(conn.execute("SELECT key, value FROM session_meta WHERE key LIKE 'capture%'").fetchall())
    changed = {k: v for k, v in health.merged(meta, folder).items() if meta.get(k) != v}
    if changed:
        writer = SessionWriter(db)
        writer.set_meta(**changed)
        writer.close(checkpoint=False)


def cull_session(main: sqlite3.Connection, session_id: str, reason: str) -> Action:
    """Delete a session's directory and mark it `culled`, with when and why (its main.db rollup stays)."""
    folder = session_dir(session_id)
    before = disk_usage(folder) if folder.is_dir() else 0
    main.execute(
        "UPDATE sessions SET status = 'culled', culled_at = COALESCE(culled_at, ?), "
        "culled_reason = COALESCE(culled_reason, ?) WHERE id = ? AND status != 'running'",
        (utc_now(), reason, session_id),
    )
    record(main, "cull", session_id, None)  # main.db's chain of sessions: its absence is expected
    if folder.is_dir():
        shutil.rmtree(folder)
    return Action(session_id, "cull", reason, before, 0)


def _sizes(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {r["id"]: disk_usage(session_dir(r["id"])) for r in rows if session_dir(r["id"]).is_dir()}


def apply_retention(
    policy: RetentionPolicy | None = None,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    on_progress: Callable[[str], None] | None = None,
    vacuum_after: timedelta | None = None,
) -> RetentionReport:
    """Apply the retention rules to every session in main.db (see the module docstring).

    With `vacuum_after`, only sessions that finished at least that long ago are compressed
    (the automatic run at start-up leaves recent sessions as plain files).

    With `dry_run` nothing is changed; the disk rule is then judged on the current
    (uncompressed) sizes, so a real run may cull less.

    Raises:
        MainDbMissing: when main.db does not exist.
        SettingsError: invalid settings.
    """
    if not main_db_path().is_file():
        raise MainDbMissing(f"no main.db at {main_db_path()} (no session recorded yet)")
    policy = policy or RetentionPolicy.from_settings()
    now = now or datetime.now(UTC)
    report = RetentionReport(policy, dry_run)
    main = open_main()
    try:
        rows = [dict(r) for r in main.execute("SELECT * FROM sessions ORDER BY created_at, id")]
        report.running = [r["id"] for r in rows if r["status"] == "running"]
        report.spared = [(r["id"], why) for r in rows if r["status"] in KEPT and (why := spared(r, now))]
        report.disk_before = sum(_sizes(rows).values())
        run = _Run(main, report, {r["id"]: r for r in rows}, dry_run, on_progress)
        run.cull(plan_age(rows, policy, now))
        run.cull(plan_count(list(run.by_id.values()), policy, now))
        # Directories of sessions culled earlier (e.g. an interrupted run) go as well.
        leftover = [r for r in rows if r["status"] in GONE and session_dir(r["id"]).is_dir()]
        for r in leftover:
            run.by_id[r["id"]] = {**r, "status": "stopped"}  # so that `cull` takes it
        run.cull([(r["id"], "culled earlier; directory left over") for r in leftover])
        run.vacuum(rfc3339(now - vacuum_after) if vacuum_after is not None else None)

        current = list(run.by_id.values())
        run.cull(plan_disk(current, _sizes([r for r in current if r["status"] not in GONE]), policy, now))
        if not dry_run:
            main.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        live = [r for r in run.by_id.values() if r["status"] not in GONE]
        report.disk_after = sum(_sizes(live).values()) if not dry_run else _estimate_after(report)
    finally:
        main.close()
    return report


@dataclass
class _Run:
    """One retention run's steps on main.db: `by_id` follows each session's status as they change it."""

    main: sqlite3.Connection
    report: RetentionReport
    by_id: dict[str, dict[str, Any]]
    dry_run: bool
    on_progress: Callable[[str], None] | None

    def cull(self, plan: list[tuple[str, str]]) -> None:
        """Cull the planned sessions not running or gone already (a dry run only reports them)."""
        for session_id, reason in plan:
            if self.by_id[session_id]["status"] in ("running", *GONE):
                continue
            if self.on_progress:
                self.on_progress(f"cull {session_id}")
            if self.dry_run:
                size = disk_usage(session_dir(session_id)) if session_dir(session_id).is_dir() else 0
                self.report.actions.append(Action(session_id, "cull", reason, size, 0))
            else:
                try:
                    self.report.actions.append(cull_session(self.main, session_id, reason))
                except OSError as exc:
                    self.report.errors.append(f"{session_id}: cannot delete {session_dir(session_id)}: {exc}")
                    continue
            self.by_id[session_id] = {**self.by_id[session_id], "status": "culled"}

    def vacuum(self, cutoff: str | None) -> None:
        """Compress every finished session (that stopped before `cutoff`, when given)."""
        for row in [r for r in self.by_id.values() if r["status"] in FINISHED]:
            if cutoff and (row.get("stopped_at") or row.get("created_at") or "") > cutoff:
                continue
            if self.on_progress:
                self.on_progress(f"vacuum {row['id']}")
            if self.dry_run:
                folder = session_dir(row["id"])
                size = disk_usage(folder) if folder.is_dir() else 0
                self.report.actions.append(Action(row["id"], "vacuum", "would be compressed", size,
                                                  estimate_compressed(folder, size)))  # fmt: skip
                continue
            try:
                self.report.actions.append(vacuum_session(self.main, row))
                self.by_id[row["id"]] = {**row, "status": "vacuumed"}
            except (sqlite3.Error, OSError) as exc:
                (session_dir(row["id"]) / (GZ_NAME + ".tmp")).unlink(missing_ok=True)
                self.report.errors.append(
                    f"{row['id']}: cannot vacuum {session_dir(row['id']) / DB_NAME}: {exc}"
                )


def _estimate_after(report: RetentionReport) -> int:
    culled = sum(a.bytes_before for a in report.of("cull"))
    squeezed = sum(a.bytes_before - a.bytes_after for a in report.of("vacuum"))
    return max(0, report.disk_before - culled - squeezed)


_SAMPLE = 4 << 20


def estimate_compressed(folder: Path, size: int) -> int:
    """About what a session directory of `size` bytes takes once vacuumed: the gzip ratio of the first
    4 MB of its database (and WAL) applied to the whole (a dry run changes nothing, so no VACUUM)."""
    import zlib

    sample = b""
    for name in (DB_NAME, DB_NAME + "-wal"):
        try:
            with open(folder / name, "rb") as fh:
                sample += fh.read(_SAMPLE - len(sample))
        except OSError:
            continue
    if not sample:
        return size
    ratio = len(zlib.compress(sample, 6)) / len(sample)
    return int(size * ratio)


def summary_line(report: RetentionReport) -> str | None:
    """What the start-up retention did, in one line (None when it did nothing):
    `retention: culled 14 sessions (12 more than 5 sessions, 2 older than 30 days), compressed 3`."""
    culls, vacuums = report.of("cull"), report.of("vacuum")
    if not culls and not vacuums:
        return None
    parts = []
    if culls:
        why: dict[str, int] = {}
        for a in culls:
            rule = a.reason.split(" (", 1)[0]
            why[rule] = why.get(rule, 0) + 1
        reasons = ", ".join(f"{n} {rule}" for rule, n in why.items())
        ids = " ".join(a.session_id for a in culls[:3]) + (" …" if len(culls) > 3 else "")
        parts.append(f"culled {len(culls)} session{'s' if len(culls) != 1 else ''} ({reasons}: {ids})")
    if vacuums:
        parts.append(f"compressed {len(vacuums)} finished over a day ago")
    line = "retention: " + ", ".join(parts)
    if culls:
        line += "; capsem list-sessions --all lists them, capsem keep ID spares a session"
    return line


AUTO_LOCK = "retention.lock"


def auto_retention(settings: Settings | None = None) -> RetentionReport | None:
    """The start-up run (as Capsem does it): the configured culls, and compression of sessions
    finished more than `retention.vacuum_after_hours` ago.

    Returns None when switched off (`retention.auto: false`), when there is no main.db yet, or when
    another process holds the retention lock. Raises SettingsError on invalid settings.
    """
    import fcntl

    settings = settings or load()
    if not settings.retention.auto or not main_db_path().is_file():
        return None
    policy = RetentionPolicy.from_settings(settings)
    with open_private(main_db_path().parent / AUTO_LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # another capsem is tidying up right now
        return apply_retention(policy, vacuum_after=timedelta(hours=settings.retention.vacuum_after_hours))


def keep_session(session_id: str, keep: bool = True) -> str:
    """Mark a session (any unique start of its id) to keep, or not; return its full id.

    Raises:
        MainDbMissing: no main.db yet.
        LookupError: no session, or several, start with `session_id`; or it is already culled.
    """
    if not main_db_path().is_file():
        raise MainDbMissing(f"no main.db at {main_db_path()} (no session recorded yet)")
    main = open_main()
    try:
        found = main.execute(
            "SELECT id, status FROM sessions WHERE id LIKE ? ESCAPE '\\' ORDER BY id",
            (session_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",),
        ).fetchall()
        if not found:
            raise LookupError(f"no session {session_id!r} in main.db (capsem list-sessions --all lists them)")
        if len(found) > 1:
            raise LookupError(f"{session_id!r} is the start of {len(found)} session ids; give more of it")
        ((full, status),) = found
        if keep and status in GONE:
            raise LookupError(f"session {full} was already culled: its database is gone")
        main.execute("UPDATE sessions SET keep = ? WHERE id = ?", (int(keep), full))
    finally:
        main.close()
    return full
