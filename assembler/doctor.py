"""`capsem doctor [-- AGENT…]`: check what recording needs, and say what to do about each problem.

The checks, in order: mitmdump and the addon load; the compiled fast path is in use (a warning on
the pure-Python path: the same rows, more CPU); the configuration is valid; `$CAPSEM_HOME` is
writable with free space, and closed to other users; mitmproxy's CA is there (made here when there
is none yet, as the first `capsem run` would); the price table, and whether it prices the models
seen lately. With an agent command: the agent's runtime and the variables `capsem run` gives it.
Then, when nothing failed, a live self-test: one streamed request through a fresh mitmdump with the
addon to the built-in emulator, recorded and read back; it runs in a temporary CAPSEM_HOME holding
a copy of your config.yaml and prices.json (your sessions are not touched) with your CA, and, with
an agent command, the agent's runtime makes one HTTPS request through the same mitmdump with
exactly the environment `capsem run` gives the agent, which proves that the runtime trusts the CA.

Each check gives one `Finding`: `ok`; `warn` (recording works, something deserves attention);
`fail` (recording would not work, or would lose data); `skip`. A problem says what to do about it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import re
import shlex
import shutil
import sqlite3
import ssl
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

from assembler.cli_support import counted
from assembler.runtimes import (
    LABELS,
    PROBE_AGENT,
    READS,
    AgentNotFound,
    ProbeResult,
    Runtime,
    probe,
    runtime_of,
)
from capsem.mitm import ADDON_PATH, Mitmdump, MitmdumpError, mitmdump_executable, start_mitmdump
from capsem.paths import capsem_home, main_db_path, sessions_dir
from capsem.private import make_private, open_to_others, private_dir

Status = Literal["ok", "warn", "fail", "skip"]

MIN_FREE_BYTES = 1 << 30
"""Below this much free disk under $CAPSEM_HOME, a warning."""
STALE_DAYS = 180
"""A price table older than this is a warning (the models seen lately without a price are the sharper test)."""
RECENT_DAYS = 30
"""The models of the sessions started this many days back are checked against the price table."""
CA_NAME = "mitmproxy-ca-cert.pem"
CA_KEY_NAME = "mitmproxy-ca.pem"
"""mitmproxy's CA key and certificate; mitmdump signs with it, and makes a new CA only when it is missing."""
SELF_TEST_MODEL = "claude-sonnet-4-5"
DENIED = "denied by your policy rule"


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    detail: str
    fix: str | None = None
    """What to do about a problem (None when there is none)."""


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    def of(self, status: Status) -> list[Finding]:
        return [f for f in self.findings if f.status == status]

    @property
    def ok(self) -> bool:
        """Everything holds: no check failed (warnings allowed)."""
        return not self.of("fail")

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [asdict(f) for f in self.findings]}


def ca_dir() -> Path:
    """mitmproxy's confdir for `capsem run` (its CA): `$CAPSEM_HOME/mitmproxy`."""
    return capsem_home() / "mitmproxy"


def run_doctor(agent: Sequence[str] = (), on_finding: Callable[[Finding], None] | None = None) -> Report:
    """Run every check (the self-test only when none failed); `on_finding` sees each as it comes."""
    report = Report()

    def add(finding: Finding) -> None:
        report.findings.append(finding)
        if on_finding is not None:
            on_finding(finding)

    for check in (check_mitmdump, check_fast_path, check_config, check_home, check_ca, check_prices):
        add(check())
    if (credentials := check_credentials()) is not None:
        add(credentials)
    runtime: Runtime | None = None
    if agent:
        try:
            runtime = runtime_of(list(agent))
        except AgentNotFound as exc:
            add(Finding("agent", "fail", str(exc), "install the agent, or give the path to its executable"))
        else:
            add(agent_finding(agent[0], runtime))
    if not report.ok:
        add(Finding("self-test", "skip", "not run: fix the problems above first"))
        return report
    for finding in self_test(runtime):
        add(finding)
    return report


# --- the checks ----------------------------------------------------------------------------------


def check_mitmdump() -> Finding:
    """mitmdump is there, and the addon imports in this Python (the one `capsem run` starts it with)."""
    exe = mitmdump_executable()
    path = exe if os.path.isabs(exe) else shutil.which(exe)
    if path is None:
        return Finding("mitmdump", "fail", f"mitmdump is neither next to {sys.executable} nor on PATH",
                       "install capsem with its dependencies (make install, or pip install -e .)")  # fmt: skip
    try:
        importlib.import_module("addons.proxy.capture")
    except Exception as exc:
        return Finding("mitmdump", "fail", f"the addon ({ADDON_PATH}) does not import: {exc!r}",
                       f"reinstall capsem in the Python that runs {path} (make install, or pip install -e .)")  # fmt: skip
    detail = f"mitmproxy {importlib.metadata.version('mitmproxy')} at {path}; the addon imports"
    on_path = shutil.which("mitmdump")
    if on_path is not None and os.path.realpath(on_path) != os.path.realpath(path):
        detail += f" (the mitmdump on your PATH is {on_path}: `mitmdump -s` needs capsem in its Python)"
    return Finding("mitmdump", "ok", detail)


def check_fast_path() -> Finding:
    """Which reading path the recorder takes: the compiled fast path, or pure Python (slower, the
    same rows), and how to get the fast one."""
    from capsem import native

    if native.why_not is None:
        return Finding("fast-path", "ok", native.status())
    fix = ("install a C compiler and the Python headers (e.g. gcc and python3-dev), then run `make install`"
           if native.why_not and "CAPSEM_NATIVE" not in native.why_not else "unset CAPSEM_NATIVE")  # fmt: skip
    return Finding("fast-path", "warn", native.status() + "; recording works, with more CPU", fix)


def check_config() -> Finding:
    from capsem.settings import SettingsError, load

    try:
        settings = load()
    except SettingsError as exc:
        return Finding("config", "fail", str(exc),
                       "correct that key (config/default.yaml documents each one); `capsem config check` "
                       "checks again")  # fmt: skip
    return Finding("config", "ok", "valid: " + ", ".join(str(p) for p in settings.files))


def check_home() -> Finding:
    """$CAPSEM_HOME (and its sessions/) can be written, main.db too, and the disk has room."""
    home = capsem_home()
    fix = "make it writable (permissions, a read-write mount), or point CAPSEM_HOME at a writable directory"
    try:
        private_dir(sessions_dir())
        with tempfile.NamedTemporaryFile(dir=sessions_dir(), prefix=".doctor-") as f:
            f.write(b"capsem")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        where = exc.filename or home
        return Finding(
            "CAPSEM_HOME", "fail", f"{home} cannot be written ({where}: {exc.strerror or exc})", fix
        )
    if main_db_path().exists():
        try:
            conn = sqlite3.connect(main_db_path(), timeout=2)
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.rollback()
            finally:
                conn.close()
        except sqlite3.Error as exc:
            return Finding("CAPSEM_HOME", "fail", f"{main_db_path()} cannot be written: {exc}",
                           "another process may hold it locked; else " + fix)  # fmt: skip
    free = shutil.disk_usage(home).free
    detail = f"{home} is writable; {free / (1 << 30):.1f} GB free"
    if exposed := open_to_others_under(home):
        shown = ", ".join(str(p) for p in exposed[:3]) + (", …" if len(exposed) > 3 else "")
        what = counted(len(exposed), "file or folder", "files and folders")
        return Finding("CAPSEM_HOME", "warn",
                       f"{detail}; but other users can read {what} in it, and so what it recorded ({shown})",
                       f"chmod -R go-rwx {shlex.quote(str(home))}")  # fmt: skip
    if free < MIN_FREE_BYTES:
        return Finding("CAPSEM_HOME", "warn", detail,
                       "free some space: `capsem vacuum` compresses and culls old sessions (retention: in "
                       "the config)")  # fmt: skip
    return Finding("CAPSEM_HOME", "ok", detail)


def open_to_others_under(home: Path) -> list[Path]:
    """`home` and what is under it that the group or other users may read, write or enter (capsem
    makes them 0700 and 0600; a home from before, or copied with another umask, may be open). What
    sits in a folder they cannot enter is out of their reach, whatever its own mode."""
    found = []
    for folder, dirs, files in os.walk(home):
        here = Path(folder)
        with contextlib.suppress(OSError):  # gone meanwhile (a session vacuumed)
            if open_to_others(here):
                found.append(here)
            if not here.stat().st_mode & 0o011:  # neither the group nor others may enter it
                dirs.clear()
                continue
        for name in files:
            with contextlib.suppress(OSError):
                if not (here / name).is_symlink() and open_to_others(here / name):
                    found.append(here / name)
        dirs.sort()
    return found


def check_ca() -> Finding:
    """mitmproxy's CA certificate, the file every agent is told to trust, matches the key mitmdump
    signs with and is valid; when there is no CA yet, one is made (as the first `capsem run` would)."""
    from cryptography import x509

    confdir = ca_dir()
    cert, key = confdir / CA_NAME, confdir / CA_KEY_NAME
    if not cert.exists() and not key.exists():
        try:
            from mitmproxy.certs import CertStore

            CertStore.from_store(private_dir(confdir), "mitmproxy", 2048)
            for made_here in confdir.iterdir():  # mitmproxy writes its certificates with the umask's mode
                make_private(made_here)
        except OSError as exc:
            return Finding("CA", "fail", f"there is no CA in {confdir} and none can be made: {exc.strerror or exc}",
                           "make CAPSEM_HOME writable (see above)")  # fmt: skip
        made = True
    else:
        made = False
    if not cert.exists():
        return Finding("CA", "fail",
                       f"{cert} is missing, while mitmdump still signs with {key}: every agent told to trust "
                       f"{CA_NAME} would fail TLS",
                       f"restore it: openssl x509 -in {key} -out {cert} (or remove {confdir} to make a new CA "
                       "at the next run; anything that trusted the old one must then trust the new)")  # fmt: skip
    try:
        trusted = x509.load_pem_x509_certificate(cert.read_bytes())
        signing = x509.load_pem_x509_certificates(key.read_bytes())[0] if key.exists() else None
    except (OSError, ValueError) as exc:
        return Finding("CA", "fail", f"{cert} cannot be read as a PEM certificate: {exc}",
                       f"remove {confdir} to make a new CA at the next run")  # fmt: skip
    if signing is not None and signing != trusted:
        return Finding("CA", "fail", f"{cert} is not the certificate of the CA mitmdump signs with ({key})",
                       f"restore it: openssl x509 -in {key} -out {cert}")  # fmt: skip
    until = trusted.not_valid_after_utc
    if until <= datetime.now(UTC):
        return Finding("CA", "fail", f"{cert} expired on {until:%Y-%m-%d}",
                       f"remove {confdir} to make a new CA at the next run")  # fmt: skip
    return Finding("CA", "ok", f"{cert} (valid until {until:%Y-%m-%d}){'; made now' if made else ''}")


def check_prices() -> Finding:
    """The price table's date, and whether it prices the models of the sessions of the last days."""
    from pricing import load_table, price_call, provider_price_id, user_prices_path

    saved = user_prices_path()
    try:
        table = load_table()
    except (OSError, ValueError) as exc:
        return Finding("prices", "warn", f"{saved} cannot be used ({exc}); calls are priced by the bundled table",
                       "capsem update-prices --from FILE|URL installs a valid one; capsem update-prices goes back "
                       "to the bundled table")  # fmt: skip
    dated = re.search(r"data of (\d{4}-\d{2}-\d{2})", table.source)  # the table shipped in config/
    if dated and not saved.is_file():
        when, source = datetime.fromisoformat(dated.group(1)).replace(tzinfo=UTC), table.source
    else:
        import genai_prices.data

        stamp = (saved if saved.is_file() else Path(genai_prices.data.__file__)).stat().st_mtime
        when = datetime.fromtimestamp(stamp, UTC)
        source = f"{table.source}, {'saved' if saved.is_file() else 'installed'} {when:%Y-%m-%d}"
    age = (datetime.now(UTC) - when).days
    seen = _recent_models()
    priced = [(p, m) for p, m in seen if provider_price_id(p) is not None]
    unpriced = [f"{m} ({p})" for p, m in priced
                if price_call(provider=p, model=m, input_tokens=1000, output_tokens=1000, table=table) is None]  # fmt: skip
    local = len(seen) - len(priced)
    lately = f"seen in the last {RECENT_DAYS} days"
    if unpriced:
        detail = (f"{source}; {counted(len(unpriced), 'model')} of the {len(priced)} {lately} "
                  f"{'has' if len(unpriced) == 1 else 'have'} no known price: {', '.join(unpriced)}")  # fmt: skip
    elif priced:
        detail = (
            f"{source}; prices {'all ' if len(priced) > 1 else ''}{counted(len(priced), 'model')} {lately}"
        )
    else:
        detail = f"{source}; no priced model {lately}"
    if local:
        detail += f" ({counted(local, 'model')} of local or unpriced providers, never priced)"
    update = "capsem update-prices --from https://raw.githubusercontent.com/pydantic/genai-prices/main/prices/data.json"
    if unpriced:
        return Finding(
            "prices", "warn", detail, f"{update} (calls without a price are stored as NULL, never guessed)"
        )
    if age > STALE_DAYS:
        return Finding("prices", "warn", f"{detail}; the table is {age} days old", update)
    return Finding("prices", "ok", detail)


def _recent_models() -> list[tuple[str, str]]:
    """(provider, model) of the model calls in sessions started in the last RECENT_DAYS (main.db)."""
    from assembler.sessiondb import SessionDbError, open_path

    if not main_db_path().is_file():
        return []
    since = (datetime.now(UTC) - timedelta(days=RECENT_DAYS)).strftime("%Y-%m-%dT%H:%M:%S")
    try:
        with open_path(main_db_path()) as conn:
            rows = conn.execute(
                "SELECT a.provider, a.model FROM ai_usage a JOIN sessions s ON s.id = a.session_id "
                "WHERE s.created_at >= ? AND a.model != '' GROUP BY a.provider, a.model "
                "ORDER BY SUM(a.call_count) DESC",
                (since,),
            ).fetchall()
    except (SessionDbError, sqlite3.Error):
        return []
    return [(r["provider"], r["model"]) for r in rows]


def agent_finding(name: str, runtime: Runtime) -> Finding:
    """The agent's runtime and the variables `capsem run` gives it (and who reads each)."""
    from assembler.run import agent_variables

    given = agent_variables("http://127.0.0.1:PORT", ca_dir() / CA_NAME)
    reads = READS[runtime.kind]
    lines = [f"{name}: {LABELS[runtime.kind]} ({runtime.why})"]
    if reads:
        lines.append("capsem run gives it:")
        lines += [f"  {var}={given[var]} — {who}" for var, who in reads]
        return Finding("agent", "ok", "\n".join(lines))
    lines.append("capsem run gives it every proxy and CA variable: " + ", ".join(sorted(given)))
    return Finding("agent", "warn", "\n".join(lines),
                   "run it once with `capsem run` and check that its calls are recorded (capsem list-sessions)")  # fmt: skip


# --- the live self-test ---------------------------------------------------------------------------


def self_test(runtime: Runtime | None) -> list[Finding]:
    """One streamed request through a fresh mitmdump with the addon to the built-in emulator,
    recorded and read back; with `runtime`, its probe through the same mitmdump."""
    from assembler.run import agent_env
    from capsem.emulator import Emulator

    work = Path(tempfile.mkdtemp(prefix="capsem-doctor-"))
    home = work / "home"
    home.mkdir()
    for name in ("config.yaml", "prices.json"):
        if (capsem_home() / name).is_file():
            shutil.copy(capsem_home() / name, home / name)
    findings: list[Finding] = []
    with Emulator() as emu:
        try:
            proxy = start_mitmdump(
                confdir=ca_dir(), log_path=work / "mitmdump.log",
                args=["--mode", f"upstream:{emu.proxy_url}", "--set", f"ssl_verify_upstream_trusted_ca={emu.ca_path}",
                      "--set", "capsem_mode=doctor", "--set", "capsem_command=capsem doctor"],
                env=os.environ | {"CAPSEM_HOME": str(home)},
            )  # fmt: skip
        except MitmdumpError as exc:
            shutil.rmtree(emu.server.ca.dir, ignore_errors=True)
            return [Finding("self-test", "fail", f"mitmdump with the addon did not start: {exc}",
                            f"read its log: {work / 'mitmdump.log'}")]  # fmt: skip
        try:
            sent = _send(proxy)
            brokered = _send_placeholders(proxy, entries) if (entries := _credential_entries()) else None
            known = (
                runtime is not None and runtime.kind != "unknown"
            )  # an unknown one: the agent check warned
            probed = probe(runtime, agent_env(proxy)) if known else None
        finally:
            stopped = proxy.stop()
        shutil.rmtree(emu.server.ca.dir, ignore_errors=True)
    calls, status = _read_back(proxy, home)
    findings.append(_self_test_finding(sent, stopped, calls, status, proxy))
    if brokered is not None:
        findings.append(_broker_finding(brokered, proxy, home))
    if runtime is not None and probed is not None:
        findings.append(_trust_finding(runtime, probed, calls))
    if all(f.status != "fail" for f in findings):
        shutil.rmtree(work, ignore_errors=True)
    return findings


def _send(proxy: Mitmdump) -> str | int:
    """The self-test's request (Anthropic Messages, streamed): its status, or what went wrong."""
    import httpx

    body = {"model": SELF_TEST_MODEL, "max_tokens": 64, "stream": True,
            "messages": [{"role": "user", "content": "capsem doctor self-test"}]}  # fmt: skip
    headers = {"x-api-key": "sk-ant-doctor-0000000000000000", "anthropic-version": "2023-06-01",
               "user-agent": f"{PROBE_AGENT} self-test"}  # fmt: skip
    trust = ssl.create_default_context(cafile=proxy.ca_cert)
    try:
        with (
            httpx.Client(proxy=proxy.url, verify=trust, trust_env=False, timeout=30) as client,
            client.stream("POST", "https://api.anthropic.com/v1/messages", json=body, headers=headers) as r,
        ):
            r.read()
            rule = r.headers.get("x-capsem-policy")
            return r.status_code if rule is None else f"HTTP {r.status_code}: {DENIED} {rule!r}"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"


_PROBE_HOSTS = ("api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com")


def _credential_entries() -> list[Any]:
    from capsem.settings import SettingsError, load

    try:
        return list(load().credentials.entries)
    except SettingsError:
        return []  # the config check said so


def check_credentials() -> Finding | None:
    """The brokered credentials: every entry's real value can be read (None: none configured)."""
    from addons.proxy.credentials import load_secrets
    from capsem.settings import SettingsError, load

    try:
        settings = load()
    except SettingsError:
        return Finding("credentials", "skip", "not checked: the configuration is invalid (see above)")
    if not settings.credentials.entries:
        return None  # nothing brokered: nothing to say
    try:
        load_secrets(settings)
    except SettingsError as exc:
        return Finding(
            "credentials", "fail", str(exc), "set the variable in capsem's environment, or fix the file"
        )
    names = ", ".join(e.name for e in settings.credentials.entries)
    return Finding("credentials", "ok", f"the real value of each brokered credential can be read ({names})")


def _send_placeholders(proxy: Mitmdump, entries: list[Any]) -> list[tuple[str, str, str]]:
    """For each credential, one request per place its provider reads the key from, carrying the
    placeholder there, through the self-test's mitmdump: (credential, host, place) sent."""
    import httpx

    from addons.proxy.credentials import accepted_places

    trust = ssl.create_default_context(cafile=proxy.ca_cert)
    sent = []
    with httpx.Client(proxy=proxy.url, verify=trust, trust_env=False, timeout=10) as client:
        for entry in entries:
            host = next((h for h in _PROBE_HOSTS if fnmatchcase(h, entry.host.lower())), None)
            if host is None and not any(c in entry.host for c in "*?["):
                host = entry.host
            if host is None:
                continue
            for kind, name in sorted(accepted_places(entry)):
                value = f"Bearer {entry.placeholder}" if name == "authorization" else entry.placeholder
                headers = {name: value, "user-agent": f"{PROBE_AGENT} broker"} if kind == "header" else {}
                params = {name: entry.placeholder} if kind == "query" else {}
                try:
                    client.get(f"https://{host}/v1/models", headers=headers, params=params)
                except httpx.HTTPError:
                    pass  # the substitution is decided (and recorded) before anything goes upstream
                sent.append((entry.name, host, f"{kind} {name}"))
    return sent


def _broker_finding(sent: list[tuple[str, str, str]], proxy: Mitmdump, home: Path) -> Finding:
    """Whether mitmdump put the real key in place of each placeholder the self-test sent."""
    from assembler.sessiondb import SessionDbError, open_path

    if not sent:
        return Finding("broker", "warn", "no credential names a host the self-test can reach (a glob "
                       "matching none of the known providers)", "run the agent with capsem run --broker and check "
                       "`capsem view` for refused placeholders")  # fmt: skip
    try:
        with open_path(home / "sessions" / proxy.session_id() / "session.db") as conn:
            done = conn.execute(
                "SELECT credential, host, location, outcome, reason FROM substitution_events"
            ).fetchall()
    except (MitmdumpError, SessionDbError, sqlite3.Error) as exc:
        return Finding("broker", "fail", f"the placeholders' fate could not be read back: {exc}",
                       f"read mitmdump's log: {proxy.log_path}")  # fmt: skip
    outcome = {(r["credential"], r["host"], r["location"]): (r["outcome"], r["reason"]) for r in done}
    bad = [f"{c} in {place} to {host}: " + (outcome[(c, host, place)][1] or "refused")
           if (c, host, place) in outcome else f"{c} in {place} to {host}: not seen"
           for c, host, place in sent if outcome.get((c, host, place), ("",))[0] != "substituted"]  # fmt: skip
    if bad:
        return Finding("broker", "fail", "placeholders not replaced: " + "; ".join(bad),
                       "check each entry's host and header/query in config.yaml (capsem config show)")  # fmt: skip
    places = "; ".join(f"{c}: {place} to {host}" for c, host, place in sent)
    return Finding("broker", "ok", f"each placeholder was replaced by the real key ({places}); the provider's "
                   "own answer is not checked (the self-test talks to the built-in emulator)")  # fmt: skip


def _read_back(proxy: Mitmdump, home: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The model calls the session recorded (with the user-agent that sent each) and its main.db status."""
    import json

    from assembler.sessiondb import SessionDbError, open_path

    try:
        session_id = proxy.session_id()
        with open_path(home / "sessions" / session_id / "session.db") as conn:
            calls = [dict(r) for r in conn.execute(
                "SELECT m.provider, m.model, m.input_tokens, m.output_tokens, m.estimated_cost_usd, m.complete, "
                "n.request_headers, n.process_name FROM model_calls m LEFT JOIN net_events n ON n.id = m.net_event_id"
            )]  # fmt: skip
        with open_path(home / "main.db") as conn:
            row = conn.execute("SELECT status FROM sessions WHERE id = ?", (session_id,)).fetchone()
    except (MitmdumpError, SessionDbError, sqlite3.Error):
        return [], None
    for call in calls:
        headers = json.loads(call.pop("request_headers") or "{}")
        call["agent"] = headers.get("user-agent", "") if isinstance(headers, dict) else ""
    return calls, row["status"] if row else None


def _self_test_finding(sent: str | int, stopped: int, calls: list[dict[str, Any]], status: str | None,
                       proxy: Mitmdump) -> Finding:  # fmt: skip
    log = f"mitmdump's log: {proxy.log_path}"
    if isinstance(sent, str) and DENIED in sent:
        return Finding("self-test", "warn", f"a request to api.anthropic.com through mitmdump: {sent}",
                       "if that rule is meant, agents are refused that host too; `capsem config show` lists the "
                       "rules")  # fmt: skip
    if sent != 200:
        return Finding("self-test", "fail", f"a request through mitmdump to the built-in emulator failed: {sent}",
                       f"read {log}")  # fmt: skip
    mine = [c for c in calls if c["agent"] == f"{PROBE_AGENT} self-test"]
    if not mine:
        return Finding("self-test", "fail", "the request went through (HTTP 200) but no model call was recorded",
                       f"read {log}")  # fmt: skip
    call = mine[0]
    cost = "no known price" if call["estimated_cost_usd"] is None else f"${call['estimated_cost_usd']:.6f}"
    what = (f"{call['provider']} {call['model']}, {call['input_tokens']} in / {call['output_tokens']} out "
            f"tokens, {cost}")  # fmt: skip
    if not call["complete"] or status != "stopped" or stopped != 0:
        return Finding("self-test", "fail",
                       f"recorded ({what}) but the stream is {'whole' if call['complete'] else 'incomplete'}, "
                       f"the session {status or 'is missing from main.db'}, mitmdump exited {stopped}",
                       f"read {log}")  # fmt: skip
    return Finding("self-test", "ok",
                   "a streamed request through a fresh mitmdump to the built-in emulator: HTTP 200; read back: "
                   f"1 model call ({what}); session stopped and rolled up")  # fmt: skip


def _trust_finding(runtime: Runtime, probed: ProbeResult, calls: list[dict[str, Any]]) -> Finding:
    label = LABELS[runtime.kind]
    check = "trust"
    if probed.trusted is None:
        return Finding(check, "warn", f"not proven: {probed.detail}",
                       "run the agent once with `capsem run` and check that its calls are recorded "
                       "(capsem list-sessions, capsem inspect-session)")  # fmt: skip
    recorded = sum(c["agent"] == f"{PROBE_AGENT} {runtime.kind}" for c in calls)
    if not probed.trusted:
        variables = ", ".join(var for var, _ in READS[runtime.kind])
        return Finding(check, "fail", f"HTTPS through the proxy failed: {probed.detail}",
                       f"the runtime must get {variables} in its environment (capsem run sets them); check "
                       "that the agent does not replace them, or pin its own CA bundle")  # fmt: skip
    return Finding(check, "ok", f"{label} trusts the CA: {probed.detail} through the proxy; recorded as "
                                f"{counted(recorded, 'model call')}")  # fmt: skip
