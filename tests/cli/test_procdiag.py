"""Process diagnostics of `capsem run`: real processes sampled into session.db, the seed's anomalies
provoked for real (fd limit, memory, oom score, pending signal, zombie) and the detector's
thresholds checked on synthetic sample series."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

from assembler.procdiag import (
    Diagnostics,
    ProcessSampler,
    detect,
    detect_process,
    diagnostics_settings,
    finish,
)
from assembler.procdiag.detect import signal_names
from assembler.procdiag.sample import ProcessReader, parse_nofile_limit, parse_status_signals
from assembler.procdiag.sampler import scrubber_for
from capsem.redact import hash_value
from capsem.settings import parse
from tests.cli.conftest import run
from tests.conftest import rows
from tests.recording import recorder_thread

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
ZERO = "0" * 16

# --- the detector, on synthetic series -----------------------------------------------------------


def series(pid: int = 7, step: float = 1.0, **columns: list) -> list[dict]:
    """Samples of one process, one every `step` seconds; `columns` give each field's values in order."""
    n = max(len(v) for v in columns.values())
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [{"ts": (start + timedelta(seconds=i * step)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "seq": i, "pid": pid,
             "name": "agent", "started_at": "2026-01-01T00:00:00.000000Z", **{k: v[i] for k, v in columns.items()}}
            for i in range(n)]  # fmt: skip


def kinds(samples: list[dict], **kw) -> list[str]:
    return [a.kind for a in detect_process(samples, **kw)]


def test_oom_spike_needs_a_rise_above_200_and_ignores_unreadable_scores():
    assert kinds(series(oom_score=[500, 700])) == []  # +200 exactly
    (spike,) = detect_process(series(oom_score=[500, 701]))
    assert (spike.kind, spike.value, spike.threshold, spike.detail) == (
        "oom_spike", 201, 200, {"from": 500, "to": 701, "delta": 201})  # fmt: skip
    assert (spike.first_ts, spike.last_ts, spike.samples) == ("2026-01-01T00:00:00.000000Z",
                                                              "2026-01-01T00:00:01.000000Z", 2)  # fmt: skip
    assert kinds(series(oom_score=[-1, 700, None, 700])) == []


def test_oom_critical_is_one_anomaly_per_run_with_its_peak():
    found = detect_process(series(oom_score=[799, 800, 950, 900, 100, 810]))
    critical = [a for a in found if a.kind == "oom_critical"]
    assert [(a.value, a.samples, a.severity) for a in critical] == [
        (950, 3, "critical"),
        (810, 1, "critical"),
    ]
    assert critical[0].first_ts.endswith("01.000000Z") and critical[0].last_ts.endswith("03.000000Z")
    assert [a.kind for a in found].count("oom_spike") == 1  # 100 -> 810


def test_record_anomalies_only_adds_rows(tmp_path):
    """A rerun over more samples keeps the stored anomalies as they were and adds the new ones."""
    from assembler.offline_write import record_anomalies
    from capsem.store.writer import SessionWriter

    db, samples = tmp_path / "session.db", series(oom_score=[500, 701, 100, 810])
    writer = SessionWriter(db)
    writer.add_dicts("proc_samples", samples[:2])
    writer.close(checkpoint=False)
    assert [a.kind for a in record_anomalies(db)] == ["oom_spike"]
    first = rows(db, "SELECT * FROM proc_anomalies ORDER BY id")
    writer = SessionWriter(db)
    writer.add_dicts("proc_samples", samples[2:])
    writer.close(checkpoint=False)
    record_anomalies(db)
    again = rows(db, "SELECT * FROM proc_anomalies ORDER BY id")
    assert again[:1] == first
    assert sorted(a["kind"] for a in again) == ["oom_critical", "oom_spike", "oom_spike"]
    record_anomalies(db)
    assert rows(db, "SELECT * FROM proc_anomalies ORDER BY id") == again


def test_zombie_detected_per_run_and_persistent_from_three_samples():
    assert kinds(series(state=["running", "zombie", "zombie", "sleeping"])) == ["zombie_detected"]
    found = detect_process(series(state=["zombie", "zombie", "zombie", "running", "zombie"]))
    assert [(a.kind, a.samples, a.severity) for a in found] == [
        ("zombie_detected", 3, "warning"),
        ("zombie_persistent", 3, "critical"),
        ("zombie_detected", 1, "warning"),
    ]


def test_signals_pending_only_on_a_transition_from_zero():
    assert kinds(series(sig_pnd=["0000000000000200", "0000000000000200"])) == []  # pending from the start
    assert kinds(series(sig_pnd=[ZERO, None, "0000000000000200"])) == []  # unknown in between
    (found,) = detect_process(series(sig_pnd=[ZERO, "0000000000000200", "0000000000004200", ZERO]))
    assert (found.kind, found.samples, found.value) == ("signals_pending", 2, 2)
    assert found.detail == {"from": ZERO, "to": "0000000000000200", "signals": ["SIGUSR1", "SIGTERM"]}
    assert signal_names(1 << 8) == ["SIGKILL"]


def settled(**columns: list) -> list[dict]:
    """`series` of a process that started 10 s before its first sample (past its start-up)."""
    return [dict(s, started_at="2025-12-31T23:59:50.000000Z") for s in series(**columns)]


def test_rss_growth_needs_five_samples_and_more_than_double_the_first_rss():
    assert kinds(settled(rss_kb=[None, 1000, 1500, 2100, 2500])) == ["rss_growth"]
    assert kinds(settled(rss_kb=[1000, 1500, 2100, 2500])) == []  # four samples
    assert kinds(settled(rss_kb=[1000, 1500, 2000, 2000, 2000])) == []  # exactly 2x
    (growth,) = detect_process(settled(rss_kb=[0, 1000, 3000, 5000, 1200, 1100]))
    assert (growth.value, growth.samples, growth.detail["initial_rss_kb"], growth.detail["final_rss_kb"]) == (
        5.0, 2, 1000, 1100)  # fmt: skip


def test_rss_growth_is_judged_after_start_up_against_the_steady_state():
    """Issue 25, point 5. As seen: every Python agent that lives ~25 s was flagged (8 MB before its
    imports, 99 MB after), so `inspect-session --strict` failed healthy runs."""
    healthy = series(rss_kb=[8_000, 8_000, 60_000, 99_000] + [99_000 + 200 * i for i in range(22)])  # 26 s
    assert kinds(healthy) == []
    leaking = series(
        rss_kb=[8_000, 60_000, 99_000, 99_000, 99_000, 99_000] + [99_000 + 9_000 * i for i in range(20)]
    )
    (growth,) = detect_process(leaking)  # doubling after start-up is still found
    assert growth.kind == "rss_growth" and growth.detail["initial_rss_kb"] == 99_000
    assert growth.first_ts >= "2026-01-01T00:00:05"  # judged from the steady state on
    assert (
        kinds(series(rss_kb=[8_000, 99_000, 99_000, 99_000, 99_000, 200_000])) == []
    )  # too short after start-up


def test_fd_high_above_80_percent_of_the_soft_limit():
    assert kinds(series(fds=[80, 80], fd_limit=[100, 100])) == []
    assert kinds(series(fds=[90, 90], fd_limit=[None, 0])) == []
    (high,) = detect_process(series(fds=[10, 81, 95, 10], fd_limit=[100, 100, 100, 100]))
    assert (high.kind, high.value, high.samples, high.detail) == (
        "fd_high", 0.95, 2, {"fd_count": 95, "fd_soft_limit": 100, "ratio": 0.95})  # fmt: skip


def test_sustained_d_state_needs_two_consecutive_samples():
    assert kinds(series(state=["disk-sleep"] * 3, wchan=["io_schedule", "0", "io_schedule"])) == []
    stuck = series(state=["disk-sleep"] * 3, wchan=["io_schedule"] * 3)
    assert [(a.kind, a.value) for a in detect_process(stuck)] == [("d_state_sustained", 3)]
    assert kinds(series(state=["disk-sleep"] * 3, wchan=["do_nanosleep"] * 3)) == []


def test_high_cpu_is_sustained_after_the_seeds_ten_seconds():
    # the seed's cadence (a sample every 5 s): two consecutive samples at >= 90 % are sustained
    (hot,) = detect_process(series(step=5, cpu_percent=[0.0, 90, 180.5, 10]))
    assert (hot.kind, hot.value, hot.threshold, hot.samples) == ("high_cpu_sustained", 180.5, 90, 2)
    assert hot.severity == "info"  # a busy agent is not a fault: inspect-session --strict passes it
    assert hot.detail == {"cpu_percent": 180.5, "consecutive_count": 2, "seconds": 10.0}
    assert kinds(series(step=5, cpu_percent=[0.0, 95, 50, 99, None, 92])) == []
    assert kinds(series(step=5, cpu_percent=[0.0, 89.9, 89.9, 89.9])) == []
    # every second (capsem's default): ten measured seconds, not two samples
    assert kinds(series(cpu_percent=[0.0] + [100] * 9 + [0.0])) == []  # 9 s
    (hot,) = detect_process(series(cpu_percent=[0.0] + [100] * 10 + [0.0]))  # 10 s
    assert (hot.samples, hot.first_ts, hot.last_ts) == (
        10,
        "2026-01-01T00:00:01.000000Z",
        "2026-01-01T00:00:10.000000Z",
    )
    # a 1-2 s script at full speed, sampled every 100 ms
    assert kinds(series(step=0.1, cpu_percent=[0.0] + [100.0] * 20)) == []
    # no sample before the run: measured from its first sample (the seed's first snapshot reads 0 %)
    assert kinds(series(cpu_percent=[100] * 10)) == []
    assert kinds(series(cpu_percent=[100] * 11)) == ["high_cpu_sustained"]
    assert kinds(series(cpu_percent=[0.0, 95, 95], ts=["bad", "bad", "bad"])) == []


def test_identity_drift_only_for_the_agent_process():
    exec_d = series(name=["bash", "bash", "node"])
    assert kinds(exec_d) == []
    (drift,) = detect_process(exec_d, is_agent=True)
    assert (drift.kind, drift.severity, drift.detail) == ("identity_drift", "info",
                                                           {"expected_comm": "bash", "actual_comm": "node"})  # fmt: skip


def test_detect_splits_processes_by_pid_and_start_time():
    first = series(pid=5, state=["zombie", "zombie"])
    recycled = [dict(s, started_at="2026-01-01T00:00:05.000000Z", ts=s["ts"].replace(":00:0", ":00:1"))
                for s in series(pid=5, state=["zombie"])]  # fmt: skip
    other = series(pid=6, oom_score=[100, 900])
    found = detect([*recycled, *other, *first])  # any order
    assert [(a.pid, a.kind, a.samples) for a in found] == [
        (5, "zombie_detected", 2), (6, "oom_spike", 2), (6, "oom_critical", 1), (5, "zombie_detected", 1)]  # fmt: skip
    assert detect([]) == []


def test_parsers_of_proc_files():
    status = "Name:\tx\nSigQ:\t0/1\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000200\nSigBlk:\t0000000000000200\n"
    assert parse_status_signals(status) == {"sig_pnd": "0000000000000200", "sig_blk": "0000000000000200"}
    assert parse_status_signals("garbage") == {}
    limits = "Limit  Soft Limit  Hard Limit  Units\nMax open files      1024      4096      files\n"
    assert parse_nofile_limit(limits) == 1024
    assert parse_nofile_limit(limits.replace("1024", "unlimited")) is None
    assert parse_nofile_limit("") is None


def test_summary_line():
    assert Diagnostics(12, 2).summary() == "process diagnostics: 12 samples of 2 processes, 0 anomalies"
    found = detect_process(series(state=["zombie"] * 3))
    assert Diagnostics(3, 1, found).summary() == (
        "process diagnostics: 3 samples of 1 process, 2 anomalies (zombie_detected, zombie_persistent)")  # fmt: skip
    assert "failed (busy)" in Diagnostics(error="busy").summary()


def test_settings_defaults_and_bad_values(capsem_home):
    assert diagnostics_settings().sample_interval_ms == 1000 and diagnostics_settings().enabled
    assert diagnostics_settings(parse({"diagnostics": {"sample_interval_ms": 250}})).sample_interval_ms == 250
    capsem_home.mkdir(parents=True, exist_ok=True)
    for bad in ("fast", 5, True, 1.5):
        (capsem_home / "config.yaml").write_text(f"diagnostics: {{sample_interval_ms: {bad}}}")
        with pytest.raises(RuntimeError, match=r"config\.yaml: diagnostics\.sample_interval_ms must be"):
            diagnostics_settings()
    (capsem_home / "config.yaml").write_text("capture: {preview_bytes: lots}")  # any bad setting stops `run`
    with pytest.raises(RuntimeError, match=r"capture\.preview_bytes"):
        diagnostics_settings()


def test_secrets_of_the_agent_environment_are_learned_but_paths_are_not():
    scrub = scrubber_for({"MY_SERVICE_TOKEN": "tok-plain-value-1234", "SSL_CERT_FILE": "/etc/ssl/ca.pem",
                          "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock", "HOME": "/root"}).scrub  # fmt: skip
    assert scrub("x --token tok-plain-value-1234") == f"x --token {scrub('tok-plain-value-1234')}"
    assert "tok-plain" not in scrub("tok-plain-value-1234")
    assert scrub("cat /etc/ssl/ca.pem /tmp/ssh-agent.sock") == "cat /etc/ssl/ca.pem /tmp/ssh-agent.sock"


# --- reading real processes ------------------------------------------------------------------


@linux_only
def test_reader_on_a_live_a_zombie_and_a_vanished_process():
    # it says so once it runs: Popen returns as exec begins, before the kernel has set its argv
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    assert child.stdout.readline() == b"up\n"
    reader = ProcessReader()
    proc = psutil.Process(child.pid)
    try:
        live = reader.read(proc, 0)
        assert live is not None
        assert live["pid"] == child.pid and live["ppid"] == os.getpid() and live["name"].startswith("python")
        assert live["rss_kb"] > 0 and live["threads"] >= 1 and live["fds"] >= 3 and live["fd_limit"] > 0
        assert live["oom_score"] >= 0 and live["sig_pnd"] == ZERO and live["cpu_percent"] is None
        assert "sys.stdin.read()" in live["cmdline"] and live["state"] in (
            "sleeping",
            "running",
            "disk-sleep",
        )
        assert reader.read(proc, 1)["cpu_percent"] is not None  # from the second sample on
        child.stdin.close()
        while proc.status() != psutil.STATUS_ZOMBIE:  # exited, not yet reaped by us
            time.sleep(0.01)
        zombie = reader.read(proc, 2)
        assert zombie["state"] == "zombie" and zombie["pid"] == child.pid
        assert zombie["cmdline"] == live["cmdline"]  # /proc reads an empty one now: the one it had
        assert ProcessReader().read(proc, 0)["cmdline"] is None  # (never seen alive: none)
    finally:
        child.kill()
        child.wait()
    assert reader.read(proc, 3) is None  # gone: no sample, no exception


@linux_only
def test_sampler_follows_the_tree_and_keeps_orphans(tmp_path):
    db = tmp_path / "session.db"
    marker = tmp_path / "grandchild.pid"
    # The child starts a grandchild that outlives it, then exits: the orphan stays watched.
    code = textwrap.dedent(f"""
        import subprocess, sys, time, pathlib
        g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        pathlib.Path({str(marker)!r}).write_text(str(g.pid))
        time.sleep(0.5)
    """)
    with recorder_thread(tmp_path):  # the samples go to the recorder, session.db's one writer
        child = subprocess.Popen([sys.executable, "-c", code])
        sampler = ProcessSampler(child.pid, db, interval_ms=50)
        sampler.start()
        child.wait()
        grandchild = int(marker.read_text())
        try:
            deadline = time.monotonic() + 30
            seen_after = 0
            while time.monotonic() < deadline and seen_after < 2:
                sampler.flush()
                seen_after = len(
                    rows(db, f"SELECT 1 FROM proc_samples WHERE pid = {grandchild} AND ppid != {child.pid}")
                )
                time.sleep(0.05)
            report = finish(sampler)
        finally:
            os.kill(grandchild, signal.SIGKILL)
    assert seen_after >= 2, "the orphaned grandchild was not followed"
    pids = {r["pid"] for r in rows(db, "SELECT DISTINCT pid FROM proc_samples")}
    assert pids == {child.pid, grandchild}
    assert report.error is None and report.samples == len(rows(db, "SELECT id FROM proc_samples"))
    assert report.processes == 2
    meta = {r["key"]: r["value"] for r in rows(db, "SELECT * FROM session_meta")}
    assert meta["procdiag_agent_pid"] == str(child.pid) and meta["procdiag_interval_ms"] == "50"


# --- `capsem run`, end to end ----------------------------------------------------------------

SYNC = """
import glob, os, sqlite3, time

def wait_for(sql, *params, timeout=90):
    \"\"\"Wait until the sampler has stored what `sql` asks for (the test paces itself on the samples).\"\"\"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        paths = glob.glob(os.path.join(os.environ["CAPSEM_HOME"], "sessions", "*", "session.db"))
        try:
            conn = sqlite3.connect(f"file:{paths[0]}?mode=ro", uri=True, timeout=5)
            try:
                if conn.execute(sql, params).fetchone()[0]:
                    return
            finally:
                conn.close()
        except (sqlite3.OperationalError, IndexError):
            pass  # table not there yet
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {sql} {params}")
"""

HOG = """
import os, resource, signal, sys
from sync import wait_for

me = os.getpid()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
wait_for("SELECT COUNT(*) >= 3 FROM proc_samples WHERE pid = ?", me)  # a baseline first
import time
time.sleep(max(0.0, 5.2 - (time.time() - __import__("psutil").Process().create_time())))  # past start-up
wait_for("SELECT COUNT(*) >= 1 FROM proc_samples WHERE pid = ? AND ts >= strftime('%Y-%m-%dT%H:%M:%f', 'now', "
         "'-0.05 seconds')", me)  # a steady-state sample before the ballast
ballast = b"x" * 64_000_000
files = [open(os.devnull) for _ in range(56 - len(os.listdir("/proc/self/fd")))]
with open("/proc/self/oom_score_adj", "w") as f:
    f.write("1000")
os.kill(me, signal.SIGUSR1)  # blocked: stays pending
wait_for("SELECT COUNT(*) >= 3 FROM proc_samples WHERE pid = ? AND rss_kb > 50000 AND fds >= 50 "
         "AND oom_score >= 800 AND sig_pnd != '0000000000000000'", me)
"""

AGENT = """
import json, os, pathlib, subprocess, sys, urllib.request
from sync import wait_for

emulator, hog, secret = sys.argv[1:]
# Like any agent, talk through the proxy first (the addon then commits its opening transaction).
proxy = urllib.request.ProxyHandler({"http": os.environ["HTTP_PROXY"]})
urllib.request.build_opener(proxy).open(emulator + "/v1/models", timeout=30).read()
zombie = os.fork()
if zombie == 0:
    os._exit(0)
child = subprocess.Popen([sys.executable, hog, "--api-key", "sk-ant-api03-PROCSECRET000000000000", secret])
wait_for("SELECT COUNT(*) >= 3 FROM proc_samples WHERE pid = ? AND state = 'zombie'", zombie)
pathlib.Path("pids.json").write_text(json.dumps({"zombie": zombie, "hog": child.pid}))
child.wait()
os.waitpid(zombie, 0)
sys.exit(child.returncode)
"""


def _write_agent(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "agent"
    folder.mkdir()
    (folder / "sync.py").write_text(SYNC)
    (folder / "hog.py").write_text(HOG)
    (folder / "agent.py").write_text(AGENT)
    return folder / "agent.py", folder / "hog.py"


@linux_only
@pytest.mark.timeout(180)
def test_run_samples_the_agent_tree_and_records_provoked_anomalies(emu, capsem_home, tmp_path, monkeypatch):
    capsem_home.mkdir(parents=True, exist_ok=True)
    (capsem_home / "config.yaml").write_text("diagnostics:\n  sample_interval_ms: 100\n")
    secret = "tok-plain-value-98765"  # no known shape: scrubbed because the agent's env holds it
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret)
    agent, hog = _write_agent(tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run("run", "--workspace", str(workspace), "--", sys.executable, str(agent), emu.http_url, str(hog),
        secret)  # fmt: skip
    pids = json.loads((workspace / "pids.json").read_text())
    zombie, hog_pid = pids["zombie"], pids["hog"]
    (session,) = json.loads(run("list-sessions", "--json"))
    db = capsem_home / "sessions" / session["id"] / "session.db"

    samples = rows(db, "SELECT * FROM proc_samples ORDER BY id")
    agent_pid = int(rows(db, "SELECT value FROM session_meta WHERE key = 'procdiag_agent_pid'")[0]["value"])
    assert {agent_pid, zombie, hog_pid} <= {s["pid"] for s in samples}
    hog_rows = [s for s in samples if s["pid"] == hog_pid]
    assert all(s["ppid"] == agent_pid for s in hog_rows)
    assert {s["fd_limit"] for s in hog_rows if s["fds"] >= 50} == {64}  # set after start
    assert max(s["rss_kb"] for s in hog_rows) > 50000
    assert any(s["sig_pnd"] != ZERO for s in hog_rows) and any(s["sig_blk"] != ZERO for s in hog_rows)
    cmdline = hog_rows[-1]["cmdline"]  # an early sample may catch it between fork and exec
    hidden = f"[redacted {hash_value('sk-ant-api03-PROCSECRET000000000000')}] [redacted {hash_value(secret)}]"
    assert cmdline.endswith(f"hog.py --api-key {hidden}")
    assert not [s for s in samples if "PROCSECRET" in (s["cmdline"] or "") or secret in (s["cmdline"] or "")]
    assert [s["state"] for s in samples if s["pid"] == zombie].count("zombie") >= 3
    assert all(s["ts"] and s["started_at"] and s["name"] for s in samples)

    anomalies = rows(db, "SELECT * FROM proc_anomalies ORDER BY id")
    by_pid: dict[int, set[str]] = {}
    for a in anomalies:
        by_pid.setdefault(a["pid"], set()).add(a["kind"])
    assert {"fd_high", "rss_growth", "oom_spike", "oom_critical", "signals_pending"} <= by_pid[hog_pid]
    assert by_pid[zombie] == {"zombie_detected", "zombie_persistent"}
    fd_high = next(a for a in anomalies if a["kind"] == "fd_high")
    assert (
        fd_high["threshold"] == 0.8 and fd_high["value"] > 0.8 and fd_high["first_ts"] <= fd_high["last_ts"]
    )
    assert json.loads(fd_high["detail"])["fd_soft_limit"] == 64
    # the hog's own (the agent can show a SIGCHLD pending: its zombie exiting while Popen's fork has
    # every signal blocked, and a sample can fall in that window)
    signals = next(a for a in anomalies if a["kind"] == "signals_pending" and a["pid"] == hog_pid)
    assert json.loads(signals["detail"])["signals"] == ["SIGUSR1"]
    assert session["status"] == "stopped"
    inspected = run("inspect-session", session["id"], "--strict", code=1)  # critical anomalies are errors
    assert "oom_critical anomaly in the agent's processes" in inspected and "fd_high" in inspected


def test_run_refuses_a_bad_sampling_interval(capsem_home):
    capsem_home.mkdir(parents=True, exist_ok=True)
    (capsem_home / "config.yaml").write_text("diagnostics:\n  sample_interval_ms: often\n")
    out = run("run", "--", sys.executable, "-c", "pass", code=1)
    assert "diagnostics.sample_interval_ms" in out and "'often'" in out
    assert not (capsem_home / "sessions").exists() or not any((capsem_home / "sessions").iterdir())
