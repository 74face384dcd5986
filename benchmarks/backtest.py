"""`capsem policy test` over a month of sessions: 1,000 session.dbs registered in main.db.

One session is recorded through the real recorder and writer (`Recorder` + `SessionWriter`,
messages in: no mitmproxy): model calls to Anthropic with their whole bodies, MCP `tools/call`s
(JSON-RPC POSTs with their answers) and plain requests. It is copied into `sessions` session
folders and registered in main.db (created over 30 days, rolled up). Then the backtest runs as
the CLI runs it (`pick`, then `run`: one read-only connection per session), with three
policies: host rules only (no MCP call opened), MCP tool rules (mcp_calls read, no body), and an
MCP argument rule (the request body of every call its other fields match is read and parsed);
each with a day budget over the model calls.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from addons.messages import FlowEnded, RequestHead, ResponseHead, Route
from addons.proxy.policy import Policy
from addons.recorder.recorder import Recorder
from assembler.backtest import Backtest
from assembler.backtest_source import Needs, pick, run
from capsem.paths import main_db_path, session_dir
from capsem.redact import Scrubber
from capsem.settings import defaults, parse
from capsem.store.schema import open_main_db
from capsem.store.writer import SessionWriter

ANSWER = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                     "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                     "usage": {"input_tokens": 1200, "output_tokens": 80}}).encode()  # fmt: skip
POLICIES = {
    "host rules": "policy: {rules: [{action: deny, host: '*.pastebin.com'}, {action: warn, host: 'api.*.test'}]}",
    "MCP tool rules": "policy: {rules: [{action: deny, mcp_server: files, mcp_tool: 'delete_*'}]}",
    "MCP argument rule": "policy: {rules: [{action: deny, mcp_tool: run_command, mcp_args: {command: 'rm -rf *'}}]}",
}
BUDGET = "budgets: {daily: {scope: day, limit_usd: 0.5}}"


def _head(key: str, at: float, host: str, port: int, method: str, path: str) -> RequestHead:
    return RequestHead(key=key, conn=None, started=at, scheme="https", host=host, port=port, method=method,
                       path=path, query="", http_version="HTTP/1.1",
                       headers=(("content-type", "application/json"),))  # fmt: skip


def _flows(model_calls: int, mcp_calls: int, plain: int) -> list[FlowEnded]:
    """One session's traffic, interleaved: model calls, MCP tools/calls, plain GETs."""
    at, flows = time.time(), []
    json_head = (("content-type", "application/json"),)
    for n in range(max(model_calls, mcp_calls, plain)):
        at += 0.5
        if n < model_calls:
            body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 100,
                               "messages": [{"role": "user", "content": f"turn {n} " + "x" * 2000}]}).encode()  # fmt: skip
            flows.append(FlowEnded(request=_head(f"m{n}", at, "api.anthropic.com", 443, "POST", "/v1/messages"),
                                   ended=at + 0.2, route=Route("anthropic", "anthropic"), request_body=body,
                                   request_size=len(body), response=ResponseHead(200, json_head, at + 0.1),
                                   response_body=ANSWER, response_size=len(ANSWER)))  # fmt: skip
        if n < mcp_calls:
            tool, arguments = (
                ("run_command", {"command": f"rm -rf /work/{n}" if n % 10 == 1 else f"ls -la /work/{n}"})
                if n % 2
                else ("read_note", {"name": f"n{n}"})
            )
            call = {
                "jsonrpc": "2.0",
                "id": n + 1,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            }
            answer = json.dumps(
                {"jsonrpc": "2.0", "id": n + 1, "result": {"content": [{"type": "text", "text": "ok"}]}}
            )
            body = json.dumps(call).encode()
            flows.append(FlowEnded(request=_head(f"c{n}", at, "127.0.0.1", 8000, "POST", "/mcp"), ended=at + 0.05,
                                   request_body=body, request_size=len(body), mcp=True,
                                   response=ResponseHead(200, json_head, at + 0.04), response_body=answer.encode(),
                                   response_size=len(answer)))  # fmt: skip
        if n < plain:
            flows.append(FlowEnded(request=_head(f"g{n}", at, f"api.service{n % 5}.test", 443, "GET", f"/v1/items/{n}"),
                                   ended=at + 0.05, response=ResponseHead(200, json_head, at + 0.04),
                                   response_body=b"{}", response_size=2))  # fmt: skip
    return flows


def make_sessions(home: Path, sessions: int, flows: list[FlowEnded]) -> int:
    """`sessions` copies of one recorded session under `home`, registered in main.db; its size."""
    template = home / "template" / "session.db"
    writer = SessionWriter(template, Scrubber())
    recorder = Recorder(writer, defaults().capture)
    for flow in flows:
        recorder.handle(flow)
    recorder.close()
    writer.close()
    start = datetime(2026, 10, 1, tzinfo=UTC)
    main = open_main_db(main_db_path())
    models = sum(1 for f in flows if f.route is not None)
    mcp = sum(1 for f in flows if f.mcp)
    with main:
        for n in range(sessions):
            created = start + timedelta(minutes=43 * n)
            session_id = created.strftime("%Y%m%d-%H%M%S-") + f"{n:04x}"
            session_dir(session_id).mkdir(parents=True)
            shutil.copyfile(template, session_dir(session_id) / "session.db")
            stamp = created.strftime("%Y-%m-%dT%H:%M:%SZ")
            main.execute("INSERT INTO sessions (id, status, created_at, stopped_at, rolled_up_at, total_requests, "
                         "total_mcp_calls, total_model_calls) VALUES (?, 'stopped', ?, ?, ?, ?, ?, ?)",
                         (session_id, stamp, stamp, stamp, len(flows), mcp, models))  # fmt: skip
    main.close()
    return template.stat().st_size


def run_backtest(sessions: int, model_calls: int, mcp_calls: int, plain: int, repeat: int,
                 log: Callable[[str], None] = print) -> dict:  # fmt: skip
    """Seconds to test each policy (with the day budget) on `sessions` sessions (best of `repeat`)."""
    with tempfile.TemporaryDirectory(prefix="capsem-bench-backtest-") as tmp:
        import os

        old = os.environ.get("CAPSEM_HOME")
        os.environ["CAPSEM_HOME"] = str(Path(tmp) / "home")
        try:
            size = make_sessions(Path(tmp) / "home", sessions, _flows(model_calls, mcp_calls, plain))
            out: dict = {"sessions": sessions, "per_session": {"model_calls": model_calls, "mcp_calls": mcp_calls,
                         "plain": plain}, "session_db_bytes": size, "seconds": {}, "findings": {}}  # fmt: skip
            for name, text in POLICIES.items():
                settings = parse(yaml.safe_load(text) | yaml.safe_load(BUDGET))
                policy, budgets = Policy.from_settings(settings), settings.budgets.entries
                times = []
                for _ in range(repeat):
                    started = time.perf_counter()
                    needs = Needs.of(policy, budgets)
                    report = run(Backtest(policy, budgets), pick((), None, needs).sessions, needs)
                    times.append(time.perf_counter() - started)
                out["seconds"][name] = min(times)
                out["findings"][name] = len(report.findings) + sum(len(b.refused) for b in report.budgets)
                log(f"  {name}: {min(times):.2f} s (median {statistics.median(times):.2f} s), "
                    f"{out['findings'][name]:,} findings")  # fmt: skip
        finally:
            if old is None:
                os.environ.pop("CAPSEM_HOME", None)
            else:
                os.environ["CAPSEM_HOME"] = old
    return out


def backtest_section(res: dict) -> list[str]:
    per = res["per_session"]
    rows = ["| policy (+ a day budget) | seconds | per session | findings |", "|---|---|---|---|"]
    for name, seconds in res["seconds"].items():
        rows.append(f"| {name} | {seconds:.2f} s | {seconds / res['sessions'] * 1000:.2f} ms | "
                    f"{res['findings'][name]:,} |")  # fmt: skip
    return [
        "## `capsem policy test` over a month of sessions",
        "",
        f"{res['sessions']:,} session.dbs of {res['session_db_bytes'] / 1024:.0f} KiB each ({per['model_calls']} model "
        f"calls, {per['mcp_calls']} MCP tools/calls, {per['plain']} plain requests), registered in main.db; the "
        "backtest as the CLI runs it (best of runs). Findings: requests the rules would have denied or warned "
        "about, plus model calls the budget would have refused.",
        "",
        *rows,
        "",
    ]
