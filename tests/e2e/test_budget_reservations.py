"""Budgets that cannot be outrun, end to end: real mitmdump, the emulator upstream.

Each call a budget matches reserves its most expensive outcome before it goes upstream; no number
of calls in flight, and no pipelined `response.create` on one WebSocket, takes the spend past the
limit. The emulator's `reasoning` control makes a call's real cost close to its reservation (its
output is then its `max_tokens`), so that the calls let through by today's check (spend < limit)
would pass the limit many times over; `delay_ms` keeps calls in flight together.
What truly reached the upstream is priced from the emulator's own log, never from capsem's record.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from pricing import price_call
from tests.conftest import rows
from tests.e2e.test_capture_sdk import ANTHROPIC_KEY, OPENAI_KEY, model_exchanges
from tests.e2e.test_guardrails import session_of

SONNET = "claude-sonnet-4-5"  # $3 / M input (1-hour cache writes $6), $15 / M output


def configure(home, budgets: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("budgets:\n" + budgets)


def client(proxy) -> httpx.Client:
    return httpx.Client(proxy=proxy.url, verify=ssl.create_default_context(cafile=proxy.ca_cert), timeout=60)


def claude(http: httpx.Client, marker: str, max_tokens: int, control: str) -> httpx.Response:
    """One streamed Messages call (`marker`: its prompt, to tell the calls apart)."""
    body = {"model": SONNET, "max_tokens": max_tokens, "stream": True,
            "messages": [{"role": "user", "content": marker}]}  # fmt: skip
    headers = {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01", "x-emulator": control}
    return http.post("https://api.anthropic.com/v1/messages", json=body, headers=headers)


def upstream_cost(emu) -> float:
    """What the calls that reached the emulator cost, priced from the usage it answered with."""
    total = 0.0
    for e in model_exchanges(emu):
        x = e["expected"]
        provider = "anthropic" if "anthropic" in e["host"] else "openai"
        priced = price_call(provider=provider, model=x.get("response_model") or x.get("model"),
                            input_tokens=x.get("input_tokens"), output_tokens=x.get("output_tokens"),
                            cache_read=x.get("cache_read"), cache_write=x.get("cache_write"))  # fmt: skip
        assert priced is not None, x
        total += float(priced.total_usd)
    return total


def recorded_spend(home, proxy) -> float:
    db = home / "sessions" / session_of(proxy) / "session.db"
    return sum(r["estimated_cost_usd"] or 0.0 for r in rows(db, "SELECT estimated_cost_usd FROM model_calls"))


def wait_until(check, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def refused(response: httpx.Response) -> str:
    assert response.status_code == 402, response.text
    return response.json()["error"]["message"]


def test_fifty_calls_at_once_never_take_the_spend_past_a_limit_of_two_calls(mitmdump, emu, capsem_home):
    # each call could cost ~$0.0158 (its body's bytes at $6/M, 1,001 output tokens at $15/M) and
    # costs ~$0.0150: two fit in $0.033, three do not; today all fifty went (about $0.75)
    limit = 0.033
    configure(capsem_home, f"  run: {{scope: session, limit_usd: {limit}}}\n")
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    with client(proxy) as http, ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(lambda i: claude(http, f"call {i:02d}", 1001, "text=ok; reasoning=1000; delay_ms=250"),
                                range(50)))  # fmt: skip
    allowed = [a for a in answers if a.status_code == 200]
    messages = [refused(a) for a in answers if a.status_code != 200]
    assert len(allowed) == 2 and len(messages) == 48
    assert all("capsem budget 'run' cannot cover this call: it could cost up to $0.01" in m for m in messages)
    assert "held by calls in flight" in messages[0] and "(its max_tokens)" in messages[0]
    assert len(model_exchanges(emu)) == 2 and upstream_cost(emu) <= limit
    assert proxy.stop() == 0
    assert 0.03 < recorded_spend(capsem_home, proxy) <= limit


def test_twenty_calls_of_026_under_a_02_budget_are_all_refused(mitmdump, emu, capsem_home):
    configure(capsem_home, "  run: {scope: session, limit_usd: 0.02}\n")
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    with client(proxy) as http, ThreadPoolExecutor(20) as pool:
        answers = list(
            pool.map(lambda i: claude(http, f"call {i:02d}", 1734, "text=ok; reasoning=1733"), range(20))
        )
    messages = [refused(a) for a in answers]
    assert all(
        m.startswith("capsem budget 'run' cannot cover this call: it could cost up to $0.02")
        for m in messages
    )
    assert model_exchanges(emu) == []
    assert proxy.stop() == 0
    db = capsem_home / "sessions" / session_of(proxy) / "session.db"
    nets = rows(db, "SELECT decision, matched_rule, status_code FROM net_events")
    assert nets == [{"decision": "denied", "matched_rule": "budget:run", "status_code": 402}] * 20
    assert recorded_spend(capsem_home, proxy) == 0


def test_calls_in_flight_hold_their_reservation_until_their_real_cost_is_counted(mitmdump, emu, capsem_home):
    # each call reserves ~$0.0158 (1,000 output tokens) and costs ~$0.00002 (its answer is 1 token)
    configure(capsem_home, "  run: {scope: session, limit_usd: 0.04}\n")
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    slow = "text=ok; delay_ms=400"
    with client(proxy) as http, ThreadPoolExecutor(2) as pool:
        first = [pool.submit(claude, http, f"first {i}", 1000, slow) for i in range(2)]
        wait_until(lambda: len(model_exchanges(emu)) == 2, "the first two calls never reached the upstream")
        assert "held by calls in flight" in refused(claude(http, "third", 1000, slow))  # 3 x $0.0158 > $0.04
        assert [f.result().status_code for f in first] == [200, 200]
        # their real cost (~$0.00004) replaced their reservations: two more fit again
        second = [pool.submit(claude, http, f"second {i}", 1000, slow) for i in range(2)]
        assert [f.result().status_code for f in second] == [200, 200]
    assert len(model_exchanges(emu)) == 4
    assert proxy.stop() == 0


def test_a_call_whose_upstream_fails_releases_its_reservation(mitmdump, emu, capsem_home):
    configure(capsem_home, "  run: {scope: session, limit_usd: 0.025}\n")  # one reservation (~$0.0158) fits
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    with client(proxy) as http, ThreadPoolExecutor(1) as pool:
        cut = pool.submit(claude, http, "cut short", 1000, "text=ok; delay_ms=500; truncate=900")
        wait_until(lambda: len(model_exchanges(emu)) == 1, "the first call never reached the upstream")
        assert "held by calls in flight" in refused(claude(http, "meanwhile", 1000, "text=ok"))
        try:
            cut.result()
        except httpx.HTTPError:
            pass  # the upstream cut the stream: the call failed
        assert claude(http, "after", 1000, "text=ok").status_code == 200
    assert proxy.stop() == 0


def chat(http: httpx.Client, model: str) -> httpx.Response:
    body = {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": f"Bearer {OPENAI_KEY}", "x-emulator": "text=ok"}
    return http.post("https://api.openai.com/v1/chat/completions", json=body, headers=headers)


def test_a_model_without_a_price_is_refused_unless_the_budget_allows_it(mitmdump, emu, capsem_home):
    configure(capsem_home, "  run: {scope: session, limit_usd: 5}\n")
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    with client(proxy) as http:
        message = refused(chat(http, "capsem-unpriced-model"))
        assert chat(http, "gpt-4.1").status_code == 200  # a priced one goes
    assert message.startswith("capsem budget 'run' cannot count this call's cost: capsem's price table has no "
                              "price for model 'capsem-unpriced-model'")  # fmt: skip
    assert "Set budgets.run.on_unpriced: allow in the capsem config" in message
    assert [e["request_body"] for e in model_exchanges(emu) if "capsem-unpriced" in e["request_body"]] == []
    assert proxy.stop() == 0

    emu.clear()
    configure(capsem_home, "  run: {scope: session, limit_usd: 5, on_unpriced: allow}\n")
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    with client(proxy) as http:
        assert chat(http, "capsem-unpriced-model").status_code == 200
    assert len(model_exchanges(emu)) == 1
    assert proxy.stop() == 0
    assert "cannot count the cost of model 'capsem-unpriced-model'" in proxy.log()
    db = capsem_home / "sessions" / session_of(proxy) / "session.db"
    (net,) = rows(db, "SELECT decision, matched_rule, status_code FROM net_events")
    assert net == {"decision": "warned", "matched_rule": "budget:run (unpriced)", "status_code": 200}


def ws_pipelined(proxy, turns: list[dict], control: str) -> list[dict]:
    """Send every `response.create` at once on one WebSocket (through a CONNECT tunnel), then read
    until each has ended; the turn-ending events, in order."""
    from websockets.asyncio.client import connect

    async def run() -> list[dict]:
        host, port = proxy.url.rsplit("//", 1)[1].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n")
        await writer.drain()
        assert b" 200 " in (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")[0]
        sock = writer.get_extra_info("socket").dup()
        writer.transport.pause_reading()
        ends: list[dict] = []
        headers = {"authorization": f"Bearer {OPENAI_KEY}", "x-emulator": control}
        tls = ssl.create_default_context(cafile=proxy.ca_cert)
        async with connect("wss://api.openai.com/v1/responses", sock=sock, ssl=tls, server_hostname="api.openai.com",
                           additional_headers=headers) as ws:  # fmt: skip
            for turn in turns:
                await ws.send(json.dumps(turn))
            while len(ends) < len(turns):
                event = json.loads(await asyncio.wait_for(ws.recv(), 30))
                if event["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
                    ends.append(event)
        writer.close()
        return ends

    return asyncio.run(run())


def test_pipelined_turns_on_one_websocket_each_hold_a_reservation(mitmdump, emu, capsem_home):
    # gpt-4.1: $2 / M input, $8 / M output. Each turn reserves ~$0.0042 (501 output tokens) and
    # costs ~$0.0040: two fit in $0.009; today all six went (about $0.024)
    limit = 0.009
    configure(capsem_home, f"  run: {{scope: session, limit_usd: {limit}}}\n")
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    ask = {"type": "response.create", "model": "gpt-4.1", "max_output_tokens": 501}
    ends = ws_pipelined(
        proxy, [{**ask, "input": f"turn {i}"} for i in range(6)], "text=ok; reasoning=500; delay_ms=100"
    )
    errors = [e for e in ends if e["type"] == "error"]
    assert len(errors) == 4 and [e["type"] for e in ends].count("response.completed") == 2
    assert all(e["status"] == 402 and "cannot cover this call" in e["error"]["message"] for e in errors)
    assert len(model_exchanges(emu)) == 2 and upstream_cost(emu) <= limit
    assert proxy.stop() == 0
