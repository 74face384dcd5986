"""The session and call pages show what the tool rules decided: a denied call as denied (a badge
naming the rule) and never with a tool result, an approved one beside its result. The session is
written through the real recorder path (tests/cli/test_tool_decisions_shown.py); the pages are
served by `capsem view` as a real process and laid out by headless Chromium, whose screenshots go
to test-artifacts/view/."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.cli.test_tool_decisions_shown import decided_session
from tests.conftest import ARTIFACTS, environ
from tests.pages import SIDEWAYS, laid_out, view_of

SHOTS = ARTIFACTS / "view"
ROWS = """[...document.querySelectorAll(%s)].map(e => e.innerText.replace(/\\s+/g, ' ').trim())"""


@pytest.fixture(scope="module")
def view(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """`capsem view`'s URL and the session's id (a denied result recorded anyway: never shown)."""
    home = tmp_path_factory.mktemp("decided-home")
    with environ(CAPSEM_HOME=str(home)):
        session_id = decided_session(ran_denied=True)
    with view_of(home) as url:
        yield url, session_id


def test_the_session_page_shows_each_verdict_and_no_result_for_the_denied_call(view, tmp_path):
    url, session_id = view
    with laid_out(f"{url}/s/{session_id}", 1280) as page:
        page.screenshot(SHOTS / "tool-decisions-session-1280.png")
        tools = page.js(ROWS % "'.row.tool .label'")
        wide, screen = page.js(SIDEWAYS)
    rm = next(t for t in tools if "rm -rf /tmp/x" in t)
    assert "denied by no-rm-rf: not run" in rm and "not run: the agent never got this call" in rm
    assert "removed" not in rm  # the result recorded for it anyway is not shown as its result
    push = next(t for t in tools if "git push" in t)
    assert "approved (asked by ask-push)" in push and "pushed main" in push
    read = next(t for t in tools if "notes.md" in t)
    assert "by" not in read.split("notes.md")[0] and "# notes" in read
    assert wide <= screen
    page_text = httpx.get(f"{url}/s/{session_id}").text
    assert "Where capsem stepped in (2)" in page_text and "tool rule no-rm-rf" in page_text


def test_the_call_page_shows_the_verdict_beside_each_tool_call(view, tmp_path):
    url, session_id = view
    for width in (1280, 390):
        with laid_out(f"{url}/s/{session_id}/call/1", width) as page:
            page.screenshot(SHOTS / f"tool-decisions-call-{width}.png")
            rows = page.js(ROWS % "'table.toolcalls tbody tr'")
            answer = page.js(ROWS % "'.msg.k-tool_call .msg-head'")
            wide, screen = page.js(SIDEWAYS)
        assert wide <= screen, (width, wide, screen)
    rm = next(r for r in rows if "rm -rf /tmp/x" in r)
    assert (
        "denied by no-rm-rf: not run" in rm
        and "not run: the agent never got this call (denied by no-rm-rf)" in rm
    )
    assert "removed" not in rm and "sent back in call" not in rm
    push = next(r for r in rows if "git push" in r)
    assert "approved (asked by ask-push)" in push and "pushed main" in push
    assert answer[:2] == ["Assistant tool call Bash denied by no-rm-rf: not run",
                          "Assistant tool call Bash approved (asked by ask-push) result sent in call #2"]  # fmt: skip
