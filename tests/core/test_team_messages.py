"""What capsem says of a team database it cannot reach holds none of the URL's password: libpq
quotes a URL it cannot read, or the token it stumbled on, in its error."""

from __future__ import annotations

import psycopg
import pytest

from addons.recorder.team_push import push_waiting
from capsem.team import outbox
from capsem.team.config import Team

PASSWORD = "s3cretPW"
URLS = [
    f"postgresql://capsem:{PASSWORD}@[::1/team",  # an IPv6 host not closed: the whole URL is quoted
    f"postgresql://capsem:{PASSWORD}%zz@127.0.0.1/team",  # a bad escape in the password: the token
    f"postgres://capsem@127.0.0.1/team?password={PASSWORD}%zz",
]


def _team(url: str) -> Team:
    return Team(url, "laptop", "ana", "metadata")


@pytest.mark.parametrize("url", URLS)
def test_what_a_failed_connection_says_holds_no_password(url):
    with pytest.raises(psycopg.Error) as raised:
        psycopg.connect(url, connect_timeout=1)
    assert PASSWORD in str(raised.value)  # libpq's own words hold it
    said = _team(url).said(raised.value)
    assert PASSWORD not in said and "[redacted]" in said, said


def test_said_keeps_a_message_that_holds_no_password():
    team = _team(f"postgresql://capsem:{PASSWORD}@127.0.0.1:1/team")
    assert team.said(ValueError("connection refused")) == "connection refused"
    assert team.said(ValueError()) == "ValueError()"


@pytest.mark.parametrize("url", URLS)
def test_the_outbox_keeps_no_password_of_a_push_that_failed(url, tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSEM_HOME", str(tmp_path))
    box = outbox.open_outbox()
    outbox.enqueue(box, ["20261129-120000-abcd"])
    box.commit()
    box.close()
    pushed, errors = push_waiting(_team(url))
    assert pushed == [] and PASSWORD not in errors["20261129-120000-abcd"]
    (entry,) = outbox.entries(outbox.open_outbox())
    assert entry.attempts == 1 and entry.error.startswith("cannot reach") and PASSWORD not in entry.error
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or PASSWORD.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("args", [["team", "init"], ["team", "push"]])
def test_the_team_commands_say_why_without_the_password(args, tmp_path):
    from click.testing import CliRunner

    from assembler.cli import cli

    env = {"CAPSEM_HOME": str(tmp_path), "CAPSEM_TEAM_URL": URLS[0]}
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code != 0 and "[::1" in result.output, result.output
    assert PASSWORD not in result.output
