"""A WebSocket's upgrade headers teach the scrubber their credentials before its turns are kept
(the upgrade's own row is written only when the socket ends)."""

from __future__ import annotations

import json

from addons.messages import WsMessage, WsOpened
from capsem.store.bodies import read_body
from tests.recording import RecorderHarness, ended, head, response

SESSION = "sess-9f8e7d6c5b4a3921"


def test_a_credential_of_the_upgrade_is_scrubbed_from_the_turns(tmp_path):
    h = RecorderHarness(tmp_path)
    ws = head("w1", started=1000.0, host="api.openai.com", method="GET", path="/v1/responses",
              headers=[("upgrade", "websocket"), ("session_id", SESSION)])  # fmt: skip
    h.feed(WsOpened(ws, response(101, None, started=1000.01)))
    create = {"type": "response.create", "model": "gpt-5", "input": "hi", "prompt_cache_key": SESSION}
    h.feed(WsMessage("w1", True, json.dumps(create).encode(), True, 1000.1))
    done = {"type": "response.completed", "response": {"id": "resp_1", "model": "gpt-5", "status": "completed",
            "output": [], "usage": {"input_tokens": 1, "output_tokens": 1}}}  # fmt: skip
    h.feed(WsMessage("w1", False, json.dumps(done).encode(), True, 1000.2))
    (call,) = h.rows("SELECT id FROM model_calls")  # the turn is written before the socket ends
    body, _ = read_body(h.writer.conn, call["id"])
    assert SESSION.encode() not in body and b"[redacted hash:" in body
    h.close(ended(ws, resp=response(101, None, started=1000.01), at=1001.0, websocket=True, close_code=1000))
    assert h.rows("SELECT conn_type FROM net_events") == [{"conn_type": "wss"}]
    h.shutdown()
