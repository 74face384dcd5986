"""The banner of waiting requests on every page of `capsem view`, and its one state-changing
endpoint.

`GET /approvals.json` lists what waits in the running sessions (assembler/approvals.py);
`POST /approvals/{id}` answers one. That POST is the only request of the view that changes
anything, so it is guarded on every side: the app already answers only requests whose Host is a
loopback name (TrustedHostMiddleware in app.py, against DNS rebinding); the POST must carry the
random token this server put in its pages (`x-capsem-token`), so another site's page, which can
send a POST but cannot read ours, cannot forge one; an `Origin`, when sent, must be this server;
nothing answers with CORS headers; any other method is refused. An answer given here is recorded
as decided by `view`.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TOKEN_HEADER = "x-capsem-token"


class ApprovalRoutes:
    """The routes, with the token of this server (embedded in every page it renders)."""

    def __init__(self, allowed_hosts: list[str]) -> None:
        self.token = secrets.token_urlsafe(24)
        self.allowed_hosts = allowed_hosts

    @property
    def routes(self) -> list[Route]:
        return [
            Route("/approvals.json", self.listing, methods=["GET"]),
            Route("/approvals/{aid}", self.answer, methods=["POST"]),
        ]

    async def listing(self, request: Request) -> Response:
        from assembler.approvals import waiting_requests

        waiting, problems = await run_in_threadpool(waiting_requests)
        return JSONResponse({"waiting": [w.as_dict() for w in waiting], "problems": problems},
                            headers={"cache-control": "no-store"})  # fmt: skip

    async def answer(self, request: Request) -> Response:
        from assembler.approvals import ApprovalError, decide

        if not hmac.compare_digest(request.headers.get(TOKEN_HEADER, ""), self.token):
            return JSONResponse({"error": "missing or wrong token"}, status_code=403)
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).hostname not in self._hosts():
            return JSONResponse({"error": f"requests from {origin} are refused"}, status_code=403)
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "the body must be JSON"}, status_code=400)
        decision = body.get("decision") if isinstance(body, dict) else None
        if decision not in ("approve", "deny"):
            return JSONResponse({"error": "decision must be approve or deny"}, status_code=400)
        reason = body.get("reason") or None
        try:
            done = await run_in_threadpool(decide, request.path_params["aid"], decision == "approve", "view",
                                           str(reason) if reason else None, bool(body.get("always")))  # fmt: skip
        except ApprovalError as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        return JSONResponse({"ok": True, "id": done.id, "decision": decision, "target": done.target})

    def _hosts(self) -> set[str]:
        return {h.strip("[]") for h in self.allowed_hosts}
