"""`capsem replay SESSION -- AGENT`: run an agent as `capsem run` does, answered from a recording.

The replay server (server.py) is started on loopback and made mitmdump's upstream, so the replay
is captured by the usual path into a session of its own, linked to the original (`replay_of` in
main.db's `sessions` and in the replay's `session_meta`, with `replay_matched`, `replay_missed`,
`replay_live` and `replay_first_miss`).
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from assembler.replay.recording import load
from assembler.replay.server import Options, Replayer, ReplayServer, Report
from capsem.emulator import Emulator
from capsem.paths import session_db_path
from capsem.redact import Scrubber
from capsem.rollup import open_main

if TYPE_CHECKING:
    from assembler.run import AgentSignals, RunResult

logger = logging.getLogger(__name__)

PLACEHOLDER_KEYS = {"ANTHROPIC_API_KEY": "sk-ant-capsem-replay", "OPENAI_API_KEY": "sk-capsem-replay",
                    "GEMINI_API_KEY": "capsem-replay"}  # fmt: skip
"""Keys an agent gets when its environment has none, for the providers whose calls the recording
made with an API key (`Recording.keys`): it needs one to start, and nothing leaves the machine, so
no real key is needed. An agent that logged in otherwise (Claude Code's OAuth) gets none. With
`--live` the agent's own keys are needed and nothing is added."""


@dataclass
class ReplayResult:
    run: RunResult
    original: str
    report: Report
    model_calls: int
    """Model calls in the recording."""


class _Upstream:
    """The replay server as `run_agent`'s upstream."""

    def __init__(self, server: Emulator, original: str, env: dict[str, str], emulated: bool) -> None:
        self.server, self.original, self.env, self.emulated = server, original, env, emulated
        self.proxy_url, self.ca_path = server.proxy_url, server.ca_path

    def started(self, session_id: str) -> None:
        try:
            main = open_main()
            try:
                with main:
                    main.execute(
                        "UPDATE sessions SET replay_of = ? WHERE id = ?", (self.original, session_id)
                    )
            finally:
                main.close()
        except Exception as exc:  # a busy main.db must not stop the replay
            logger.warning("capsem: storing replay_of failed: %r", exc)


def replay(original: str, command: list[str], *, options: Options, workspace: Path | None = None,
           signals: AgentSignals | None = None, mitmdump_args: str = "", name: str | None = None,
           tags: tuple[str, ...] = ()) -> ReplayResult:  # fmt: skip
    """Run `command` answered from session `original`; the report says what matched and missed.

    Raises:
        SessionNotFound, SessionDbError, RecordingError: the original cannot be read.
        and whatever `assembler.run.run_agent` raises.
    """
    import os

    from assembler.run import check_agent, run_agent

    check_agent(command, workspace)
    recording = load(original)
    # the replay's workspace is put aside only where the recording's is (bare mitmdump keeps none)
    here = str((workspace or Path.cwd()).resolve()) if recording.workspace else None
    replayer = Replayer(recording, options, here)
    keys = recording.keys if options.live_from is None else set()
    env = {k: v for k, v in PLACEHOLDER_KEYS.items() if k in keys and not os.environ.get(k)}
    server = Emulator(server=ReplayServer(replayer)).start()
    upstream = _Upstream(server, original, env, emulated=options.live_from is None)  # --live spends for real
    try:
        result = run_agent(command, workspace=workspace, mitmdump_args=mitmdump_args, signals=signals, name=name,
                           tags=tags, upstream=upstream)  # fmt: skip
    finally:
        server.stop()
    report = replayer.report
    _store_meta(result.session_id, original, report)
    return ReplayResult(result, original, report, recording.model_calls)


def first_miss(report: Report) -> str | None:
    """Where the replay first diverged from the recording, in words (None: it never did)."""
    if not report.missed:
        return None
    miss = report.missed[0]
    what = f"model call {miss.number}" if miss.number is not None else "an MCP call"
    compared = f" (compared with recorded call {miss.expected})" if miss.expected is not None else ""
    return f"{what} to {miss.endpoint}{compared}: {miss.difference}"


def _store_meta(session_id: str, original: str, report: Report) -> None:
    """The replay's link and counts in its session_meta (mitmdump has closed session.db by now)."""
    values = {"replay_of": original, "replay_matched": str(report.matched), "replay_missed": str(len(report.missed)),
              "replay_live": str(report.live), "replay_first_miss": Scrubber().scrub(first_miss(report)) or ""}  # fmt: skip
    from capsem.store.writer import SessionWriter  # the store's one writer: the values are chained

    try:
        writer = SessionWriter(session_db_path(session_id), timeout=10)
        try:
            writer.set_meta(**values)
            if not writer.commit():
                raise sqlite3.Error(writer.health.last_error)
        finally:
            writer.close(checkpoint=False)
    except sqlite3.Error as exc:
        logger.warning("capsem: storing the replay's counts in session_meta failed: %r", exc)
