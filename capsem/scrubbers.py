"""The scrubber for texts a command stores outside the recorder (main.db's session names and tags,
its command lines, log lines): the one `capsem.redact.Scrubber` with this installation's rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capsem.redact import Scrubber


def configured_scrubber() -> Scrubber:
    """A scrubber with this installation's redaction rules (`redaction.rules`, `disabled_rules`);
    the shipped rules when the settings cannot be read."""
    from capsem.redact import Scrubber, scrubber_for

    try:
        from capsem.settings import load

        return scrubber_for(load().capture)
    except Exception:
        return Scrubber()
