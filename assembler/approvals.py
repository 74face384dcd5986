"""The requests an `ask` rule holds, across every running session, and the answers to them.

Each running mitmdump that holds a request has an approvals channel (`capsem/approval_wire.py`):
the running sessions are found in main.db, their channels in their directories. `capsem
approvals|approve|deny` (approvals_cli.py) and the banner of `capsem view` call these functions.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from assembler.sessiondb import MainDbMissing, open_main
from capsem.approval_wire import Channel, ChannelError, Listed, call, read_channel
from capsem.paths import session_dir


class ApprovalError(Exception):
    """An answer that could not be given (no such request, the session is gone)."""


@dataclass(frozen=True, slots=True)
class WaitingRequest(Listed):
    """One held request, as its mitmdump lists it (arguments already scrubbed there), and its session."""

    session_id: str = ""

    @classmethod
    def of(cls, session_id: str, item: dict[str, Any]) -> WaitingRequest:
        return cls(**Listed.fields_of(item), session_id=session_id)

    @property
    def target(self) -> str:
        """`MCP files › run_shell`, `POST api.example.com/upload` (the port when not 80 or 443), or
        `tool Bash in POST api.anthropic.com/v1/messages` (a tool call in a model's answer, held by a
        tool rule: no MCP server)."""
        if self.tool is not None and self.mcp_server is not None:
            return f"MCP {self.mcp_server} › {self.tool}"
        port = "" if self.port in (80, 443) else f":{self.port}"
        request = f"{self.method} {self.host}{port}{self.path}"
        return f"tool {self.tool} in {request}" if self.tool is not None else request

    @property
    def process(self) -> str:
        if self.process_name is None and self.pid is None:
            return "unknown process"
        return (
            f"{self.process_name or '?'} (pid {self.pid})" if self.pid is not None else str(self.process_name)
        )

    def as_dict(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out["target"], out["process"] = self.target, self.process
        if self.arguments:
            try:
                out["arguments"] = json.loads(self.arguments)
            except ValueError:
                pass
        return out


def running_channels() -> list[Channel]:
    """The approvals channels of the running sessions (a session that never asked has none)."""
    try:
        with open_main() as main:
            ids = [
                r[0]
                for r in main.execute("SELECT id FROM sessions WHERE status = 'running' ORDER BY created_at")
            ]
    except MainDbMissing:
        return []
    found = [c for sid in ids if (c := read_channel(sid, session_dir(sid))) is not None]
    return [c for c in found if c.pid is None or _alive(c.pid)]  # a mitmdump killed left its file behind


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True


def waiting_requests() -> tuple[list[WaitingRequest], list[str]]:
    """What waits in every running session, oldest first; and the sessions that could not be asked."""
    found: list[WaitingRequest] = []
    problems: list[str] = []
    for channel in running_channels():
        try:
            reply = call(channel, {"op": "list"})
        except ChannelError as exc:
            problems.append(str(exc))
            continue
        if not reply.get("ok"):
            problems.append(f"session {channel.session_id}: {reply.get('error')}")
            continue
        found += [WaitingRequest.of(channel.session_id, item) for item in reply.get("waiting") or []]
    return sorted(found, key=lambda w: w.asked_at), problems


def decide(
    approval_id: str, approve: bool, by: str, reason: str | None = None, always: bool = False
) -> WaitingRequest:
    """Answer the request waiting as `approval_id` in whichever running session holds it.

    Raises:
        ApprovalError: nothing waits under that id, or its mitmdump refused the answer.
    """
    waiting, problems = waiting_requests()
    match = next((w for w in waiting if w.id == approval_id), None)
    if match is None:
        known = ", ".join(w.id for w in waiting) or "none"
        extra = f" ({'; '.join(problems)})" if problems else ""
        raise ApprovalError(f"no request waits as {approval_id!r} (waiting now: {known}){extra}")
    channel = next(c for c in running_channels() if c.session_id == match.session_id)
    request = {"op": "decide", "id": approval_id, "decision": "approve" if approve else "deny", "by": by,
               "reason": reason, "always": always}  # fmt: skip
    try:
        reply = call(channel, request)
    except ChannelError as exc:
        raise ApprovalError(str(exc)) from exc
    if not reply.get("ok"):
        raise ApprovalError(f"session {match.session_id}: {reply.get('error')}")
    return match
