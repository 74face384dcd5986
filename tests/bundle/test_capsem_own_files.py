"""Issue 35, item 10: `capsem bundle create` imported capsem's own `capture-health.json` (beside
each session.db) as a log line. A session recorded through real mitmdump with the real anthropic
SDK against the emulator, then bundled from its folder and from the whole $CAPSEM_HOME: only the
databases are imported, capsem's own files (the capture counts, the hashing key) are not data and
raise no warning, and the counts the recorder kept in the file travel with the session."""

from __future__ import annotations

import json
import shutil
import ssl
from pathlib import Path

import anthropic
import httpx
import pytest

from assembler.bundle import DebugBundle
from capsem import health
from tests.cli.conftest import run
from tests.conftest import only_session
from tests.shared_proxy import recorded_home


def _one_call(proxy) -> None:
    trust = ssl.create_default_context(cafile=proxy.ca_cert)
    with httpx.Client(proxy=proxy.url, verify=trust, timeout=30) as http:
        client = anthropic.Anthropic(api_key="sk-ant-bundle-000000000000", http_client=http, max_retries=0)
        client.messages.create(
            model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )


@pytest.fixture(scope="module")
def recorded(emulator, tmp_path_factory) -> Path:
    """The session, recorded once for the module: a CAPSEM_HOME to copy."""
    return recorded_home(emulator, tmp_path_factory.mktemp("own-files"), _one_call)


@pytest.fixture
def folder(recorded, capsem_home) -> Path:
    shutil.copytree(recorded, capsem_home)
    db = only_session(capsem_home)
    assert (db.parent / health.FILE_NAME).is_file() and (capsem_home / "hash.key").is_file()
    # a full disk: the recorder could keep a loss only in the file (session_meta's write failed)
    health.write(db.parent, {**health.read(db.parent), "capture_rows_lost": "3"})
    return db.parent


@pytest.mark.parametrize("what", ("session folder", "CAPSEM_HOME"))
def test_capsems_own_files_are_not_imported_as_data(folder, capsem_home, tmp_path, what):
    given = folder if what == "session folder" else capsem_home
    target = tmp_path / "bundle.db"
    made = json.loads(run("bundle", "create", str(given), "-o", str(target), "--json"))
    kinds = {source["path"].rsplit("/", 1)[-1]: source["kind"] for source in made["sources"]}
    expected = {"session.db": "capsem_session"} | (
        {"main.db": "capsem_main"} if what == "CAPSEM_HOME" else {}
    )
    assert kinds == expected
    assert all(not source["warnings"] for source in made["sources"])
    assert made["statistics"]["log_count"] == 0
    with DebugBundle.open(target) as bundle:
        (tags,) = [json.loads(r[0]) for r in bundle.query("SELECT tags FROM sessions")]
    assert tags["capture_rows_lost"] == "3"  # the capture counts, read as what they are
