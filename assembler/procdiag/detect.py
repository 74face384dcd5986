"""Anomalies in a session's process samples: a pure function of the sample series.

The kinds and thresholds are AutoSkillit's session diagnostics (seed 002, and its later
`d_state_sustained`, `high_cpu_sustained`, `identity_drift`). A sample series belongs to one
process, identified by pid and start time (a recycled pid is another process). Where the seed
emits one finding per offending snapshot, capsem folds a run of consecutive offending samples
into one anomaly with `first_ts`/`last_ts`, the number of samples, and the peak `value`
compared with `threshold`.

| kind | condition (per process) | severity |
|---|---|---|
| oom_spike | oom_score rises by more than 200 from one sample to the next | warning |
| oom_critical | oom_score >= 800 | critical |
| zombie_detected | state zombie (one per run of zombie samples) | warning |
| zombie_persistent | zombie for >= 3 consecutive samples | critical |
| signals_pending | pending signal mask goes from zero to non-zero | warning |
| rss_growth | after start-up (5 s), >= 5 samples and RSS above 2x the first of them (once) | warning |
| fd_high | fds / soft fd limit > 0.80 | warning |
| d_state_sustained | disk-sleep with a non-benign wchan, >= 2 consecutive samples | warning |
| high_cpu_sustained | cpu_percent >= 90 over >= 10 s of consecutive measurements | info |
| identity_drift | the agent's own process changes name (it exec'd) | info |

high_cpu_sustained is a warning in the seed; a busy agent (a build, a test run) is not a fault, so
it is info here and `inspect-session --strict` passes it.
rss_growth in the seed compares with the very first sample; a Python agent that lives ~25 s reads
8 MB before its imports and 99 MB after, so every one of them was flagged. Growth is judged after
start-up (`RSS_STARTUP_SECONDS` from the process's start time), against the steady state the
process reached then.
identity_drift is critical in the seed, where the tracer guessed which pid to watch; capsem
starts the agent itself, so a new name only means the agent exec'd another program.

"Sustained" CPU is the seed's: two consecutive snapshots at >= 90 %, each the average since the
snapshot before, taken every 5 s (its default `proc_interval`), so at least 10 s of measured time.
capsem samples more often (every second by default), so it asks for that time rather than that
number of samples: a run is measured from the sample before it (where its first measurement
starts) to its last sample. A 1-2 s script at full speed is not a hung agent.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Sample = Mapping[str, Any]
Severity = Literal["info", "warning", "critical"]

OOM_SPIKE_DELTA = 200
OOM_CRITICAL = 800
ZOMBIE_PERSISTENT_SAMPLES = 3
RSS_GROWTH_FACTOR = 2.0
RSS_GROWTH_MIN_SAMPLES = 5
RSS_STARTUP_SECONDS = 5.0
"""Start-up (imports, a runtime's heap warming up) is not growth: RSS is judged from then on."""
FD_HIGH_RATIO = 0.80
D_STATE_SAMPLES = 2
HIGH_CPU_PERCENT = 90.0
HIGH_CPU_SECONDS = 10.0
# Wait channels of a healthy uninterruptible sleep ("" and "0": unreadable or runnable).
BENIGN_WCHANS = frozenset({"do_nanosleep", "do_epoll_wait", "schedule_hrtimeout_range", "", "0"})


@dataclass(frozen=True)
class Anomaly:
    """One finding over a run of samples of one process."""

    kind: str
    severity: Severity
    pid: int
    name: str | None
    first_ts: str
    last_ts: str
    samples: int
    """How many samples showed the condition."""
    value: float
    """The peak measured value (oom score, ratio, growth factor, count...)."""
    threshold: float
    detail: dict[str, Any] = field(default_factory=dict)


def _runs(series: Sequence[Sample], condition: Callable[[Sample], bool]) -> Iterator[list[Sample]]:
    """Maximal runs of consecutive samples for which `condition` holds."""
    for matched, group in itertools.groupby(series, key=condition):
        if matched:
            yield list(group)


def _make(kind: str, severity: Severity, run: Sequence[Sample], value: float, threshold: float,
          **detail: Any) -> Anomaly:  # fmt: skip
    last = run[-1]
    return Anomaly(kind, severity, last["pid"], last.get("name"), run[0]["ts"], last["ts"], len(run),
                   value, threshold, detail)  # fmt: skip


def _num(sample: Sample, key: str) -> float | None:
    value = sample.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _oom(series: Sequence[Sample]) -> Iterator[Anomaly]:
    for before, after in itertools.pairwise(series):
        old, new = _num(before, "oom_score"), _num(after, "oom_score")
        if old is not None and new is not None and old >= 0 and new - old > OOM_SPIKE_DELTA:
            yield _make("oom_spike", "warning", [before, after], new - old, OOM_SPIKE_DELTA,
                        **{"from": old, "to": new, "delta": new - old})  # fmt: skip
    for run in _runs(series, lambda s: (_num(s, "oom_score") or 0) >= OOM_CRITICAL):
        peak = max(_num(s, "oom_score") or 0 for s in run)
        yield _make("oom_critical", "critical", run, peak, OOM_CRITICAL, oom_score=peak)


def _zombies(series: Sequence[Sample]) -> Iterator[Anomaly]:
    for run in _runs(series, lambda s: s.get("state") == "zombie"):
        yield _make("zombie_detected", "warning", run, len(run), 1, consecutive_count=len(run))
        if len(run) >= ZOMBIE_PERSISTENT_SAMPLES:
            yield _make("zombie_persistent", "critical", run, len(run), ZOMBIE_PERSISTENT_SAMPLES,
                        consecutive_count=len(run))  # fmt: skip


def signal_names(mask: int) -> list[str]:
    """Names of the signals set in a /proc signal mask (bit n-1 = signal n)."""
    names = []
    for bit in range(64):
        if mask >> bit & 1:
            try:
                names.append(signal.Signals(bit + 1).name)
            except ValueError:
                names.append(f"SIG{bit + 1}")
    return names


def _mask(sample: Sample) -> int | None:
    try:
        return int(sample["sig_pnd"], 16)
    except (KeyError, TypeError, ValueError):
        return None


def _signals(series: Sequence[Sample]) -> Iterator[Anomaly]:
    index = 0
    while index < len(series):
        if _mask(series[index]) != 0:
            index += 1
            continue
        run = list(itertools.takewhile(lambda s: bool(_mask(s)), series[index + 1 :]))
        if run:
            masks = [_mask(s) or 0 for s in run]
            union = 0
            for m in masks:
                union |= m
            yield _make("signals_pending", "warning", run, bin(union).count("1"), 0,
                        **{"from": series[index]["sig_pnd"], "to": run[0]["sig_pnd"],
                           "signals": signal_names(union)})  # fmt: skip
        index += len(run) + 1


def _age(sample: Sample) -> float | None:
    """Seconds since the process started, at this sample (None when either time is unknown)."""
    try:
        return (
            datetime.fromisoformat(sample["ts"]) - datetime.fromisoformat(sample["started_at"])
        ).total_seconds()
    except (KeyError, TypeError, ValueError):
        return None


def _rss(series: Sequence[Sample]) -> Iterator[Anomaly]:
    series = [s for s in series if (age := _age(s)) is None or age >= RSS_STARTUP_SECONDS]  # steady state
    if len(series) < RSS_GROWTH_MIN_SAMPLES:
        return
    initial = next((r for s in series if (r := _num(s, "rss_kb"))), None)
    if not initial:
        return
    grown = [s for s in series if (_num(s, "rss_kb") or 0) > RSS_GROWTH_FACTOR * initial]
    if grown:
        peak = max(_num(s, "rss_kb") or 0 for s in grown)
        yield _make("rss_growth", "warning", grown, round(peak / initial, 2), RSS_GROWTH_FACTOR,
                    initial_rss_kb=initial, peak_rss_kb=peak, final_rss_kb=_num(series[-1], "rss_kb"),
                    growth_factor=round(peak / initial, 2), snapshot_count=len(series))  # fmt: skip


def _fd_ratio(sample: Sample) -> float | None:
    fds, limit = _num(sample, "fds"), _num(sample, "fd_limit")
    return fds / limit if fds is not None and limit else None


def _fds(series: Sequence[Sample]) -> Iterator[Anomaly]:
    for run in _runs(series, lambda s: (_fd_ratio(s) or 0) > FD_HIGH_RATIO):
        worst = max(run, key=lambda s: _fd_ratio(s) or 0)
        ratio = round(_fd_ratio(worst) or 0, 3)
        yield _make("fd_high", "warning", run, ratio, FD_HIGH_RATIO, fd_count=worst["fds"],
                    fd_soft_limit=worst["fd_limit"], ratio=ratio)  # fmt: skip


def _sustained(series: Sequence[Sample]) -> Iterator[Anomaly]:
    def stuck(s: Sample) -> bool:
        return s.get("state") == "disk-sleep" and (s.get("wchan") or "") not in BENIGN_WCHANS

    for run in _runs(series, stuck):
        if len(run) >= D_STATE_SAMPLES:
            yield _make("d_state_sustained", "warning", run, len(run), D_STATE_SAMPLES, state="disk-sleep",
                        wchan=sorted({s.get("wchan") for s in run}), consecutive_count=len(run))  # fmt: skip
    start = 0
    for hot, group in itertools.groupby(
        series, key=lambda s: (_num(s, "cpu_percent") or 0) >= HIGH_CPU_PERCENT
    ):
        run = list(group)
        measured_from = (
            series[start - 1] if start else run[0]
        )  # the first value measures since the sample before
        start += len(run)
        seconds = _seconds_between(measured_from, run[-1])
        if hot and seconds is not None and seconds >= HIGH_CPU_SECONDS:
            peak = max(_num(s, "cpu_percent") or 0 for s in run)
            yield _make("high_cpu_sustained", "info", run, peak, HIGH_CPU_PERCENT, cpu_percent=peak,
                        consecutive_count=len(run), seconds=round(seconds, 3))  # fmt: skip


def _seconds_between(first: Sample, last: Sample) -> float | None:
    try:
        return (datetime.fromisoformat(last["ts"]) - datetime.fromisoformat(first["ts"])).total_seconds()
    except (KeyError, TypeError, ValueError):
        return None


def _identity(series: Sequence[Sample]) -> Iterator[Anomaly]:
    expected = next((s["name"] for s in series if s.get("name")), None)
    drifted = next((s for s in series if s.get("name") and s["name"] != expected), None)
    if drifted is not None:
        yield _make("identity_drift", "info", [drifted], 1, 0, expected_comm=expected,
                    actual_comm=drifted["name"])  # fmt: skip


def detect_process(series: Sequence[Sample], *, is_agent: bool = False) -> list[Anomaly]:
    """Anomalies of one process, from its samples in time order.

    Args:
        series: samples with at least `ts` and `pid`; any other field may be missing or None.
        is_agent: the process capsem started (checked for identity drift).
    """
    found = [*_oom(series), *_zombies(series), *_signals(series), *_rss(series), *_fds(series),
             *_sustained(series)]  # fmt: skip
    if is_agent:
        found += _identity(series)
    return sorted(found, key=lambda a: (a.first_ts, a.kind))


def detect(samples: Iterable[Sample], *, agent_pid: int | None = None) -> list[Anomaly]:
    """Anomalies of every process in `samples` (any order), sorted by time.

    A process is its (pid, started_at): a recycled pid starts a new series.
    """
    by_process: dict[tuple[Any, Any], list[Sample]] = {}
    for sample in samples:
        by_process.setdefault((sample["pid"], sample.get("started_at")), []).append(sample)
    found: list[Anomaly] = []
    for (pid, _), series in by_process.items():
        series.sort(key=lambda s: (s["ts"], s.get("seq") or 0))
        found += detect_process(series, is_agent=pid == agent_pid)
    return sorted(found, key=lambda a: (a.first_ts, a.pid, a.kind))
