"""Benchmarks of capsem against plain mitmproxy (`make bench`, `python -m benchmarks [--quick]`).

Two suites:

- `streaming`: long Anthropic-shaped SSE responses from a local upstream (`upstream.py`), paced
  like a model and unpaced, fetched by a timing client (`client.py`) directly and through four
  mitmdump set-ups (`proxies.py`); time to first byte, total time, per-event delivery lag, and
  mitmdump's CPU seconds and peak memory.
- `micro`: SSE framing and provider parsing throughput, the session writer's rows/s, and the
  memory of one 200 MiB streamed response read by the addon's `ResponseReader` (`memory.py`).

`report.py` turns both into the markdown written to `benchmarks/results/latest.md` (and the raw
numbers to `latest.json`). Benchmarks never run under `make test`; see docs/PERFORMANCE.md.
"""
