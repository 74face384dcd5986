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
    record_anomalies,
    scrubber_for,
)

__all__ = ["Anomaly", "Diagnostics", "DiagnosticsSettings", "ProcessSampler", "detect", "detect_process",
           "diagnostics_settings", "finish", "record_anomalies", "scrubber_for"]  # fmt: skip
