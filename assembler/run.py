"""`capsem run -- <agent command>`: record one agent run as one session.

Starts mitmdump with the capsem addon on a free loopback port, runs the agent with the proxy
and mitmproxy's CA set in its environment (the variables Python, Node, curl, git and the
coding-agent CLIs read), records workspace file changes (`fs_events`) and the agent's process
tree (`proc_samples`, anomalies in `proc_anomalies`: assembler/procdiag), passes the agent's
exit code through, and ends the session cleanly when the agent exits. mitmproxy's CA is kept in
`$CAPSEM_HOME/mitmproxy`, so it is created once and stays the same between runs.

Signals, as any wrapper (`time`, `uv run`) handles them: the agent runs in capsem's process group
with the default dispositions, so a terminal's Ctrl-C reaches it directly; mitmdump runs in a
session of its own, so the same Ctrl-C never reaches it and it records until the agent has
exited. A second Ctrl-C kills the agent's process group (its process tree when it shares
capsem's group). SIGTERM or SIGHUP to `capsem run` is passed to the agent (killed after
`TERM_GRACE` seconds). Either way the session ends `stopped`, the summary is printed and `capsem
run` exits with the agent's status (130 after a Ctrl-C).
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from addons.proxy.credentials import Brokered, broker_env, load_secrets
from capsem.config import ConfigError
from capsem.ids import SESSION_ID, new_session_id
from capsem.mitm import CAPTURING, Mitmdump, spawn_mitmdump, wait_for_mitmdump
from capsem.paths import capsem_home, session_db_path, session_dir, user_config_path
from capsem.private import private_dir
from capsem.rollup import open_main, set_exit_code
from capsem.settings import SettingsError, load


class Upstream(Protocol):
    """A loopback server `run_agent` sends every request to (`capsem replay`'s replay server)."""

    proxy_url: str
    ca_path: str
    env: dict[str, str]
    emulated: bool
    """Whether its answers cost nothing (a replay from the recording, not `--live`): the session is
    marked emulated, so budgets and cost totals leave it out."""

    def started(self, session_id: str) -> None: ...


if TYPE_CHECKING:  # imported in run_agent while mitmdump starts (the agent's start delay)
    from assembler.ask_notice import AskNotices
    from assembler.context import RunContext
    from assembler.fswatch import WorkspaceWatcher
    from assembler.procdiag import Diagnostics, ProcessSampler
    from assembler.retention import RetentionReport
    from capsem.emulator import Emulator

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
    retention: RetentionReport | None = None
    """What the start-up retention did (None: switched off, skipped, or failed)."""


def agent_variables(proxy_url: str, ca_cert: Path) -> dict[str, str]:
    """The variables `capsem run` sets for the agent: the proxy and the CA, for every runtime."""
    env = dict.fromkeys(PROXY_VARS, proxy_url) | dict.fromkeys(CA_VARS, str(ca_cert))
    env["NODE_USE_ENV_PROXY"] = "1"  # Node >= 24 honours HTTPS_PROXY for fetch with this
    env["CAPSEM_PROXY"] = proxy_url
    return env


def agent_env(proxy: Mitmdump, base: dict[str, str] | None = None) -> dict[str, str]:
    """The agent's environment: proxy and CA variables set, everything else inherited."""
    return dict(os.environ if base is None else base) | agent_variables(proxy.url, proxy.ca_cert)


def _tidy_up(out: list[RetentionReport]) -> None:
    """Retention as Capsem applies it at start-up (compress sessions finished over a day ago, cull
    by the configured rules), its report appended to `out`; a failure is only a warning. Runs beside
    the agent, never in mitmdump."""
    try:
        from assembler.retention import auto_retention

        report = auto_retention()
        for error in report.errors if report else []:
            logger.warning("capsem: retention: %s", error)
        if report is not None:
            out.append(report)
    except Exception as exc:  # housekeeping must not disturb the run
        logger.warning("capsem: retention failed: %r", exc)


class AgentNotFound(RuntimeError):
    """The agent command cannot be run; `exit_code` is what a shell would say (127 or 126)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def check_agent(command: list[str], workspace: Path | None = None) -> str:
    """The path of the program `command` runs, found as a shell would (PATH, or a path relative to
    the workspace).

    Raises:
        AgentNotFound: `command not found` (127) or `permission denied` (126).
    """
    name = command[0]
    if "/" in name:
        path = Path(name) if Path(name).is_absolute() else (workspace or Path.cwd()) / name
        if not path.exists():
            raise AgentNotFound(f"{name}: no such file or directory", 127)
        if path.is_dir() or not os.access(path, os.X_OK):
            raise AgentNotFound(f"{name}: permission denied (not an executable file)", 126)
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise AgentNotFound(f"{name}: command not found", 127)
    return found


def mitmdump_options(
    session_id: str, command: list[str], extra: str, *, emulated: bool = False
) -> tuple[str, list[str]]:
    """(session id, mitmdump arguments): capsem's own `--set capsem_*` options plus `extra`. An
    option `extra` sets itself replaces capsem's (mitmdump would drop the addon silently on a
    duplicate); a `capsem_session_id` there names the session.

    Raises:
        ValueError: unparsable `extra`, or a session id that is not YYYYMMDD-HHMMSS-xxxx.
    """
    try:
        args = shlex.split(extra)
    except ValueError as exc:
        raise ValueError(f"--mitmdump-args {extra!r}: {exc}") from exc
    given: dict[str, str] = {}
    for i, arg in enumerate(args):
        spec = args[i + 1] if arg == "--set" and i + 1 < len(args) else arg.removeprefix("--set=")
        if (arg == "--set" or arg.startswith("--set=")) and "=" in spec:
            name, value = spec.split("=", 1)
            given[name.strip()] = value
    if "capsem_session_id" in given:
        session_id = given["capsem_session_id"]
        if not SESSION_ID.fullmatch(session_id):
            raise ValueError(f"--mitmdump-args: capsem_session_id {session_id!r} is not YYYYMMDD-HHMMSS-xxxx")
    ours = {"capsem_session_id": session_id, "capsem_mode": "run", "capsem_command": shlex.join(command)}
    if emulated:  # nothing it answers is spent: budgets and cost totals leave the session out
        ours["capsem_emulated"] = "true"
    options = [x for name, value in ours.items() if name not in given for x in ("--set", f"{name}={value}")]
    return session_id, options + args


TERM_GRACE = 5.0
"""Seconds an agent has to exit after the SIGTERM or SIGHUP `capsem run` passed on, before it is killed."""


class AgentSignals:
    """What `capsem run` does with SIGINT, SIGTERM and SIGHUP (installed for the whole run)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.agent: subprocess.Popen[bytes] | None = None
        self.interrupts = 0
        self._previous: dict[int, object] = {}

    def __enter__(self) -> AgentSignals:
        self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: object) -> None:
        agent = self.agent
        if agent is None:  # before the agent started: give up the start
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + signum)
        if agent.poll() is not None:
            return  # the agent has exited: the session is being finished, let it
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts > 1:
                _say("capsem: second Ctrl-C: killing the agent's process group")
                kill_agent(agent)
            else:
                if not _terminal_sent_it():  # `kill -INT`: pass it on as the terminal would have
                    _signal(agent.pid, signal.SIGINT)
                _say("capsem: Ctrl-C: the session records until the agent exits (Ctrl-C again kills it)")
            return
        name = signal.Signals(signum).name
        _say(f"capsem: {name}: passed on to the agent; recording until it exits")
        _signal(agent.pid, signum)
        timer = threading.Timer(TERM_GRACE, lambda: agent.poll() is None and kill_agent(agent))
        timer.daemon = True
        timer.start()


def kill_agent(agent: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the agent's process group, or to its process tree when it shares ours."""
    try:
        group = os.getpgid(agent.pid)
    except OSError:
        return
    if group != os.getpgrp():
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
        return
    import psutil

    try:
        tree = [psutil.Process(agent.pid), *psutil.Process(agent.pid).children(recursive=True)]
    except psutil.Error:
        tree = []
    for proc in tree:
        try:
            proc.kill()
        except psutil.Error:
            pass


def _terminal_sent_it() -> bool:
    """Whether our process group is the foreground group of our terminal (a Ctrl-C there reached
    the agent too)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass


def _say(text: str) -> None:
    try:
        sys.stderr.write(f"\n{text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _wait_for_agent(agent: subprocess.Popen[bytes]) -> int:
    """The agent's exit code as a shell reports it (128 + N when killed by signal N)."""
    code = agent.wait()
    return 128 - code if code < 0 else code


def _brokered() -> list[Brokered]:
    """The configured credentials with their real values (`capsem run --broker`)."""
    from capsem.settings import load

    settings = load()
    if not settings.credentials.entries:
        raise ConfigError("--broker: no credentials are configured; add a credentials: section to "
                          f"{user_config_path()} (see config/default.yaml)")  # fmt: skip
    return load_secrets(settings)


# Long on purpose: the run's steps in the order they happen (checks, mitmdump, the watcher, the
# agent, the sampler; then the end, in `finally`), each a call or two; split, the order that
# matters (what starts before the agent, what ends before mitmdump) would be spread out.
def run_agent(
    command: list[str],
    *,
    workspace: Path | None = None,
    mitmdump_args: str = "",
    session_id: str | None = None,
    broker: bool = False,
    signals: AgentSignals | None = None,
    emulator: bool = False,
    name: str | None = None,
    tags: tuple[str, ...] = (),
    upstream: Upstream | None = None,
) -> RunResult:
    """Run `command` through a fresh capsem session; return its id and the agent's exit code.

    `broker`: the agent gets the placeholders of the configured credentials instead of their
    real values (which only mitmdump holds); a source that is missing fails here, first.
    `signals`: installed by the caller, who leaves them in place until its summary is printed (a
    late Ctrl-C must not cut it short); by default they are installed for this call only.
    `emulator`: every provider call goes to the built-in emulator (scripted answers, tool loops,
    every API; nothing leaves the machine), and the agent gets placeholder API keys.
    `name`, `tags`: stored with the workspace and its git repository, branch and commit.
    `upstream`: a loopback server of the caller's that every request goes to instead (mitmdump's
    upstream mode, as with the emulator: `capsem replay`); its `started` is called with the session
    id once mitmdump runs, and its `env` is added to the agent's environment.

    Raises:
        AgentNotFound: before anything starts, when the command cannot be run.
        ValueError: bad `mitmdump_args`.
        MitmdumpError: mitmdump did not start (the message says why).
    """
    check_agent(command, workspace)
    from assembler.context import check_label, run_context

    for tag in (name, *tags) if name else tags:
        check_label("name" if tag is name else "tag", tag)
    if (emulator or upstream) and "--mode" in mitmdump_args:
        raise ValueError(
            f"{'--emulator' if emulator else 'capsem replay'} sets mitmdump's --mode (upstream to "
            f"{'the emulator' if emulator else 'the replay server'}): drop --mode from --mitmdump-args"
        )
    emu = _start_emulator() if emulator else None
    server = emu if emu is not None else upstream
    if server is not None:
        mode = f"--mode upstream:{server.proxy_url} --set {shlex.quote('ssl_verify_upstream_trusted_ca=' + server.ca_path)}"
        mitmdump_args = f"{mode} {mitmdump_args}"
    emulated = emulator or (upstream is not None and upstream.emulated)
    session_id, args = mitmdump_options(
        session_id or new_session_id(), command, mitmdump_args, emulated=emulated
    )
    try:
        diagnostics = load().diagnostics  # a bad setting fails before anything starts
    except SettingsError as exc:
        raise RuntimeError(str(exc)) from exc
    brokered = _brokered() if broker else None
    folder = session_dir(session_id)
    private_dir(folder)
    log_path = folder / "mitmdump.log"
    confdir = capsem_home() / "mitmproxy"
    own = signals is None
    if signals is None:  # see the module's docstring
        signals = AgentSignals().__enter__()
    # first: it takes the longest; in a session of its own, so a terminal's Ctrl-C never reaches it
    process = spawn_mitmdump(confdir=confdir, log_path=log_path, args=args, new_session=True)
    context = run_context(workspace or Path.cwd(), name, tags)  # while mitmdump starts
    watcher: WorkspaceWatcher | None = None
    sampler: ProcessSampler | None = None
    proxy: Mitmdump | None = None
    tidied: list[RetentionReport] = []
    tidy = threading.Thread(target=_tidy_up, args=(tidied,), name="capsem-retention", daemon=True)
    code: int | None = None
    notices: AskNotices | None = None
    try:
        from assembler.fswatch import WorkspaceWatcher

        # while mitmdump starts: registering a large tree's folders takes a second, holding the GIL
        watcher = WorkspaceWatcher(workspace or Path.cwd(), session_db_path(session_id))
        watcher.start()
        from assembler.ask_notice import AskNotices
        from assembler.procdiag import ProcessSampler
        from assembler.procdiag.sampler import secrets_of

        proxy = wait_for_mitmdump(process, confdir=confdir, log_path=log_path, ready=CAPTURING)
        _record_context(session_id, context)
        env = agent_env(proxy) | (EMULATOR_KEYS if emu is not None else {})
        if upstream is not None:
            upstream.started(session_id)
            env |= upstream.env
        watcher.ready()  # before the agent: its first file change is recorded
        if brokered is not None:
            env, removed = broker_env(env, brokered)
            for variable in removed:
                logger.warning("capsem: %s is not passed to the agent: it holds a brokered key", variable)
        try:
            agent = signals.agent = subprocess.Popen(command, cwd=workspace, env=env)
        except OSError as exc:
            raise AgentNotFound(f"{command[0]}: {exc.strerror or exc}", 126) from exc
        notices = AskNotices(session_id, _say).start()  # a request an `ask` rule holds: say so
        tidy.start()  # after the agent started: housekeeping never delays it
        if diagnostics.enabled:
            sampler = ProcessSampler(agent.pid, session_db_path(session_id),
                                     interval_ms=diagnostics.sample_interval_ms, learn=secrets_of(env))  # fmt: skip
            sampler.start()
        code = _wait_for_agent(agent)
    finally:
        if notices is not None:
            notices.stop()
        report = _stop_recording(process, proxy, watcher, sampler)
        if code is not None:
            _store_exit_code(session_id, code)
        if tidy.is_alive():
            tidy.join(60)
        if emu is not None:
            emu.stop()
        if own:
            signals.__exit__()
    return RunResult(session_id, code, log_path, report, tidied[0] if tidied else None)


EMULATOR_KEYS = {"ANTHROPIC_API_KEY": "sk-ant-capsem-emulator", "OPENAI_API_KEY": "sk-capsem-emulator",
                 "GEMINI_API_KEY": "capsem-emulator-key", "GOOGLE_API_KEY": "capsem-emulator-key"}  # fmt: skip
"""The keys an agent gets under `capsem run --emulator` (its real ones never leave capsem)."""


def _start_emulator() -> Emulator:
    """The built-in provider emulator, started on loopback (`capsem run --emulator`)."""
    from capsem.emulator import FRIENDLY_TEXT, Emulator
    from capsem.emulator.reply import parse_controls

    # CAPSEM_EMULATOR_CONTROLS (`scenario=destroy; tools=2`, as the `x-emulator` header): for tests
    # that need another scenario from agents that cannot send the header
    controls = parse_controls(
        os.environ.get("CAPSEM_EMULATOR_CONTROLS"), {"text": FRIENDLY_TEXT, "scenario": "agent"}
    )
    return Emulator(defaults=controls).start()


def _stop_recording(process: subprocess.Popen[bytes], proxy: Mitmdump | None, watcher: WorkspaceWatcher | None,
                    sampler: ProcessSampler | None) -> Diagnostics | None:  # fmt: skip
    """End the recording once the agent has exited. The recorder is session.db's one writer: the
    last samples, their anomalies and the last file events are sent to it and committed before
    mitmdump stops, so the rollup counts them; only what no recorder took (it died for good) is
    written here, after mitmdump has stopped."""
    from assembler.procdiag import finish
    from assembler.procdiag.sampler import FINAL_WRITE_TIMEOUT

    deadline = time.monotonic() + FINAL_WRITE_TIMEOUT  # one wait for a recorder that cannot commit
    report = finish(sampler, warn=False, deadline=deadline) if sampler is not None else None
    if watcher is not None:  # a mitmdump that never started has no recorder to wait for, nor a session
        watcher.stop(timeout=max(0.0, deadline - time.monotonic()) if proxy is not None else 0.0)
    if proxy is not None:
        proxy.stop()
    elif process.poll() is None:
        process.kill()
        process.wait()
    if proxy is not None and watcher is not None and watcher.feed.waiting:
        _write_left_over(watcher)
    if sampler is not None and report is not None and report.error:
        report = finish(sampler, recorder_gone=True)
    return report


def _write_left_over(watcher: WorkspaceWatcher) -> None:
    """File events no recorder took (it died for good): written once mitmdump has stopped."""
    from assembler.offline_write import write_directly

    try:
        write_directly(watcher.db_path, [watcher.feed])
    except Exception as exc:
        logger.warning("capsem: %d file events could not be recorded: %r", watcher.feed.pending, exc)


def _record_context(session_id: str, context: RunContext) -> None:
    from assembler.context import record_context

    try:
        record_context(session_id, context)
    except Exception as exc:  # a busy main.db must not stop the run
        logger.warning("capsem: storing the run's workspace, git branch, name and tags failed: %r", exc)


def _store_exit_code(session_id: str, code: int) -> None:
    try:
        main = open_main()
        try:
            set_exit_code(main, session_id, code)
        finally:
            main.close()
    except Exception as exc:  # the run is over; a busy main.db must not turn it into a failure
        logger.warning("capsem: storing the agent's exit code failed: %r", exc)
