"""One real mitmdump for many tests of a module: starting one costs ~3 CPU-seconds, more than most
tests' traffic. A module fixture sends each test's traffic (a *scenario*) through it in turn, waits
until the scenario's flows are recorded before the next one starts (so each scenario owns a range
of net_events ids), then stops it once; each test asserts on its own scenario: its rows, the
emulator's exchanges and what its client got. Each scenario's traffic is still real (real clients,
real mitmdump with the addon, the emulator upstream); only the proxy start is shared."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import addons
import capsem
import pricing
from capsem.mitm import Mitmdump, start_mitmdump
from tests.conftest import environ, only_session, rows, seeded_confdir


def assert_clean_log(log: str) -> None:
    """No addon error, no capsem warning and no traceback through capsem code. (mitmproxy
    itself may log a CancelledError when it shuts down with keep-alive connections open.)"""
    code_dirs = [str(Path(m.__file__).parent) for m in (addons, capsem, pricing)]
    for line in log.splitlines():
        assert "Addon error" not in line, log[-5000:]
        assert not (line.lstrip().startswith('File "') and any(d in line for d in code_dirs)), log[-5000:]
        if "capsem:" in line:
            assert any(x in line for x in ("recording session", "capture started", "stopped; database")), line


@dataclass
class Scenario:
    """One test's traffic through the shared proxy: what its client got (`result`), the emulator's
    exchanges and the net_events ids it made."""

    result: Any
    exchanges: list[dict]
    net_ids: list[int] = field(default_factory=list)

    @property
    def model_exchanges(self) -> list[dict]:
        """The exchanges that were model calls (they carry an `expected` record)."""
        return [e for e in self.exchanges if e["expected"].get("protocol")]

    def ids(self) -> str:
        """The scenario's net_events ids as an SQL list: `... WHERE net_event_id IN ({s.ids()})`."""
        return ",".join(str(i) for i in self.net_ids) or "NULL"


class SharedProxy:
    """A mitmdump (upstream: `emulator`, unless `upstream` is False) recording one session under its
    own CAPSEM_HOME `home` (its config.yaml: `config`)."""

    def __init__(self, emulator, work: Path, args: list[str] | None = None, config: str | None = None,
                 upstream: bool = True) -> None:  # fmt: skip
        self.emulator = emulator
        self.home = work / "capsem-home"
        if config is not None:
            self.home.mkdir(parents=True, exist_ok=True)
            (self.home / "config.yaml").write_text(config)
        with environ(CAPSEM_HOME=str(self.home)):
            self.proxy: Mitmdump = start_mitmdump(
                confdir=seeded_confdir(work / "conf"), log_path=work / "mitmdump.log",
                args=[*(["--mode", f"upstream:{emulator.proxy_url}",
                         "--set", f"ssl_verify_upstream_trusted_ca={emulator.ca_path}"] if upstream else []),
                      *(args or [])],
            )  # fmt: skip
        self.db = only_session(self.home)
        self.scenarios: dict[str, Scenario] = {}
        self.code: int | None = None

    def run(self, name: str, traffic: Callable[[Mitmdump], Any],
            flows: int | Callable[[Any], int] | None = None) -> Scenario:  # fmt: skip
        """`traffic(proxy)` as scenario `name`, on a cleared emulator log; returns once its `flows`
        net_events (default: one per exchange the emulator logged; a function: of what `traffic`
        returned) are recorded."""
        self.emulator.clear()
        before = self._net_ids()
        result = traffic(self.proxy)
        exchanges = self.emulator.exchanges()
        want = len(exchanges) if flows is None else flows(result) if callable(flows) else flows
        deadline = time.monotonic() + 30
        while len(new := [i for i in self._net_ids() if i not in before]) < want:
            assert time.monotonic() < deadline, f"{name}: {len(new)} of {want} flows recorded"
            time.sleep(0.02)
        self.scenarios[name] = Scenario(result, exchanges, sorted(new))
        self.emulator.clear()
        return self.scenarios[name]

    def scenario(self, name: str) -> Scenario:
        """Scenario `name`, once mitmdump has stopped cleanly (exit 0, no addon error in its log)."""
        assert self.code == 0, self.proxy.log()[-3000:]
        assert_clean_log(self.proxy.log())
        return self.scenarios[name]

    def exchanges(self, name: str) -> tuple[Path, Scenario, list[dict]]:
        """The shared session.db, scenario `name` (checked as `scenario` checks it) and its
        model-call exchanges."""
        s = self.scenario(name)
        return self.db, s, s.model_exchanges

    def model_calls(self, s: Scenario, columns: str = "*") -> list[dict]:
        """The model_calls rows of scenario `s`, in order."""
        return rows(
            self.db, f"SELECT {columns} FROM model_calls WHERE net_event_id IN ({s.ids()}) ORDER BY id"
        )

    def stop(self) -> None:
        """Stop mitmdump (the session ends and is rolled up): its exit code in `code`."""
        self.code = self.proxy.stop()

    def _net_ids(self) -> set[int]:
        return {r["id"] for r in rows(self.db, "SELECT id FROM net_events")}


def recorded_home(emulator, work: Path, traffic: Callable[[Mitmdump], Any]) -> Path:
    """A CAPSEM_HOME holding one session, `traffic` through a SharedProxy that stopped cleanly: for
    a module fixture whose tests each copy it (shutil.copytree) into their own CAPSEM_HOME."""
    shared = SharedProxy(emulator, work)
    try:
        shared.run("recording", traffic)
    finally:
        shared.stop()
    shared.scenario("recording")  # exit 0, no addon error in its log
    return shared.home
