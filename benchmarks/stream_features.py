"""capsem's features in the streaming benchmark: the team scenario's PostgreSQL, and the goals
each feature states for itself, judged on the same run as everything else.

Scenarios (6)–(8) of `benchmarks/proxies.py` are capsem (5) with one feature more or less:

- (6) a `deny` tool rule that none of the benchmark's calls match (issue 36): every answer is
  scanned for tool calls, a tool call's bytes are held until its arguments are complete, then
  released unchanged. The `tools` profile streams answers that end with a tool call.
- (7) a team to push to (issue 38): a throw-away PostgreSQL cluster (`capsem/team/cluster.py`, as
  the team tests start it), CAPSEM_TEAM_URL set for that mitmdump only; its recorder starts the
  pusher process, which the meter counts with mitmdump and the recorder. A run of (7) ends once
  PostgreSQL holds every call sent through (7) so far, so the push of the run's calls is counted
  in its CPU (the pusher pushes every 2 s; its pushes while other scenarios run are not counted).
  PostgreSQL's own CPU is not counted: it stands for the team's server, on another machine.
- (8) no ledger (issue 37), for comparison only: `benchmarks/ledger_off/sitecustomize.py`.

Each feature's verdict is its own cost, stated by its issue or (where the issue says "no change")
read here as a tolerance of `SAME_MS` on the feature's difference to (5): see `feature_goals`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from capsem.team.cluster import Cluster, binaries, start_cluster

SAME_MS = 1.0
""""No change in first byte or lag" (issue 36) and "never in the agent's way" (issue 38) read as:
at most this many ms more than capsem (5), first byte with 1 stream and lag p50, paced streams."""
TOOL_DELAY_MS = 1.0
"""Issue 36: a held tool call reaches the agent at most this long after its last argument byte."""
LEDGER_SHARE_PCT = 5.0
"""Issue 37: the ledger costs at most this share of the recorder's CPU per call."""
PUSH_WAIT_S = 15.0
"""How long a run of (7) waits for its calls to reach PostgreSQL before it says they did not."""


class TeamServer:
    """The throw-away PostgreSQL of scenario (7), with the team schema in it."""

    def __init__(self, folder: Path) -> None:
        import psycopg

        from capsem.team.schema import init

        self.cluster: Cluster = start_cluster(folder if os.geteuid() else None)
        self.url = self.cluster.url
        try:
            self.conn = psycopg.connect(self.url, autocommit=True)
            init(self.conn)
        except BaseException:
            self.cluster.remove()
            raise
        self.sent = 0
        """Calls sent through (7) so far (the pusher's target)."""

    @staticmethod
    def missing() -> str | None:
        """Why the team scenario cannot run here, or None."""
        if binaries() is None:
            return "PostgreSQL's server binaries (initdb, pg_ctl) are not installed (make system-deps)"
        return None

    def calls(self) -> int:
        return self.conn.execute("SELECT count(*) FROM capsem.model_calls").fetchone()[0]

    def wait_pushed(self, sent: int) -> str | None:
        """Wait until PostgreSQL holds the calls sent so far (`sent` more now); an error, or None."""
        self.sent += sent
        deadline = time.monotonic() + PUSH_WAIT_S
        while (have := self.calls()) < self.sent:
            if time.monotonic() > deadline:
                return f"team: {have} of {self.sent} calls in PostgreSQL after {PUSH_WAIT_S:g} s"
            time.sleep(0.05)
        return None

    def remove(self, pushers: list[psutil.Process]) -> None:
        """Wait for the pushers' last push (they exit once the session has ended), then remove."""
        psutil.wait_procs(pushers, timeout=30)
        self.conn.close()
        self.cluster.remove()


def pushers(pid: int) -> list[psutil.Process]:
    """The team pusher processes under a mitmdump (its recorder starts one)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "addons.recorder.team_push" in child.cmdline():
                found.append(child)
        except psutil.Error:
            pass
    return found


# -- the goals ------------------------------------------------------------------------------------


def _same(cells: dict, key: str, profiles: list[str], concurrencies: list[int]) -> tuple[str, bool | None]:
    """First byte (1 stream) and lag p50 of `key` minus capsem's, paced profiles: text, met."""
    parts, met = [], None
    for profile in profiles:
        for conc in concurrencies:
            ours, base = cells.get((profile, conc, key)), cells.get((profile, conc, "capsem"))
            if not ours or not base:
                continue
            checks = [("lag p50", ours["lag_p50_ms"], base["lag_p50_ms"])]
            if conc == 1:
                checks.insert(0, ("first byte", ours["ttfb_ms"], base["ttfb_ms"]))
            for name, a, b in checks:
                if a is None or b is None:
                    continue
                delta = a - b
                met = (met is not False) and delta <= SAME_MS
                parts.append(f"{profile} ×{conc} {name} {delta:+.1f}")
    return "; ".join(parts) + (" ms" if parts else "–"), met


def _cpu(cells: dict, key: str, base: str, profiles: list[str], concurrencies: list[int]) -> str:
    """CPU of scenario `key` over scenario `base`'s, per cell (a summary for the goals table)."""
    out = []
    for profile in profiles:
        for conc in concurrencies:
            ours, theirs = cells.get((profile, conc, key)), cells.get((profile, conc, base))
            if ours and theirs and ours["cpu_s"] and theirs["cpu_s"]:
                out.append(f"{profile} ×{conc} {ours['cpu_s'] / theirs['cpu_s']:.2f}")
    return ", ".join(out) or "–"


def _verdict(met: bool | None) -> str:
    return "–" if met is None else ("met" if met else "missed")


# Long: one row per feature, each with its own stated cost and where it is measured.
def feature_goals(streaming: dict, results: dict, cells: dict) -> list[tuple[str, str, str, str]]:
    """(feature, stated cost, measured in this run, met / missed / –) for each feature."""
    every = [p["name"] for p in streaming["profiles"]]
    paced = [p["name"] for p in streaming["profiles"] if p.get("delay_ms")]
    concs = streaming["concurrencies"]
    ran = {key for (_, _, key) in cells}
    rows: list[tuple[str, str, str, str]] = []
    if "rule" in ran:
        text, met = _same(cells, "rule", paced, concs)
        rows.append(("tool rules (issue 36): text never held", f"first byte and lag as without a rule "
                     f"(here: ≤ +{SAME_MS:g} ms over (5))", f"(6) − (5): {text}", _verdict(met)))  # fmt: skip
        rows.append(
            (
                "tool rules: CPU",
                "none stated",
                f"(6) ÷ (5) CPU: {_cpu(cells, 'rule', 'capsem', every, concs)}",
                "–",
            )
        )
    hold = results.get("toolhold")
    if hold and "rule" in hold.get("arrival_delay_ms", {}):
        added = hold["arrival_delay_ms"]["rule"]["median"] - hold["arrival_delay_ms"]["capsem"]["median"]
        rows.append(("tool rules: a held call's arrival", f"≤ {TOOL_DELAY_MS:g} ms after its last argument byte",
                     f"+{added:.3f} ms (median, toolhold suite)", _verdict(added <= TOOL_DELAY_MS)))  # fmt: skip
    else:
        rows.append(("tool rules: a held call's arrival", f"≤ {TOOL_DELAY_MS:g} ms after its last argument byte",
                     "not in this run (add `toolhold` to `--only`)", "–"))  # fmt: skip
    if "team" in ran:
        text, met = _same(cells, "team", paced, concs)
        rows.append(("team push (issue 38): never in the agent's way", f"first byte and lag as without a team "
                     f"(here: ≤ +{SAME_MS:g} ms over (5))", f"(7) − (5): {text}", _verdict(met)))  # fmt: skip
        rows.append(("team push: CPU (mitmdump + recorder + pusher)", "none stated",
                     f"(7) ÷ (5) CPU: {_cpu(cells, 'team', 'capsem', every, concs)}", "–"))  # fmt: skip
    elif streaming.get("skipped", {}).get("team"):
        rows.append(("team push (issue 38)", "never in the agent's way", f"skipped: {streaming['skipped']['team']}",
                     "–"))  # fmt: skip
    ledger = results.get("ledger")
    for r in (ledger or {}).get("recorder") or []:  # one row per call shape: short answers cost it most
        measured = (f"its own share: +{r['own_pct']:.1f} % (ledger suite, {r['streams']} calls; "
                    f"with/without runs: {r['extra_pct']:+.1f} %)")  # fmt: skip
        rows.append((f"the ledger (issue 37), calls of {r['events']} events",
                     f"≤ {LEDGER_SHARE_PCT:g} % of the recorder's CPU per call", measured,
                     _verdict(r["own_pct"] <= LEDGER_SHARE_PCT)))  # fmt: skip
    if not (ledger or {}).get("recorder"):
        rows.append(("the ledger (issue 37)", f"≤ {LEDGER_SHARE_PCT:g} % of the recorder's CPU per call",
                     "its share not in this run (add `ledger` to `--only`)", "–"))  # fmt: skip
    if "noledger" in ran:
        rows.append(("the ledger, end to end", "(the goal above is on the recorder alone)",
                     f"(5) ÷ (8) CPU, mitmdump + recorder: {_cpu(cells, 'capsem', 'noledger', every, concs)}",
                     "–"))  # fmt: skip
    return rows


def feature_section(streaming: dict, results: dict, cells: dict) -> list[str]:
    """The report's table of the features' goals (after the streaming tables); none for a run
    without the features' scenarios (one saved before they existed)."""
    if not {"rule", "team", "noledger"} & {key for (_, _, key) in cells}:
        return []
    rows = feature_goals(streaming, results, cells)
    return [
        "### The features in the streaming bench: each against its own stated cost",
        "",
        "(6) a tool rule, (7) team push, (8) no ledger (bench only) beside (5) capsem in the same interleaved "
        f'runs. Where an issue says "no change", the tolerance here is +{SAME_MS:g} ms over (5) on the first '
        "byte (1 stream) and lag p50 of paced streams.",
        "",
        "| feature | stated cost | measured | |",
        "|---|---|---|---|",
        *(f"| {f} | {cost} | {measured} | {verdict} |" for f, cost, measured, verdict in rows),
        "",
    ]


def team_server(
    log: Callable[[str], None], workdir: Path, wanted: bool
) -> tuple[TeamServer | None, str | None]:
    """The team scenario's server when it is wanted and can run: (server, None) or (None, why not)."""
    if not wanted:
        return None, None
    why = TeamServer.missing()
    if why is None:
        try:
            return TeamServer(workdir / "pg"), None
        except Exception as exc:  # initdb or pg_ctl failed: the rest of the suite still runs
            why = f"the PostgreSQL cluster did not start: {exc}"
    log(f"  (7) capsem + team push skipped: {why}")
    return None, why
