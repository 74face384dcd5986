"""Datasette over a bundle: generated metadata (titles, descriptions, label columns, facets),
the seed's canned queries plus capsem's, and a Datasette process bound to loopback only.

Datasette runs as a subprocess (`python -m datasette serve -i bundle.db --metadata m.json`):
immutable mode, since a bundle is a finished artifact, and its output goes to a log file, never
an unread pipe. `--port 0` lets the OS pick a port; the real one is read from uvicorn's
"Uvicorn running on" line.

Whoever starts Datasette stops it: `start_datasette` stops it if interrupted while waiting for
it, `DatasetteServer` is a context manager, and under `stop_on_signals` a SIGTERM or SIGHUP
interrupts like Ctrl-C and every Datasette started inside is stopped on the way out, so stopping
`capsem bundle serve` by its pid stops Datasette too, at any moment.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import webbrowser
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assembler.bundle.errors import BundleError

_RUNNING = re.compile(r"Uvicorn running on https?://([^\s:]+|\[[^\]]+\]):(\d+)")

TABLES: dict[str, dict[str, Any]] = {
    "bundle_meta": {"title": "Bundle", "description": "Who built this bundle, when, from where (one row)."},
    "sources": {"title": "Sources", "label_column": "path", "facets": ["kind"],
                "description": "Every input file: detected kind, sha256, size, records imported, records skipped "
                               "(errors) and the warnings about it."},
    "sessions": {"title": "Sessions", "label_column": "session_id", "facets": ["kind", "correlation"],
                 "description": "capsem sessions, snapshot sessions (with parents), diagnostics sessions; "
                                "correlated_session_id ties a session to the capsem session it ran in, and "
                                "correlation says how that was found (explicit, process, time, directory)."},
    "execution_timeline": {"title": "Execution timeline", "facets": ["event_type", "trace_type", "session_id"],
                           "description": "Every step of every session in time order: prompts, model calls, "
                                          "tool calls and results, MCP calls, file events, anomalies. step_order "
                                          "numbers a session's steps; prompt_number counts its prompts."},
    "error_log": {"title": "Error log", "facets": ["kind", "level"],
                  "description": "Error and warning logs, failed tools, HTTP errors, truncated streams, model and "
                                 "MCP errors, process anomalies and import problems."},
    "token_summary": {"title": "Token usage", "description": "Tokens per session and model (captured model calls "
                                                             "and executed prompts)."},
    "cost_summary": {"title": "Cost", "description": "Estimated cost per session and model; unpriced_calls have "
                                                     "no known price (never guessed)."},
    "tool_summary": {"title": "Tool success", "description": "Calls and success rate per session and tool."},
    "logs": {"title": "Logs", "label_column": "event", "facets": ["level", "logger"],
             "description": "Structured log records (six-key JSONL and generic JSON lines); raw keeps the line."},
    "slice_items": {"title": "Slice items", "label_column": "item_type", "facets": ["slice_type"],
                    "description": "Raw slice contents from session snapshots."},
    "tool_invocations": {"title": "Tool invocations", "label_column": "tool_name", "facets": ["tool_name"],
                         "description": "ToolInvoked events from snapshots: parameters and results."},
    "prompt_events": {"title": "Prompt events", "label_column": "prompt_name", "facets": ["event_type"],
                      "description": "PromptRendered and PromptExecuted events from snapshots."},
    "files": {"title": "Files", "label_column": "path", "facets": ["archive_id", "is_binary"],
              "description": "Files from workspace archives (text in content, binary in data; over the size cap "
                             "only size and sha256)."},
    "net_events": {"title": "Network events", "label_column": "path", "facets": ["domain", "status_code"],
                   "description": "Every HTTP flow capsem recorded (headers redacted)."},
    "model_calls": {"title": "Model calls", "label_column": "model", "facets": ["provider", "model"],
                    "description": "LLM calls: model, tokens, cost, stop reason, text."},
    "tool_calls": {"title": "Tool calls", "label_column": "tool_name", "facets": ["tool_name", "decision"],
                   "description": "Tool calls the models asked for, with the policy's verdict (decision, decision_rule)."},
    "tool_responses": {"title": "Tool results", "label_column": "tool_name", "facets": ["is_error"],
                       "description": "Tool results the agent sent back, linked by call_id."},
    "mcp_calls": {"title": "MCP calls", "label_column": "tool_name", "facets": ["server_name"],
                  "description": "MCP JSON-RPC calls."},
    "fs_events": {"title": "File events", "label_column": "path", "facets": ["action"],
                  "description": "Workspace file changes recorded by capsem run."},
    "proc_samples": {"title": "Process samples", "label_column": "name", "facets": ["name", "state"],
                     "description": "Process diagnostics samples (capsem run, or AutoSkillit proc_trace.jsonl)."},
    "proc_anomalies": {"title": "Process anomalies", "label_column": "kind", "facets": ["kind", "severity"],
                       "description": "Anomalies found in the process samples."},
    "diag_sessions": {"title": "Diagnostics sessions", "label_column": "dir_name", "facets": ["subtype"],
                      "description": "AutoSkillit summary.json and sessions.jsonl records."},
    "documents": {"title": "Documents", "label_column": "name",
                  "description": "Other JSON documents found among the inputs, kept whole."},
}  # fmt: skip

COLUMNS: dict[str, dict[str, str]] = {
    "execution_timeline": {
        "prompt_number": "n-th prompt of the session (a rendered prompt or a new tool loop)",
        "step_order": "position of the step in its session",
        "success": "1 ok, 0 failed, empty when not applicable",
        "row_ref": "rowid of the step's row in source_table",
    },
    "sessions": {"correlation": "how correlated_session_id was found: explicit, process, time or directory"},
    "logs": {
        "correlation": "how session_id was found: explicit (named in the record), time or directory",
        "raw": "the line as read (secrets redacted)",
    },
}

# The seed's recommended queries first, then capsem's.
QUERIES: dict[str, dict[str, str]] = {
    "tool_success": {"title": "What tools were called and how often did they succeed?", "sql":
        "SELECT tool_name, source, call_count, success_count, success_rate || '%' AS success_rate\n"
        "FROM tool_summary ORDER BY call_count DESC"},
    "errors": {"title": "What errors occurred?", "sql":
        "SELECT timestamp, level, event, message FROM error_log ORDER BY timestamp DESC LIMIT 50"},
    "timeline": {"title": "Execution timeline", "sql":
        "SELECT timestamp, session_id, prompt_number, step_order, event_type, name, success\n"
        "FROM execution_timeline ORDER BY timestamp"},
    "token_usage": {"title": "Token usage by session", "sql": "SELECT * FROM token_summary"},
    "agent_files": {"title": "Files created by the agent", "sql":
        "SELECT path, size_bytes, is_binary FROM files ORDER BY path"},
    "session_trace": {"title": "One session, step by step", "sql":
        "SELECT prompt_number, step_order, timestamp, event_type, trace_type, name, detail, success\n"
        "FROM execution_timeline WHERE session_id = :session_id ORDER BY step_order"},
    "cost_by_model": {"title": "What did it cost, per model?", "sql":
        "SELECT provider, model, SUM(call_count) AS calls, SUM(input_tokens) AS input_tokens,\n"
        "SUM(output_tokens) AS output_tokens, ROUND(SUM(estimated_cost_usd), 6) AS cost_usd,\n"
        "SUM(unpriced_calls) AS unpriced_calls FROM cost_summary GROUP BY provider, model ORDER BY cost_usd DESC"},
    "correlations": {"title": "Which sessions belong together?", "sql":
        "SELECT session_id, kind, parent_session_id, correlated_session_id, correlation, created_at, ended_at\n"
        "FROM sessions ORDER BY created_at"},
    "import_problems": {"title": "What could not be imported?", "sql":
        "SELECT path, kind, records, errors, warnings FROM sources WHERE errors > 0 OR warnings IS NOT NULL"},
}  # fmt: skip


def datasette_metadata(conn: sqlite3.Connection, database: str) -> dict[str, Any]:
    """Datasette metadata for a bundle served under the name `database`."""
    meta = conn.execute("SELECT root_session_id, description, created_at FROM bundle_meta").fetchone()
    root, description, created = meta if meta else (None, None, None)
    counts = dict(conn.execute("SELECT kind, COUNT(*) FROM sessions GROUP BY kind").fetchall())
    sources = conn.execute("SELECT COUNT(*) FROM sources").fetchone()[0]
    summary = ", ".join(f"{n} {k} session{'s' if n != 1 else ''}" for k, n in sorted(counts.items()))
    text = (
        description
        or f"capsem debug bundle built {created}: {summary or 'no sessions'}, from {sources} sources."
    )
    tables = {
        name: dict(doc, **({"columns": COLUMNS[name]} if name in COLUMNS else {}))
        for name, doc in TABLES.items()
    }
    return {
        "title": f"Debug Bundle: {root or 'no root session'}",
        "description": text,
        "databases": {
            database: {
                "title": f"Bundle {root or database}",
                "description": text,
                "tables": tables,
                "queries": QUERIES,
            }
        },
    }


def check_host(host: str) -> None:
    """Refuse any address but loopback: a bundle holds prompts, code and tool output.

    Raises:
        BundleError: `host` is not a loopback address.
    """
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return
    except ValueError:
        pass
    raise BundleError(f"refusing to serve on {host!r}: bundles are only served on loopback (127.0.0.1)")


@dataclass
class DatasetteServer:
    """A running Datasette process serving one bundle."""

    process: subprocess.Popen[bytes]
    host: str
    port: int
    database: str
    log_path: Path
    _workdir: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self) -> int:
        try:
            return self.process.wait()
        finally:
            self._cleanup()

    def wait_until_interrupted(self) -> None:
        """Block until Datasette exits or Ctrl-C (under `stop_on_signals`: or SIGTERM, SIGHUP)."""
        try:
            self.wait()
        except KeyboardInterrupt:
            pass

    def stop(self, timeout: float = 5.0) -> None:
        """Stop Datasette (SIGTERM, then kill if it hangs: it keeps nothing to save, and uvicorn's
        graceful shutdown may wait on a client's open connection)."""
        _stop(self.process, timeout)
        self._cleanup()

    def _cleanup(self) -> None:
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> DatasetteServer:
        return self

    def __exit__(self, *args: object) -> None:
        self.stop()


def start_datasette(
    bundle: Path,
    metadata: dict[str, Any],
    *,
    host: str = "127.0.0.1",
    port: int = 8001,
    timeout: float = 60.0,
) -> DatasetteServer:
    """Start Datasette on `bundle`; return once it answers.

    Raises:
        BundleError: a non-loopback host, or Datasette did not start (the message quotes its log).
    """
    check_host(host)
    workdir = tempfile.TemporaryDirectory(prefix="capsem-bundle-serve-")
    meta_path = Path(workdir.name) / "metadata.json"
    meta_path.write_text(json.dumps(metadata, indent=2, ensure_ascii=False), encoding="utf-8")
    log_path = Path(workdir.name) / "datasette.log"
    cmd = [sys.executable, "-m", "datasette", "serve", "-i", str(bundle), "--host", host, "--port", str(port),
           "--metadata", str(meta_path), "--setting", "sql_time_limit_ms", "5000"]  # fmt: skip
    process: subprocess.Popen[bytes] | None = None
    try:
        with log_path.open("wb") as log, _signals_held():  # a stop signal inside Popen would orphan the child
            process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
            if _started is not None:
                _started.append(process)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = _RUNNING.search(log_path.read_text(errors="replace"))
            if match:
                return DatasetteServer(process, host, int(match.group(2)), bundle.stem, log_path, workdir)
            if process.poll() is not None:
                break
            time.sleep(0.1)
        text = log_path.read_text(errors="replace")[-3000:]
        raise BundleError(f"Datasette did not start on {host}:{port} (exit {process.poll()}):\n{text}")
    except BaseException:  # did not start, or interrupted while starting: leave nothing behind
        if process is not None:
            _stop(process, timeout=0)
        workdir.cleanup()
        raise


def _stop(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds (Datasette keeps nothing to save)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


_held: list[int] | None = None  # signals `stop_on_signals` received inside `_signals_held`
_started: list[subprocess.Popen[bytes]] | None = None  # Datasettes started under `stop_on_signals`


@contextmanager
def _signals_held() -> Iterator[None]:
    """Inside, a signal under `stop_on_signals` is held, and raised when the block ends."""
    global _held
    outer, _held = _held, []
    try:
        yield
    finally:
        held, _held = _held, outer
    if held:
        raise KeyboardInterrupt(signal.Signals(held[0]).name)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Inside the block, SIGINT, SIGTERM and SIGHUP interrupt the main thread as Ctrl-C does
    (KeyboardInterrupt), and every Datasette started inside is stopped on the way out, wherever
    the signal landed. (SIGINT too: a process started in the background by a shell without job
    control inherits it ignored.)"""
    global _started

    def interrupt(signum: int, _frame: object) -> None:
        if _held is not None:
            _held.append(signum)
            return
        for sig in previous:  # once: a second signal must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    outer, _started = _started, []
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        try:
            for process in _started:
                _stop(process, timeout=5.0)
        finally:
            _started = outer
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def open_in_browser(url: str) -> None:
    webbrowser.open(url)
