"""Process diagnostics for `capsem run`: the agent's process tree sampled into session.db
(`proc_samples`), and the seed's anomalies detected at session end (`proc_anomalies`).

`sample` reads one process (psutil and /proc, degrading to NULLs), `detect` is the pure anomaly
detector, `anomalies` finds those a session.db does not hold yet, `sampler` runs the sampling
thread and sends its rows to the recorder (session.db's one writer). The offline anomaly pass
is `assembler/offline_write.py: record_anomalies`.
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

__all__ = ["Anomaly", "Diagnostics", "DiagnosticsSettings", "ProcessSampler", "detect", "detect_process",
           "diagnostics_settings", "finish", "scrubber_for"]  # fmt: skip
