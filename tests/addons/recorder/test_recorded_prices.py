"""This year's models priced in recorded rows: the recorder (as in its own process) prices
claude-sonnet-5 and gemini-3.6-flash from the default table, config/genai-prices.json, and
names that table and its date in `price_source` and in `session_meta`."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from addons.messages import Route, Stop
from addons.recorder.main import finish, open_recorder, warm_up
from addons.spec import spec_of
from capsem.settings import defaults
from pricing import reset_table
from tests.conftest import rows
from tests.core.test_pricing import DEFAULT_SOURCE, data_prices
from tests.recording import RecorderHarness, ended, head, response


def _cost(p: dict, *, uncached: int, read: int = 0, write: int = 0, out: int) -> float:
    per_mtok = uncached * p["input_mtok"] + read * p.get("cache_read_mtok", 0) + out * p["output_mtok"]
    return float((per_mtok + write * p.get("cache_write_mtok", 0)) / 1_000_000)


def test_this_years_models_are_priced_when_recorded(tmp_path):
    reset_table()
    rec = RecorderHarness(tmp_path)
    now = time.time()
    claude = json.dumps({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-5",
        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 1000, "cache_read_input_tokens": 200, "cache_creation_input_tokens": 100,
                  "output_tokens": 50},
    }).encode()  # fmt: skip
    ask = json.dumps(
        {"model": "claude-sonnet-5", "max_tokens": 100, "messages": [{"role": "user", "content": "x"}]}
    )
    rec.close(ended(head("a", started=now), resp=response(200, started=now + 0.1), body=claude,
                    request_body=ask.encode(), route=Route("anthropic", "anthropic")))  # fmt: skip
    gemini = json.dumps({
        "candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 4000, "cachedContentTokenCount": 1000, "candidatesTokenCount": 900,
                          "thoughtsTokenCount": 100, "totalTokenCount": 5000},
        "modelVersion": "gemini-3.6-flash",
    }).encode()  # fmt: skip
    path = "/v1beta/models/gemini-3.6-flash:generateContent"
    rec.close(ended(head("g", started=now + 1, host="generativelanguage.googleapis.com", path=path),
                    resp=response(200, started=now + 1.1), body=gemini,
                    request_body=b'{"contents": [{"role": "user", "parts": [{"text": "x"}]}]}',
                    route=Route("google", "gemini", "gemini-3.6-flash")))  # fmt: skip
    calls = {c["model"]: c for c in rec.rows("SELECT * FROM model_calls")}
    rec.shutdown()
    at = datetime.fromtimestamp(now, UTC)
    sonnet, flash = calls["claude-sonnet-5"], calls["gemini-3.6-flash"]
    assert sonnet["input_tokens"] == 1300 and flash["input_tokens"] == 4000 and flash["output_tokens"] == 1000
    want = {
        "claude-sonnet-5": _cost(data_prices("anthropic", "claude-sonnet-5", at), uncached=1000, read=200,
                                 write=100, out=50),
        "gemini-3.6-flash": _cost(data_prices("google", "gemini-3.6-flash", at), uncached=3000, read=1000,
                                  out=1000),
    }  # fmt: skip
    for model, call in calls.items():
        assert abs(call["estimated_cost_usd"] - want[model]) < 1e-12 and want[model] > 0, model
        assert call["price_source"].startswith(DEFAULT_SOURCE), call["price_source"]
        assert json.loads(call["cost_details"])["model_id"] == model


def test_the_recorder_names_its_price_table_in_session_meta(tmp_path):
    reset_table()
    spec = spec_of(defaults().capture, session_id="s1", db_path=str(tmp_path / "session.db"),
                   main_db_path=str(tmp_path / "main.db"), mode="mitmdump")  # fmt: skip
    loop = open_recorder(spec)
    warm_up(loop)  # on a thread, beside the loop; the session's end waits for it
    finish(loop, Stop())
    (meta,) = rows(tmp_path / "session.db", "SELECT value FROM session_meta WHERE key = 'price_source'")
    assert meta["value"].startswith(DEFAULT_SOURCE)
