"""Issue 25 ("the everyday loop") end to end, through one real `capsem run --emulator --broker
--name --tag` in a git workspace: a Python agent (httpx, with the proxy and CA `capsem run` gives
it) sends its brokered Anthropic key as `Authorization: Bearer` through the real anthropic SDK
(`auth_token`, point 3), runs a tool loop with
a failed tool, gets two 404s, sends a placeholder to another host, crosses a session budget, hits
a policy deny and a policy warn (point 2). Everything runs on the built-in emulator (point 6); the
session records its workspace, repository, branch, commit, name and tags (point 7).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import run
from tests.conftest import environ, rows

REAL_KEY = "sk-ant-api03-EVERYDAYrealKEY0000000000000"

AGENT = r"""
import json, os, anthropic, httpx
client = httpx.Client(timeout=30)  # HTTPS_PROXY and SSL_CERT_FILE come from capsem run
key = os.environ["ANTHROPIC_API_KEY"]
assert key == "capsem-placeholder-anthropic", key
bearer = {"authorization": f"Bearer {key}", "anthropic-version": "2023-06-01"}
ask = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "read it"}],
       "tools": [{"name": "read_file", "description": "read a file", "input_schema": {"type": "object"}}]}
# the real anthropic SDK with a bearer token (as anthropic 2.x sends any key): `Authorization: Bearer`
sdk = anthropic.Anthropic(auth_token=key, max_retries=0)
first = sdk.messages.create(**ask, extra_headers={"x-emulator": "scenario=tool_call"})
content = [b.model_dump(exclude_none=True) for b in first.content]
use = next(b for b in content if b["type"] == "tool_use")
ask["messages"] += [{"role": "assistant", "content": content},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "is_error": True,
                                                  "content": "ENOENT: no such file"}]}]
second = client.post("https://api.anthropic.com/v1/messages", json=ask, headers=bearer | {"x-emulator": "scenario=text"})
assert second.status_code == 200, second.text
for _ in range(2):
    assert client.get("https://api.anthropic.com/v1/nothing-here", headers=bearer).status_code == 404
chat = {"model": "gpt-4.1", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
stolen = {"authorization": "Bearer sk-capsem-emulator", "x-api-key": key}  # the anthropic placeholder, elsewhere
assert client.post("https://api.openai.com/v1/chat/completions", json=chat, headers=stolen).status_code == 200
refused = client.post("https://api.openai.com/v1/chat/completions", json=chat, headers=stolen)
assert refused.status_code == 402, refused.text
assert client.get("https://paste.example.com/up").status_code == 403
assert client.get("https://api.anthropic.com/v1/models", headers=bearer).status_code == 200
print("agent done")
"""

CONFIG = """
budgets:
  openai-run: {scope: session, limit_usd: 0.0006, provider: openai}  # one call's reservation fits, not two
policy:
  rules:
    - {name: no-paste, action: deny, host: "paste.example.com"}
    - {name: models-list, action: warn, path: "/v1/models"}
credentials:
  anthropic: {host: api.anthropic.com, header: x-api-key, env: ANTHROPIC_API_KEY}
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def everyday(tmp_path_factory) -> tuple[Path, str, str, Path]:
    """(CAPSEM_HOME, session id, what `capsem run` printed at 80 columns, the workspace)."""
    home = tmp_path_factory.mktemp("everyday-home")
    (home / "config.yaml").write_text(CONFIG)
    repo = tmp_path_factory.mktemp("everyday-repo") / "shop-app"
    (repo / "src").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "feature-x")
    git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "start")
    script = repo.parent / "agent.py"
    script.write_text(AGENT)
    with environ(CAPSEM_HOME=str(home), COLUMNS="80", ANTHROPIC_API_KEY=REAL_KEY):
        out = run("run", "--emulator", "--broker", "--name", "checkout-fix", "--tag", "team-a", "--tag", "ci",
                  "--workspace", str(repo / "src"), "--", sys.executable, str(script))  # fmt: skip
    (db,) = home.glob("sessions/*/session.db")
    return home, db.parent.name, out, repo


@pytest.fixture
def home(everyday, capsem_home, monkeypatch):
    import shutil

    shutil.copytree(everyday[0], capsem_home)
    return capsem_home


def words(text: str) -> str:
    return " ".join(text.split())


def test_point_6_the_emulator_answers_and_nothing_leaves_the_machine(everyday):
    home, sid, out, _ = everyday
    assert "no model was called and nothing was spent" in " ".join(out.split())  # the emulator's answer
    calls = rows(
        home / "sessions" / sid / "session.db", "SELECT provider, status_code FROM model_calls ORDER BY id"
    )
    assert [c["provider"] for c in calls] == ["anthropic", "anthropic", "openai"]
    assert all(c["status_code"] == 200 for c in calls)


def test_point_3_the_brokered_anthropic_key_is_taken_as_a_bearer_token(everyday):
    home, sid, _, _ = everyday
    events = rows(home / "sessions" / sid / "session.db",
                  "SELECT credential, host, location, outcome FROM substitution_events ORDER BY id")  # fmt: skip
    anthropic = [e for e in events if e["host"] == "api.anthropic.com"]
    assert anthropic and {(e["location"], e["outcome"]) for e in anthropic} == {
        ("header authorization", "substituted")
    }
    assert {e["outcome"] for e in events if e["host"] == "api.openai.com"} == {"refused"}
    for path in home.rglob("*"):
        if path.is_file() and path.suffix not in (".pem", ".p12", ".cer"):
            assert REAL_KEY.encode() not in path.read_bytes(), path


def test_point_2_the_summary_list_and_page_name_what_capsem_did_and_count_errors_alike(everyday, home):
    _, sid, out, _ = everyday
    assert all(len(line) <= 80 for line in out.splitlines() if "/sessions/" not in line), out
    assert any(line.startswith("database  /") and line.endswith("/session.db") for line in out.splitlines())
    text = words(out)
    # as seen: `0 model calls, 1 HTTP flow (0 failed)` after a budget refusal
    assert "3 model calls, 8 HTTP flows, 1 tool call" in text
    # the placeholder went to api.openai.com twice: with the call that spent the budget, and the refused one
    assert "· 3 errors · capsem denied 2, warned 1, refused 2 placeholders" in text
    assert "Where capsem stepped in (5)" in text and "Errors (3)" in text
    from rich.console import Console

    from assembler.summary import render_session, session_summary

    for width in (80, 160):
        console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
        console.print(render_session(session_summary(sid), width))
        shown = console.export_text()
        assert all(len(line) <= width for line in shown.splitlines()), shown
    text = words(shown)  # at 160 columns every row is one line
    stepped = text.split("Where capsem stepped in (5)", 1)[1]
    assert "denied GET paste.example.com/up blocked by capsem policy rule 'no-paste'" in stepped
    assert ("denied POST api.openai.com/v1/chat/completions the openai-run budget of $0.0006 for this session "
            "could not cover it (spent, or no room for its reservation)") in stepped  # fmt: skip
    assert (
        "warned GET api.anthropic.com/v1/models policy rule models-list: allowed, with a warning" in stepped
    )
    assert stepped.count("refused placeholder in header x-api-key to api.openai.com credential anthropic: "
                         "api.openai.com is not a host of this credential (api.anthropic.com)") == 2  # fmt: skip
    errors = text.split("Errors (3)", 1)[1]
    assert (
        errors.count("GET api.anthropic.com:443/v1/nothing-here HTTP 404 no route GET /v1/nothing-here") == 2
    )
    assert "tool read_file" in errors and "ENOENT: no such file" in errors

    for width in ("80", "160"):
        os.environ["COLUMNS"] = width
        listed = run("list-sessions")
        assert all(len(line) <= int(width) for line in listed.splitlines()), listed
        line = next(x for x in listed.splitlines() if x.startswith(sid))
        assert " 3 " in line and "2d 1w 2r" in line, listed
        assert "capsem = requests capsem denied" in listed
    (row,) = json.loads(run("list-sessions", "--json"))
    assert (row["total_errors"], row["denied_requests"], row["warned_requests"], row["refused_placeholders"]) == (
        3, 2, 1, 2)  # fmt: skip

    from starlette.testclient import TestClient

    from assembler.view.app import create_app

    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        listing = client.get("/").text
        page = client.get(f"/s/{sid}").text
    cell = re.search(r'<td class="num hide-s"><span class="err">(\d+)</span>', listing)
    assert cell and cell.group(1) == "3"  # as seen: the web list's Errors column said 0
    assert "2 denied" in listing and "1 warned" in listing and "2 refused" in listing
    assert 'href="#errors">3</a>' in page and "Where capsem stepped in (5)" in page
    assert "policy rule no-paste" in page and "budget openai-run" in page and "ENOENT" in page


def test_point_7_workspace_git_name_and_tags_group_and_filter(everyday, home):
    _, sid, _, repo = everyday
    (row,) = json.loads(run("list-sessions", "--json"))
    commit = git(repo, "rev-parse", "HEAD")
    assert (row["workspace"], row["git_repo"], row["project"]) == (str((repo / "src").resolve()),
                                                                   str(repo.resolve()), "shop-app")  # fmt: skip
    assert (row["git_branch"], row["git_commit"], row["name"], row["tags"]) == (
        "feature-x", commit, "checkout-fix", ["team-a", "ci"])  # fmt: skip
    for flags in (
        ["--project", "shop-app"],
        ["--branch", "feature-x"],
        ["--tag", "ci"],
        ["--name", "checkout-fix"],
    ):
        assert sid in run("list-sessions", *flags)
    for flags in (["--project", "other"], ["--branch", "main"], ["--tag", "nope"]):
        assert "No sessions found" in run("list-sessions", *flags)
    os.environ["COLUMNS"] = "220"  # the agent's command line (a long temporary path) takes room at 160
    listed = run("list-sessions")
    assert "shop-app@feature-x" in listed and all(
        w in listed.split() for w in ("checkout-fix", "#team-a", "#ci")
    )
    assert "\ncheckout-fix · shop-app@feature-x\n" in everyday[2]  # the run's summary names it
    by_tag = json.loads(run("cost-report", "--by", "tag", "--json"))
    assert {r["key"] for r in by_tag["rows"]} == {"team-a", "ci"}
    assert [r["key"] for r in json.loads(run("cost-report", "--by", "project", "--json"))["rows"]] == [
        "shop-app"
    ]
    assert [r["key"] for r in json.loads(run("cost-report", "--by", "branch", "--json"))["rows"]] == [
        "shop-app@feature-x"]  # fmt: skip
    for width in ("80", "160"):
        os.environ["COLUMNS"] = width
        table = run("cost-report", "--by", "project")
        assert "shop-app" in table and all(len(x) <= int(width) for x in table.splitlines())

    from starlette.testclient import TestClient

    from assembler.view.app import create_app

    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        assert f"/s/{sid}" in client.get("/?tag=ci").text
        assert f"/s/{sid}" in client.get("/?project=shop-app&branch=feature-x").text
        assert f"/s/{sid}" not in client.get("/?tag=nope").text
    assert "--name 'bad name': use 1 to 64 characters" in run(
        "run", "--name", "bad name", "--", "true", code=1
    )
