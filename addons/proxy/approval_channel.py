"""The approvals channel: a small asyncio server on mitmproxy's event loop, on 127.0.0.1 only,
through which `capsem approvals|approve|deny` and `capsem view` list and answer the requests an
`ask` rule holds (`approvals.py`). The wire format and the trust model: `capsem/approval_wire.py`.

Each connection carries one JSON line each way; a caller without the token, or one that speaks
anything else (a browser's HTTP), gets an error line and is closed. Nothing here blocks the loop:
the answers are set on futures the held flows await.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capsem.approval_wire import BY, CHANNEL_FILE, MAX_LINE, write_channel

if TYPE_CHECKING:
    from addons.proxy.approvals import Approvals

logger = logging.getLogger("addons.proxy.capture")
READ_TIMEOUT_S = 5.0


class ApprovalChannel:
    """The listening socket, its token and the file that tells callers where to find them."""

    def __init__(self, desk: Approvals, sock: socket.socket, token: str, path: Path) -> None:
        self.desk, self.sock, self.token, self.path = desk, sock, token, path
        self.server: asyncio.Server | None = None
        self.task = asyncio.get_running_loop().create_task(self._serve())

    @classmethod
    def open(cls, desk: Approvals, directory: Path) -> ApprovalChannel:
        """Listen on 127.0.0.1 (a port the system picks) and write `approvals.json` in `directory`."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.setblocking(False)
        token = secrets.token_urlsafe(24)
        path = write_channel(directory, sock.getsockname()[1], token)
        return cls(desk, sock, token, path)

    async def _serve(self) -> None:
        self.server = await asyncio.start_server(self._handle, sock=self.sock, limit=MAX_LINE)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
            reply = self.answer(line)
        except Exception as exc:  # a line too long, a caller that never finishes: tell it and close
            reply = {"ok": False, "error": f"bad request: {exc.__class__.__name__}"}
        try:
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    def answer(self, line: bytes) -> dict[str, Any]:
        """The reply to one request line."""
        try:
            request = json.loads(line)
        except ValueError:
            return {"ok": False, "error": "not a JSON request"}
        if not isinstance(request, dict) or not hmac.compare_digest(
            str(request.get("token", "")), self.token
        ):
            return {"ok": False, "error": "wrong token"}
        op = request.get("op")
        if op == "list":
            return {"ok": True, "waiting": self.desk.listing()}
        if op == "decide":
            by, decision = request.get("by"), request.get("decision")
            if by not in BY or decision not in ("approve", "deny"):
                return {"ok": False, "error": f"decide needs by in {BY} and decision approve|deny"}
            reason = request.get("reason")
            error = self.desk.decide(str(request.get("id")), decision == "approve", by,
                                     str(reason) if reason else None, bool(request.get("always")))  # fmt: skip
            return {"ok": True} if error is None else {"ok": False, "error": error}
        return {"ok": False, "error": f"unknown op {op!r} (list, decide)"}

    def close(self) -> None:
        """Stop listening and remove `approvals.json` (callers then see no channel)."""
        if self.server is not None:
            self.server.close()
        else:
            self.task.cancel()
            self.sock.close()
        with contextlib.suppress(OSError):
            if self.path.name == CHANNEL_FILE:
                self.path.unlink()
