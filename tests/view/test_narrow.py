"""Issue 35, item 10: a session page at 390 px (a phone) scrolled sideways. A session recorded
through real mitmdump with the real anthropic SDK against the emulator, with what a real Claude
Code session holds: failed requests to long paths without a space or a hyphen in them (as Claude
Code's `api.anthropic.com/api/claude_code/organizations/metrics_enabled`), a model call that
failed, a long MCP tool name. Its pages, laid out by headless Chromium at 390×844 (and 1280 for the
screenshot), are no wider than the screen. Screenshots go to test-artifacts/view/."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import httpx
import pytest

from capsem.emulator import Emulator
from capsem.ids import new_session_id
from capsem.mitm import start_mitmdump
from tests.conftest import ARTIFACTS, environ, seeded_confdir
from tests.pages import SIDEWAYS, laid_out, view_of

SHOTS = ARTIFACTS / "view"
HOUSEKEEPING = ("/api/capsem_test/organizations/metrics_enabled_for_workspace",
                "/api/capsem_test_shared_session_transcripts/upload_transcript_segments")  # fmt: skip
"""Paths shaped like those Claude Code asks for besides its model calls, that no emulator knows."""


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """`capsem view`'s URL and the session's id."""
    import anthropic

    home, work = tmp_path_factory.mktemp("narrow-home"), tmp_path_factory.mktemp("narrow-work")
    session_id = new_session_id()
    with environ(CAPSEM_HOME=str(home)), Emulator() as emu:
        proxy = start_mitmdump(confdir=seeded_confdir(work / "conf"), log_path=work / "mitmdump.log",
                               args=["--mode", f"upstream:{emu.proxy_url}",
                                     "--set", f"ssl_verify_upstream_trusted_ca={emu.ca_path}",
                                     "--set", f"capsem_session_id={session_id}"])  # fmt: skip
        try:
            trust = ssl.create_default_context(cafile=proxy.ca_cert)
            with httpx.Client(proxy=proxy.url, verify=trust, timeout=30) as http:
                for path in HOUSEKEEPING:
                    assert http.get(f"https://api.anthropic.com{path}?beta=true").status_code >= 400
                client = anthropic.Anthropic(
                    api_key="sk-ant-narrow-000000000000", http_client=http, max_retries=0
                )
                tool = {"name": "mcp__workspace_filesystem__read_multiple_files", "description": "Read files",
                        "input_schema": {"type": "object", "properties": {"paths": {"type": "string"}}}}  # fmt: skip
                client.messages.create(model="claude-sonnet-4-5-20250929", max_tokens=256, tools=[tool],
                                       messages=[{"role": "user", "content": "Read the notes"}])  # fmt: skip
                with pytest.raises(anthropic.APIStatusError):
                    client.messages.create(model="claude-sonnet-4-5-20250929", max_tokens=256,
                                           messages=[{"role": "user", "content": "again"}],
                                           extra_headers={"x-emulator": "scenario=error; status=529"})  # fmt: skip
        finally:
            proxy.stop()
    with view_of(home) as url:
        yield url, session_id


@pytest.mark.parametrize("page", ("", "/call/1", "/call/2"))
def test_a_session_page_fits_a_phone_screen(session, tmp_path, page):
    url, session_id = session
    for width in (1280, 390):
        with laid_out(f"{url}/s/{session_id}{page}", width) as shown:
            shown.screenshot(SHOTS / f"narrow{page.replace('/', '-')}-{width}.png")
            wide, screen = shown.js(SIDEWAYS)
            assert wide <= screen, (width, wide, screen)
