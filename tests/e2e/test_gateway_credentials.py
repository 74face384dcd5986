"""Issue 35, item 10: a brokered key for an Anthropic- or OpenAI-compatible gateway on a host of its
own. The anthropic SDK sends the key in `x-api-key` (or `Authorization: Bearer` with an auth token),
the openai SDK in `Authorization: Bearer`; an entry could name one header only, so one of them was
always refused. `header:` now takes a list: `config check` accepts it, `config show` prints it, and
through `capsem run --broker` (real mitmdump, the real SDKs, the emulator upstream playing the
gateway) every SDK's request reaches the gateway with the real key, which no file under
CAPSEM_HOME holds."""

from __future__ import annotations

import json
import sys

from tests.cli.conftest import run
from tests.conftest import rows
from tests.e2e.test_capture_sdk import model_exchanges

GATEWAY = "llm.gateway.test"
REAL_KEY = "gw-BROKERED-real-gateway-key-0000000000000"
AGENT = f"""
import os, anthropic, openai
# Configured only by its environment: the proxy, the CA and the placeholders it was given.
hello = [{{"role": "user", "content": "hi"}}]
anthropic.Anthropic(base_url="https://{GATEWAY}", max_retries=0).messages.create(
    model="claude-haiku-4-5", max_tokens=50, messages=hello)  # x-api-key
openai.OpenAI(base_url="https://{GATEWAY}/v1", max_retries=0).chat.completions.create(
    model="gpt-4.1", messages=hello)  # Authorization: Bearer
anthropic.Anthropic(base_url="https://{GATEWAY}", auth_token=os.environ["ANTHROPIC_API_KEY"],
                    max_retries=0).messages.create(model="claude-haiku-4-5", max_tokens=50, messages=hello)  # Bearer
"""


def test_a_gateway_takes_the_key_in_every_header_its_clients_use(emu, capsem_home, tmp_path, monkeypatch):
    monkeypatch.setenv("GATEWAY_KEY", REAL_KEY)  # capsem's own environment holds the key
    capsem_home.mkdir(parents=True, exist_ok=True)
    (capsem_home / "config.yaml").write_text(
        "credentials:\n"
        f"  gateway: {{host: {GATEWAY}, header: [x-api-key, Authorization], env: GATEWAY_KEY,\n"
        "            agent_env: [ANTHROPIC_API_KEY, OPENAI_API_KEY]}\n"
    )
    assert "config OK" in run("config", "check")
    shown = run("config", "show")
    assert "header: [x-api-key, authorization]" in " ".join(shown.split()), shown
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    upstream = f"--mode upstream:{emu.proxy_url} --set ssl_verify_upstream_trusted_ca={emu.ca_path}"
    run("run", "--broker", "-q", "--mitmdump-args", upstream, "--", sys.executable, str(script))

    exchanges = model_exchanges(emu)
    assert [e["host"] for e in exchanges] == [GATEWAY] * 3
    seen = [e["request_headers"] for e in exchanges]
    assert seen[0]["x-api-key"] == REAL_KEY and "authorization" not in seen[0]
    assert seen[1]["authorization"] == f"Bearer {REAL_KEY}" and "x-api-key" not in seen[1]
    assert seen[2]["authorization"] == f"Bearer {REAL_KEY}"  # the anthropic SDK with an auth token
    sent = sorted(h for h in ("authorization", "x-api-key") if h in seen[2])  # as the SDK sends it
    (session,) = json.loads(run("list-sessions", "--json"))
    db = capsem_home / "sessions" / session["id"] / "session.db"
    events = rows(db, "SELECT credential, host, location, outcome FROM substitution_events ORDER BY id")
    assert {(e["credential"], e["host"], e["outcome"]) for e in events} == {
        ("gateway", GATEWAY, "substituted")
    }
    assert [e["location"] for e in events[:2]] == ["header x-api-key", "header authorization"]
    assert sorted(e["location"] for e in events[2:]) == [f"header {h}" for h in sent]
    for path in (p for p in capsem_home.rglob("*") if p.is_file()):
        assert b"BROKERED-real" not in path.read_bytes(), path
