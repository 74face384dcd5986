"""Detection through real mitmdump and real SDKs: body-shape sniffing on unknown paths (the rest of
detection, in-process: tests/addons/proxy/test_flows.py)."""

from __future__ import annotations

import anthropic
import openai

from tests.conftest import rows
from tests.e2e.test_capture_sdk import ANTHROPIC_KEY, OPENAI_KEY, finish, http_client, model_exchanges


def test_unknown_gateway_paths_detected_by_body_shape(mitmdump, emu, capsem_home):
    proxy = mitmdump()
    claude = anthropic.Anthropic(api_key=ANTHROPIC_KEY, base_url=emu.http_url,
                                 http_client=http_client(proxy), max_retries=0)  # fmt: skip
    # a gateway on a path no provider uses: raw SDK posts to it
    claude.post("/gateway/anthropic", cast_to=object, body={"model": "claude-haiku-4-5", "max_tokens": 20,
                "system": "s", "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    gpt = openai.OpenAI(
        api_key=OPENAI_KEY, base_url=emu.http_url, http_client=http_client(proxy), max_retries=0
    )
    gpt.post("/gateway/openai", cast_to=object, body={"model": "local-llama", "messages": [
        {"role": "user", "content": "hi"}]})  # fmt: skip
    db = finish(proxy, capsem_home)
    calls = rows(db, "SELECT provider, protocol, model, path, text_content, estimated_cost_usd FROM model_calls "
                     "ORDER BY id")  # fmt: skip
    exchanges = model_exchanges(emu)
    assert [(c["provider"], c["protocol"], c["model"], c["path"]) for c in calls] == [
        ("unknown", "anthropic", "claude-haiku-4-5", "/gateway/anthropic"),
        ("unknown", "openai_chat", "local-llama", "/gateway/openai")]  # fmt: skip
    assert [c["text_content"] for c in calls] == [e["expected"]["text"] for e in exchanges]
    assert all(c["estimated_cost_usd"] is None for c in calls)  # an unknown provider is never priced
