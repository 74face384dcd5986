"""One throw-away PostgreSQL cluster per test session (`capsem/team/cluster.py`: initdb + pg_ctl
on a free port), and a fresh database in it per test."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from capsem.team.cluster import Cluster, binaries, start_cluster

_names = itertools.count()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    if binaries() is None:
        pytest.skip("PostgreSQL's server binaries (initdb, pg_ctl) are not installed: `make system-deps` "
                    "installs Debian's postgresql")  # fmt: skip
    cluster = start_cluster()
    yield cluster
    cluster.remove()


@pytest.fixture
def team_url(postgres: Cluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new empty database, set as this test's CAPSEM_TEAM_URL (pushed every 0.3 s)."""
    import psycopg

    name = f"team_{os.getpid()}_{next(_names)}"
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = postgres.url.rsplit("/", 1)[0] + f"/{name}"
    monkeypatch.setenv("CAPSEM_TEAM_URL", url)
    monkeypatch.setenv("CAPSEM_TEAM_PUSH_SECONDS", "0.3")
    return url
