"""`capsem run` tells the person at the agent's terminal when an `ask` rule holds a request.

mitmdump holds the request (addons/proxy/approvals.py) and lists it on its approvals channel
(capsem/approval_wire.py); a thread of `capsem run` looks at that channel a few times a second and
prints one line per newly held request: what waits, under which rule, and the two commands that
answer it. A session whose rules never asked has no channel: the look is one missing file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from assembler.approvals import WaitingRequest
from assembler.cli_support import capsem_command
from capsem.approval_wire import ChannelError, call, read_channel
from capsem.paths import session_dir

INTERVAL_S = 0.25


def notice(w: WaitingRequest, capsem: str = "capsem") -> str:
    """The one line printed for a held request (its path was scrubbed by mitmdump's listing)."""
    return (f"capsem: rule {w.rule!r} holds {w.target} for a person: "
            f"{capsem} approve {w.id}  or  {capsem} deny {w.id}")  # fmt: skip


class AskNotices:
    """Prints `notice` once for each request the session's mitmdump holds, while `capsem run` runs."""

    def __init__(self, session_id: str, say: Callable[[str], None]) -> None:
        self.session_id = session_id
        self.say = say
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="capsem-ask-notices", daemon=True)
        self._capsem = capsem_command()

    def start(self) -> AskNotices:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    def poll(self) -> None:
        """Look once: print a line for each request held since the last look."""
        channel = read_channel(self.session_id, session_dir(self.session_id))
        if channel is None:
            return
        try:
            reply = call(channel, {"op": "list"}, timeout=1.0)
        except ChannelError:
            return  # mitmdump is stopping, or busy: the next look tells
        for item in reply.get("waiting") or [] if reply.get("ok") else []:
            waiting = WaitingRequest.of(self.session_id, item)
            if waiting.id not in self.seen:
                self.seen.add(waiting.id)
                self.say(notice(waiting, self._capsem))

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            try:
                self.poll()
            except Exception:  # never let a notice take `capsem run` down
                continue
