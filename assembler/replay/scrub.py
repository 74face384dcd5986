"""A request scrubbed as the recorder scrubbed the one it stored, so that the two compare.

The recorder learns the credentials of a flow's headers (`capsem.redact.carries_credential`:
authorization, cookies, session and secret-named headers), then scrubs a request segment by
segment (`capsem.store.bodies.segments`). This does the same with the configured secret
rules, remembering segments already scrubbed (an agent resends its history every turn).
"""

from __future__ import annotations

import logging

from capsem.redact import Scrubber, learn_credentials
from capsem.store.bodies import segments

logger = logging.getLogger(__name__)


def _scrubber() -> Scrubber:
    try:
        from capsem.redact import scrubber_for
        from capsem.settings import load

        return scrubber_for(load().capture)
    except Exception as exc:  # a bad setting: the default rules still scrub what the recorder did
        logger.warning(
            "capsem replay: the configured secret rules could not be read (%r): the default ones are used",
            exc,
        )
        return Scrubber()


class RequestScrubber:
    """Learns the credentials of a request's headers (`learn`), and scrubs a request's JSON values
    (`__call__`: see `assembler.replay.match.Scrub`) segment by segment, as the recorder does."""

    def __init__(self, scrubber: Scrubber | None = None) -> None:
        self.scrubber = scrubber or _scrubber()

    @property
    def generation(self) -> int:
        return self.scrubber.generation

    def learn(self, headers: dict[str, str]) -> None:
        learn_credentials(headers.items(), self.scrubber)

    def __call__(self, data: bytes) -> bytes:
        scrub = self.scrubber.scrub
        return b"".join((scrub(s.decode("utf-8", "surrogateescape")) or "").encode("utf-8", "surrogateescape")
                        for s in segments(data))  # fmt: skip
