"""A request scrubbed as the recorder scrubbed the one it stored, so that the two compare.

The recorder learns the credentials of a flow's headers (`capsem.redact.carries_credential`:
authorization, cookies, session and secret-named headers), then scrubs a request segment by
segment (`addons.recorder.bodies.segments`). This does the same with the configured secret
rules, remembering segments already scrubbed (an agent resends its history every turn).
"""

from __future__ import annotations

import hashlib
import logging

from addons.recorder.bodies import segments
from capsem.redact import Scrubber, carries_credential

logger = logging.getLogger(__name__)

_KEPT = 100_000
"""Scrubbed segments remembered before the memory starts over."""


def _scrubber() -> Scrubber:
    try:
        from capsem.redact import scrubber_for
        from capsem.settings import load

        return scrubber_for(load().capture)
    except Exception as exc:  # a bad setting: the default rules still scrub what the recorder did
        logger.warning("capsem replay: the configured secret rules could not be read (%r): the default ones are used", exc)
        return Scrubber()


class BodyScrubber:
    """`__call__(body, headers)`: learns the headers' credentials, returns the body scrubbed."""

    def __init__(self, scrubber: Scrubber | None = None) -> None:
        self.scrubber = scrubber or _scrubber()
        self._done: dict[bytes, bytes] = {}
        self._generation = self.scrubber.generation

    def __call__(self, body: bytes, headers: dict[str, str]) -> bytes:
        for name, value in headers.items():
            if carries_credential(name):
                self.scrubber.learn(value)
                if name == "cookie":
                    for part in value.split(";"):
                        self.scrubber.learn(part.partition("=")[2])
        if self.scrubber.generation != self._generation or len(self._done) > _KEPT:
            self._done.clear()
            self._generation = self.scrubber.generation
        return b"".join(map(self._segment, segments(body)))

    def _segment(self, segment: bytes) -> bytes:
        key = hashlib.sha256(segment).digest()[:16]
        done = self._done.get(key)
        if done is None:
            text = segment.decode("utf-8", "surrogateescape")
            done = (self.scrubber.scrub(text) or "").encode("utf-8", "surrogateescape")
            self._done[key] = done
        return done
