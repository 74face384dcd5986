"""Three sessions recorded through real mitmdump with the real anthropic and openai SDKs against
the emulator (its answers seeded, so the same request gets the same answer in every run): `base`,
`again` (the same agent run again) and `changed` (another system prompt and another description of
its tool, each of the same length, so every token count stays the same: the change is the only one)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from assembler.demo import SYSTEM, WEATHER_TOOL, anthropic_loop, openai_loop
from capsem.emulator import Emulator
from capsem.ids import new_session_id
from capsem.mitm import start_mitmdump
from tests.conftest import environ

CHANGED_SYSTEM = SYSTEM.replace("terse", "brief")
CHANGED_TOOL = {**WEATHER_TOOL, "description": "Today's weather for a city"}
assert len(CHANGED_SYSTEM) == len(SYSTEM) and len(CHANGED_TOOL["description"]) == len(
    WEATHER_TOOL["description"]
)


@dataclass(frozen=True)
class Recorded:
    home: Path
    base: str
    again: str
    changed: str


def _record(emu: Emulator, work: Path, system: str, tool: dict) -> str:
    session_id = new_session_id()
    proxy = start_mitmdump(confdir=work / "conf", log_path=work / f"{session_id}.log",
                           args=["--mode", f"upstream:{emu.proxy_url}",
                                 "--set", f"ssl_verify_upstream_trusted_ca={emu.ca_path}",
                                 "--set", f"capsem_session_id={session_id}"])  # fmt: skip
    try:
        trust = ssl.create_default_context(cafile=proxy.ca_cert)
        with httpx.Client(proxy=proxy.url, verify=trust, timeout=30) as client:
            anthropic_loop(client, lambda _msg: None, system, tool)
            openai_loop(client, lambda _msg: None, system, tool)
    finally:
        proxy.stop()
    return session_id


@pytest.fixture(scope="session")
def recorded_runs(tmp_path_factory) -> Recorded:
    home = tmp_path_factory.mktemp("diff-home")
    work = tmp_path_factory.mktemp("diff-work")
    with environ(CAPSEM_HOME=str(home)), Emulator(defaults={"seed": "capsem-diff"}) as emu:
        ids = [_record(emu, work, SYSTEM, WEATHER_TOOL), _record(emu, work, SYSTEM, WEATHER_TOOL),
               _record(emu, work, CHANGED_SYSTEM, CHANGED_TOOL)]  # fmt: skip
    return Recorded(home, *ids)


@pytest.fixture
def runs(recorded_runs, monkeypatch) -> Recorded:
    """The recorded sessions, with CAPSEM_HOME pointing at them."""
    monkeypatch.setenv("CAPSEM_HOME", str(recorded_runs.home))
    return recorded_runs
