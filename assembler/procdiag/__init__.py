"""Process diagnostics for `capsem run`: the agent's process tree sampled into session.db
(`proc_samples`), and the seed's anomalies detected at session end (`proc_anomalies`).

`sample` reads one process (psutil and /proc, degrading to NULLs), `detect` is the pure anomaly
detector, `sampler` runs the sampling thread and stores the results.
"""

from assembler.procdiag.detect import Anomaly, detect, detect_process
from assembler.procdiag.sampler import (
    Diagnostics,
    DiagnosticsSettings,
    ProcessSampler,
    diagnostics_settings,
    finish,
    scrubber_for,
)


def record_anomalies(db_path, *, agent_pid=None):  # type: ignore[no-untyped-def]
    """`assembler/offline_write.py: record_anomalies` (imported when called: it loads the writer)."""
    from assembler.offline_write import record_anomalies

    return record_anomalies(db_path, agent_pid=agent_pid)


__all__ = ["Anomaly", "Diagnostics", "DiagnosticsSettings", "ProcessSampler", "detect", "detect_process",
           "diagnostics_settings", "finish", "record_anomalies", "scrubber_for"]  # fmt: skip
