"""The bench's CPU ratio within each repetition (`benchmarks/report.py: paired_cpu`)."""

from __future__ import annotations

import pytest

from benchmarks.report import paired_cpu


def _run(rep: int, scenario: str, cpu: float | None, profile: str = "unpaced", concurrency: int = 1) -> dict:
    return {"rep": rep, "scenario": scenario, "cpu_s": cpu, "profile": profile, "concurrency": concurrency}


def test_capsem_over_streaming_mitmdump_in_each_repetition_then_the_median():
    runs = [
        _run(0, "stream", 0.10), _run(0, "capsem", 0.15), _run(0, "default", 9.0),
        _run(1, "stream", 0.20), _run(1, "capsem", 0.26),  # the machine slower: the same ratio, nearly
        _run(2, "stream", 0.10), _run(2, "capsem", 0.16),
        _run(3, "capsem", 0.50),  # its pair is missing: left out
        _run(4, "stream", None), _run(4, "capsem", 0.10),  # no CPU measured: left out
        _run(0, "stream", 1.0, concurrency=20), _run(0, "capsem", 9.0, concurrency=20),  # another cell
    ]  # fmt: skip
    assert paired_cpu(runs, "unpaced", 1) == pytest.approx(1.5)  # the median of 1.5, 1.3 and 1.6
    assert paired_cpu(runs, "unpaced", 20) == pytest.approx(9.0)
    assert paired_cpu(runs, "paced", 1) is None
