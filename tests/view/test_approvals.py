"""The view's one state-changing endpoint (`POST /approvals/{id}`) in-process: the addon holds a
real request on its own event loop (a thread), the app is Starlette's TestClient. A POST without
this server's token, with another one, from another origin, or by another method is refused and
the request still waits; the banner's JSON carries no CORS header; the page embeds the token (and
an exported page does not); the right POST answers it, recorded as decided by `view`.
Clicking the banner's button in real Chromium: tests/e2e/test_ask.py."""

from __future__ import annotations

import asyncio
import re
import threading
import time

from mitmproxy.test import tflow, tutils
from starlette.testclient import TestClient

from addons.proxy.capture import Capsem
from addons.recorder.thread import RecorderThread
from assembler.view.app import View, create_app
from tests.addons.proxy.conftest import finish, started
from tests.conftest import rows


def test_only_a_post_with_the_pages_token_from_loopback_answers(capsem_home):
    capsem_home.mkdir(parents=True, exist_ok=True)
    (capsem_home / "config.yaml").write_text(
        "policy:\n  rules:\n    - {name: ask-x, action: ask, host: x.test}\n"
    )
    with started(Capsem(recorder=RecorderThread)) as addon:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        flow = tflow.tflow(req=tutils.treq(host="x.test", port=443, path=b"/upload"), resp=False)
        held = asyncio.run_coroutine_threadsafe(
            addon.requestheaders(flow), loop
        )  # the chain: held by PolicyGate
        end = time.monotonic() + 30
        while not addon.approvals.waiting:
            assert time.monotonic() < end
            time.sleep(0.01)
        try:
            with TestClient(create_app(), base_url="http://127.0.0.1") as client:
                page = client.get("/").text
                token = re.search(r'<meta name="capsem-token" content="([^"]+)">', page)[1]
                assert 'id="approvals"' in page and "/static/approvals.js" in page
                listing = client.get("/approvals.json")
                (item,) = listing.json()["waiting"]
                assert "access-control-allow-origin" not in listing.headers
                url, body = f"/approvals/{item['id']}", {"decision": "deny", "reason": "no"}
                refused = [
                    client.post(url, json=body),
                    client.post(url, json=body, headers={"x-capsem-token": "guess"}),
                    client.post(
                        url, json=body, headers={"x-capsem-token": token, "origin": "http://evil.test"}
                    ),
                    client.post(url, json=body, headers={"x-capsem-token": token, "host": "evil.test"}),
                    client.get(url, headers={"x-capsem-token": token}),
                ]
                assert [r.status_code for r in refused] == [403, 403, 403, 400, 405]
                assert all("access-control-allow-origin" not in r.headers for r in refused)
                assert not held.done() and len(addon.approvals.waiting) == 1  # still waits
                bad = client.post(url, json={"decision": "maybe"}, headers={"x-capsem-token": token})
                assert bad.status_code == 400
                answered = client.post(url, json=body, headers={"x-capsem-token": token,
                                                                "origin": "http://127.0.0.1"})  # fmt: skip
                assert answered.status_code == 200 and answered.json()["ok"] is True
                gone = client.post(url, json=body, headers={"x-capsem-token": token})
                assert gone.status_code == 409 and "no request waits" in gone.json()["error"]
            held.result(30)
            assert flow.response.status_code == 403
        finally:
            asyncio.run_coroutine_threadsafe(_stop(addon), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        flow.response.timestamp_end = flow.request.timestamp_end
        addon.response(flow)
        db = finish(addon, capsem_home)
    (row,) = rows(db, "SELECT decision, decided_by, reason FROM approvals")
    assert row == {"decision": "denied", "decided_by": "view", "reason": "no"}
    exported = View().export(db.parent.name)
    assert "capsem-token" not in exported and 'id="approvals"' not in exported


async def _stop(addon: Capsem) -> None:
    addon.approvals.stop()  # closes the channel on its own loop
