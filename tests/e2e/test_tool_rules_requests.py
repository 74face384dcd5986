"""Tool rules never decide a request, through a real mitmdump: a policy of tool rules only that
would deny every tool call (`tool: "*"`) lets every request through, MCP-shaped or not, recorded
as allowed with no rule (holding answers is tests/e2e/test_tool_hold.py's)."""

from __future__ import annotations

import json

import httpx

from tests.conftest import only_session, rows
from tests.e2e.test_capture_sdk import claude
from tests.e2e.test_policy import HI, write_policy


def test_a_policy_of_tool_rules_only_refuses_no_request(mitmdump, emu, capsem_home):
    write_policy(
        capsem_home,
        "    - {name: no-tools, action: deny, tool: '*'}\n"
        "    - {name: no-bash-args, action: deny, tool_args: {'*': {any: '*'}}}\n",
    )
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)
    answer = claude(proxy).messages.create(model="claude-haiku-4-5", max_tokens=50, messages=HI)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "Bash", "arguments": {"command": "ls"}},
    }
    with httpx.Client(proxy=proxy.url, timeout=30) as http:
        mcp = http.post(
            emu.http_url + "/mcp", content=json.dumps(call), headers={"content-type": "application/json"}
        )
    assert proxy.stop() == 0
    assert answer.content and mcp.status_code != 403 and "x-capsem-policy" not in mcp.headers
    nets = rows(only_session(capsem_home), "SELECT decision, matched_rule FROM net_events ORDER BY id")
    assert len(nets) == 2 and all(n["matched_rule"] is None and n["decision"] != "denied" for n in nets), nets
