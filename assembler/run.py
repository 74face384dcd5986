"""`capsem run -- <agent command>`: record one agent run as one session.

Starts mitmdump with the capsem addon on a free loopback port, runs the agent with the proxy
and mitmproxy's CA set in its environment (the variables Python, Node, curl, git and the
coding-agent CLIs read), records workspace file changes (`fs_events`) and the agent's process
tree (`proc_samples`, anomalies in `proc_anomalies`: assembler/procdiag), passes the agent's
exit code through, and ends the session cleanly
when the agent exits or the user presses Ctrl-C. mitmproxy's CA is kept in
`$CAPSEM_HOME/mitmproxy`, so it is created once and stays the same between runs.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from addons.credentials import Brokered, broker_env, load_secrets
from assembler.fswatch import WorkspaceWatcher
from assembler.procdiag import Diagnostics, ProcessSampler, diagnostics_settings, finish, scrubber_for
from capsem.config import ConfigError
from capsem.ids import new_session_id
from capsem.mitm import Mitmdump, MitmdumpError, start_mitmdump
from capsem.paths import capsem_home, session_db_path, session_dir, user_config_path

logger = logging.getLogger(__name__)

# Where each runtime looks for a proxy and for extra trusted CAs.
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy")
CA_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CODEX_CA_CERTIFICATE",
           "GIT_SSL_CAINFO", "AWS_CA_BUNDLE", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH")  # fmt: skip


@dataclass
class RunResult:
    session_id: str
    exit_code: int
    log_path: Path
    diagnostics: Diagnostics | None = None
    """Process samples and anomalies (None when `diagnostics.enabled` is false)."""


def agent_variables(proxy_url: str, ca_cert: Path) -> dict[str, str]:
    """The variables `capsem run` sets for the agent: the proxy and the CA, for every runtime."""
    env = dict.fromkeys(PROXY_VARS, proxy_url) | dict.fromkeys(CA_VARS, str(ca_cert))
    env["NODE_USE_ENV_PROXY"] = "1"  # Node >= 24 honours HTTPS_PROXY for fetch with this
    env["CAPSEM_PROXY"] = proxy_url
    return env


def agent_env(proxy: Mitmdump, base: dict[str, str] | None = None) -> dict[str, str]:
    """The agent's environment: proxy and CA variables set, everything else inherited."""
    return dict(os.environ if base is None else base) | agent_variables(proxy.url, proxy.ca_cert)


def _tidy_up() -> None:
    """Retention as Capsem applies it at start-up (compress sessions finished over a day ago, cull
    by the configured rules); a failure is only a warning. Runs beside the agent, never in mitmdump."""
    try:
        from assembler.retention import auto_retention

        report = auto_retention()
        for error in report.errors if report else []:
            logger.warning("capsem: retention: %s", error)
    except Exception as exc:  # housekeeping must not disturb the run
        logger.warning("capsem: retention failed: %r", exc)


def _brokered() -> list[Brokered]:
    """The configured credentials with their real values (`capsem run --broker`)."""
    from capsem.settings import load

    settings = load()
    if not settings.credentials.entries:
        raise ConfigError("--broker: no credentials are configured; add a credentials: section to "
                          f"{user_config_path()} (see config/default.yaml)")  # fmt: skip
    return load_secrets(settings)


def _wait_for_capture(proxy: Mitmdump, timeout: float = 20.0) -> None:
    """Wait until the addon has opened its session (so the agent's first request is recorded)."""
    deadline = time.monotonic() + timeout
    while "capsem: recording session" not in proxy.log():
        if proxy.process.poll() is not None or time.monotonic() > deadline:
            raise MitmdumpError(f"the capsem addon did not start a session:\n{proxy.log()[-3000:]}")
        time.sleep(0.05)


def run_agent(
    command: list[str],
    *,
    workspace: Path | None = None,
    mitmdump_args: str = "",
    session_id: str | None = None,
    broker: bool = False,
) -> RunResult:
    """Run `command` through a fresh capsem session; return its id and the agent's exit code.

    `broker`: the agent gets the placeholders of the configured credentials instead of their
    real values (which only mitmdump holds); a source that is missing fails here, first.
    """
    diagnostics = diagnostics_settings()  # a bad setting fails before anything starts
    brokered = _brokered() if broker else None
    tidy = threading.Thread(target=_tidy_up, name="capsem-retention", daemon=True)
    tidy.start()
    session_id = session_id or new_session_id()
    folder = session_dir(session_id)
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / "mitmdump.log"
    proxy = start_mitmdump(
        confdir=capsem_home() / "mitmproxy",
        log_path=log_path,
        args=[
            "--set", f"capsem_session_id={session_id}", "--set", "capsem_mode=run",
            "--set", f"capsem_command={shlex.join(command)}", *shlex.split(mitmdump_args),
        ],
    )  # fmt: skip
    watcher: WorkspaceWatcher | None = None
    sampler: ProcessSampler | None = None
    report: Diagnostics | None = None
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the agent; we clean up after
    try:
        _wait_for_capture(proxy)
        watcher = WorkspaceWatcher(workspace or Path.cwd(), session_db_path(session_id))
        watcher.start()
        env = agent_env(proxy)
        if brokered is not None:
            env, removed = broker_env(env, brokered)
            for name in removed:
                logger.warning("capsem: %s is not passed to the agent: it holds a brokered key", name)
        try:
            agent = subprocess.Popen(command, cwd=workspace, env=env)
        except OSError as exc:
            raise RuntimeError(f"cannot start {command[0]!r}: {exc}") from exc
        if diagnostics.enabled:
            sampler = ProcessSampler(agent.pid, session_db_path(session_id),
                                     interval_ms=diagnostics.sample_interval_ms, scrubber=scrubber_for(env))  # fmt: skip
            sampler.start()
        code = agent.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        if sampler is not None:
            report = finish(sampler, warn=False)  # stops sampling, stores the anomalies
        if watcher is not None:
            watcher.stop()  # before mitmdump stops: the rollup counts the file events
        proxy.stop()
        if sampler is not None and report is not None and report.error:
            report = finish(sampler)  # session.db was busy; mitmdump has closed it now
        tidy.join(60)
    return RunResult(session_id, code, log_path, report)
