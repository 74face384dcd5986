"""Issue 35, item 10: a replay in a directory that shares only its last name with a path in the
recorded prompt turned that path into `<workspace>` on the replay's side only, so a recording made
with bare `mitmdump` (no workspace known) missed. A prompt naming `/home/dev/proj/notes.md` and the
replay's own directory, recorded through real mitmdump with the real anthropic SDK, then replayed
with `capsem replay --strict` in a directory also named `proj`: every call matches."""

from __future__ import annotations

import json
import ssl
import sys

import anthropic
import httpx

from tests.cli.conftest import run
from tests.e2e.test_capture_sdk import finish

AGENT = """
import sys, anthropic
client = anthropic.Anthropic(api_key="sk-ant-replay-000000000000", max_retries=0)
client.messages.create(model="claude-sonnet-4-5", max_tokens=64,
                       messages=[{"role": "user", "content": sys.argv[1]}])
"""


def test_only_the_whole_workspace_path_is_put_aside(mitmdump, emu, capsem_home, tmp_path):
    workspace = tmp_path / "replayed" / "proj"  # its last name is that of a path in the prompt
    workspace.mkdir(parents=True)
    prompt = f"Compare /home/dev/proj/notes.md with {workspace}/notes.md and summarize"
    proxy = mitmdump(upstream=emu.proxy_url, ca=emu.ca_path)  # bare mitmdump: no workspace recorded
    trust = ssl.create_default_context(cafile=proxy.ca_cert)
    with httpx.Client(proxy=proxy.url, verify=trust, timeout=30) as http:
        client = anthropic.Anthropic(api_key="sk-ant-replay-000000000000", http_client=http, max_retries=0)
        client.messages.create(
            model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": prompt}]
        )
    original = finish(proxy, capsem_home).parent.name
    (listed,) = json.loads(run("list-sessions", "--json"))
    assert listed["workspace"] is None
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    out = run("replay", original, "--strict", "--workspace", str(workspace), "--", sys.executable, str(script),
              prompt)  # fmt: skip
    assert "1 matched, 0 missed" in out and "no divergence" in out, out
