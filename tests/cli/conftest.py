"""Fixtures for the CLI tests: a CAPSEM_HOME with one session recorded through real mitmdump."""

from __future__ import annotations

import os
import shutil
import ssl
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from assembler.cli import cli
from assembler.demo import anthropic_loop, openai_loop
from capsem.emulator import Emulator
from capsem.mitm import start_mitmdump


@pytest.fixture(scope="session")
def recorded(tmp_path_factory) -> Path:
    """A CAPSEM_HOME holding one stopped session: two tool loops (anthropic + openai)."""
    home = tmp_path_factory.mktemp("recorded-home")
    work = tmp_path_factory.mktemp("recorded-work")
    old = os.environ.get("CAPSEM_HOME")
    os.environ["CAPSEM_HOME"] = str(home)
    try:
        with Emulator() as emu:
            proxy = start_mitmdump(confdir=work / "conf", log_path=work / "mitmdump.log",
                                   args=["--mode", f"upstream:{emu.proxy_url}",
                                         "--set", f"ssl_verify_upstream_trusted_ca={emu.ca_path}"])  # fmt: skip
            try:
                trust = ssl.create_default_context(cafile=proxy.ca_cert)
                with httpx.Client(proxy=proxy.url, verify=trust, timeout=30) as client:
                    anthropic_loop(client, lambda _msg: None)
                    openai_loop(client, lambda _msg: None)
            finally:
                proxy.stop()
    finally:
        if old is None:
            os.environ.pop("CAPSEM_HOME", None)
        else:
            os.environ["CAPSEM_HOME"] = old
    return home


@pytest.fixture
def home(recorded, capsem_home) -> Path:
    shutil.copytree(recorded, capsem_home)
    return capsem_home


def session_db(home: Path) -> Path:
    (db,) = home.glob("sessions/*/session.db")
    return db


def run(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output
