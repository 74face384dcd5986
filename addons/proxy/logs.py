"""mitmdump's output through the one scrubber (`capsem/log_scrub.py`), last in the chain.

Every log line of the process, capsem's and mitmproxy's alike, reaches mitmproxy's terminal log
(its handler on the root logger, which writes mitmdump's stdout: the session's `mitmdump.log`
under `capsem run`) scrubbed, with the configured redaction rules once the settings are read.
mitmproxy's flow lines (`flow_detail` 1 and up: method, URL with its query, headers, bodies) are
printed by its `dumper` addon without the logging module: its output stream is wrapped so they
are scrubbed too. `capsem run` starts mitmdump with `flow_detail=0` (no flow lines at all: the
session's database holds every flow).
"""

from __future__ import annotations

from collections.abc import Callable

from capsem.log_scrub import ScrubbedStream, scrub_logs
from capsem.settings import Settings


class ScrubbedLogs:
    """Installs the process's scrubbing filter when loaded (and again when running: a handler
    added meanwhile gets it too), gives it the configured rules, and wraps the flow lines' stream.
    Last in the chain, so that its `configure` sees the settings `Capsem.configure` has just read."""

    def __init__(self, settings: Callable[[], Settings]) -> None:
        self.settings = settings
        self._configured: Settings | None = None

    def load(self, loader: object) -> None:
        scrub_logs(uncaught=True)

    def configure(self, updated: set[str]) -> None:
        settings = self.settings()
        if settings is not self._configured:
            from capsem.redact import scrubber_for

            self._configured = settings
            scrub_logs(scrubber_for(settings.capture), uncaught=True)

    def running(self) -> None:
        from mitmproxy import ctx

        scrubbing = scrub_logs(uncaught=True)
        dumper = ctx.master.addons.get("dumper")
        out = getattr(dumper, "outfp", None)
        if out is not None and not isinstance(out, ScrubbedStream):
            dumper.outfp = ScrubbedStream(out, scrubbing.scrub)
