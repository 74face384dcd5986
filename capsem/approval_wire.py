"""The approvals channel's wire format, shared by the proxy (which serves it) and the CLI and the
view (which call it).

A mitmdump whose policy holds a request for a person (an `ask` rule) listens on a loopback TCP
port and writes `approvals.json` (`{"port", "token", "pid"}`, mode 0600) into its session's
directory. A caller connects to 127.0.0.1:port, sends one JSON line and reads one JSON line back:

    {"token": T, "op": "list"}                        -> {"ok": true, "waiting": [ {...}, ... ]}
    {"token": T, "op": "decide", "id": ID, "decision": "approve" | "deny",
     "by": "cli" | "view", "reason": "...", "always": false}
                                                      -> {"ok": true} | {"ok": false, "error": "..."}

Trust model: the port is bound to 127.0.0.1 only, so no other machine reaches it; the token is
random per mitmdump and readable only by the user who runs it (the file is 0600 in a session
directory under $CAPSEM_HOME). Any process of that user can read it, the agent included: `ask`
guards against an agent's mistakes, not against a hostile agent running as the same user.
A browser cannot forge a call either: it does not know the token, and the channel speaks no HTTP.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHANNEL_FILE = "approvals.json"
MAX_LINE = 1 << 20
"""The longest line either side accepts (a listing of many waiting calls with their arguments)."""
BY = ("cli", "view")
"""Who may decide through the channel (the proxy itself decides by `rule`, `timeout`, `shutdown`)."""


class ChannelError(Exception):
    """The channel could not be reached or refused the call (the message says which and why)."""


@dataclass(frozen=True, slots=True)
class Channel:
    """Where one running mitmdump's approvals channel listens."""

    session_id: str
    port: int
    token: str
    pid: int | None = None


@dataclass(frozen=True, slots=True)
class Listed:
    """One held request as the channel lists it (`list`): its path and arguments already scrubbed
    by the proxy's scrubber."""

    id: str
    rule: str
    method: str
    host: str
    port: int
    path: str
    waiting_s: float
    asked_at: float
    mcp_server: str | None = None
    tool: str | None = None
    arguments: str | None = None
    process_name: str | None = None
    pid: int | None = None

    @staticmethod
    def fields_of(item: dict[str, Any]) -> dict[str, Any]:
        """The listed fields of a JSON item (anything else it holds is left out)."""
        return {k: v for k, v in item.items() if k in Listed.__dataclass_fields__}


def write_channel(directory: Path, port: int, token: str) -> Path:
    """`approvals.json` in `directory`, created 0600 (never readable by other users, even briefly)."""
    path = directory / CHANNEL_FILE
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"port": port, "token": token, "pid": os.getpid()}, out)
    os.replace(tmp, path)
    return path


def read_channel(session_id: str, directory: Path) -> Channel | None:
    """The channel of the session in `directory`, or None when it has none (no `ask` rule fired)."""
    try:
        data = json.loads((directory / CHANNEL_FILE).read_text())
        return Channel(session_id, int(data["port"]), str(data["token"]), data.get("pid"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def call(channel: Channel, request: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """Send one request and return the answer. Raises ChannelError naming the session."""
    line = json.dumps({**request, "token": channel.token}).encode() + b"\n"
    try:
        with socket.create_connection(("127.0.0.1", channel.port), timeout=timeout) as sock:
            sock.sendall(line)
            answer = sock.makefile("rb").readline(MAX_LINE)
    except OSError as exc:
        raise ChannelError(
            f"session {channel.session_id}: its approvals channel did not answer ({exc})"
        ) from exc
    try:
        reply = json.loads(answer)
    except ValueError as exc:
        raise ChannelError(f"session {channel.session_id}: its approvals channel sent no answer") from exc
    if not isinstance(reply, dict):
        raise ChannelError(f"session {channel.session_id}: its approvals channel sent {reply!r}")
    return reply
