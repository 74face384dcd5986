"""The team schema is versioned: `team init` creates it and is safe to run again; a server whose
schema is newer than this capsem is refused by every command, never written to."""

from __future__ import annotations

import psycopg

from tests.team.helpers import capsem


def test_a_newer_team_schema_is_refused(team_url, tmp_path):
    home = tmp_path / "home"
    assert "version 0 -> 1" in capsem(home, "team", "init").stdout
    with psycopg.connect(team_url, autocommit=True) as pg:
        pg.execute("UPDATE capsem.meta SET value = '99' WHERE key = 'schema_version'")
    for args in (("team", "init"), ("team", "push", "--all"), ("cost-report", "--team")):
        done = capsem(home, *args, check=False)
        assert done.returncode == 1 and "schema is version 99, newer than this capsem's (1)" in done.stderr, (
            args
        )
    with psycopg.connect(team_url) as pg:
        assert pg.execute("SELECT value FROM capsem.meta").fetchall() == [("99",)]
