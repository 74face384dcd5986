"""The end-of-run summary of a session: what it did, what it cost and why, what went wrong, the
files it changed and its final answer.

`session_summary` reads it all from session.db and main.db (read-only) into plain data;
`render_session` lays it out for a terminal of a given width (columns that do not fit are
dropped, free text wraps: `assembler.tables`). `capsem run`, `capsem demo` and `capsem tail`
print it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.text import Text

from assembler.cli_support import capsem_command, counted
from assembler.costs import Usage, call_usage, split_line, why
from assembler.failures import (
    Failure,
    Intervention,
    failures,
    intervention_counts,
    interventions,
    not_emulated,
)
from assembler.sessiondb import main_row
from assembler.sessions import as_shown, duration
from assembler.tables import Column, fit_table
from assembler.tool_decision import columns as decision_columns
from assembler.tool_decision import not_run, said
from capsem.paths import session_db_path
from capsem.rollup import CALL_USAGE_SQL, NOT_RECORDED_END, capture_health, capture_meta
from capsem.store.schema import connect

MAX_ERRORS = 10
MAX_FILES = 10
MAX_TOP = 3
ANSWER_CHARS = 400


@dataclass(frozen=True)
class Call:
    id: int
    provider: str
    model: str
    stream: bool
    status: int | None
    usage: Usage
    stop: str
    """Stop reason, else the error type (`overloaded_error`), `HTTP 529`, `truncated` or ``."""
    ttft_ms: int | None
    trace: str
    estimated: bool
    """Token counts estimated with a tokenizer (the provider never reported them)."""
    priced: bool


@dataclass
class SessionSummary:
    session_id: str
    db_path: Path
    status: str | None = None
    exit_code: int | None = None
    duration: str | None = None
    calls: list[Call] = field(default_factory=list)
    flows: int = 0
    failed_flows: int = 0
    tools: list[sqlite3.Row] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    not_emulated: list[Failure] = field(default_factory=list)
    """Requests the emulator does not play (`--emulator`): shown apart, not errors."""
    interventions: list[Intervention] = field(default_factory=list)
    """Requests capsem denied (policy, budget), warned or asked about; placeholders it refused."""
    files: list[tuple[str, str]] = field(default_factory=list)
    """(action, path) of each file the workspace ended up with changed, in first-change order."""
    label: str = ""
    """`name · project@branch` of a `capsem run` (empty when unknown)."""
    answer: tuple[Call, str] | None = None
    """The last successful model call with text, and that text: the agent's final answer."""
    capture: str | None = None
    """Why the record is not whole (rows lost, a recorder that died, an end not recorded), or None."""

    @property
    def total(self) -> Usage:
        total = Usage()
        for c in self.calls:
            total += c.usage
        return total


def _stop(row: sqlite3.Row) -> str:
    if row["error_type"]:
        return row["error_type"]
    if row["status_code"] is None:
        return "no response"
    if row["status_code"] >= 400:
        return f"HTTP {row['status_code']}"
    return row["stop_reason"] or ("" if row["complete"] else "truncated")


def _files(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """Net change per path: created, modified or deleted (created then deleted: left out)."""
    first: dict[str, str] = {}
    last: dict[str, str] = {}
    for action, path in conn.execute("SELECT action, path FROM fs_events ORDER BY id"):
        first.setdefault(path, action)
        last[path] = action
    out = []
    for path, action in first.items():
        end = last[path]
        if action == "created" and end == "deleted":
            continue
        out.append(("created" if action == "created" else end, path))
    return out


def session_summary(session_id: str, db_path: Path | None = None) -> SessionSummary:
    """Everything the summary shows, read from the session's database (read-only) and main.db."""
    db_path = db_path or session_db_path(session_id)
    out = SessionSummary(session_id, db_path)
    try:
        row = main_row(session_id)
    except sqlite3.Error as exc:  # a full disk: the summary still says what it can
        row, unreadable = None, f"main.db cannot be read ({exc})"
    else:
        unreadable = "main.db has no row for this session"
    if row is not None:
        row = as_shown(row)
        out.status, out.exit_code, out.duration = row["status"], row.get("exit_code"), duration(row)
        where = (row.get("project") or "") + (f"@{row['git_branch']}" if row.get("git_branch") else "")
        out.label = " · ".join(x for x in (row.get("name"), where) if x)
    conn = connect(db_path, readonly=True)
    try:
        out.capture = capture_problem(row, capture_meta(conn, db_path.parent), unreadable)
        answer: tuple[int, str] | None = None
        for r in conn.execute(CALL_USAGE_SQL + " ORDER BY id"):
            estimated = '"estimated"' in (r["usage_details"] or "")
            out.calls.append(Call(r["id"], r["provider"], r["model"] or "?", bool(r["stream"]), r["status_code"],
                                  call_usage(r), _stop(r), r["ttft_ms"], (r["trace_id"] or "")[:4], estimated,
                                  r["estimated_cost_usd"] is not None))  # fmt: skip
            if r["text_content"] and r["status_code"] and 200 <= r["status_code"] < 300:
                answer = (r["id"], r["text_content"])
        if answer is not None:
            call = next(c for c in out.calls if c.id == answer[0])
            out.answer = (call, answer[1])
        out.tools = conn.execute(
            f"""SELECT tc.model_call_id, tc.call_id, tc.tool_name, tc.arguments, tr.content_preview, tr.is_error,
                {decision_columns(conn)}
                FROM tool_calls tc LEFT JOIN tool_responses tr ON tr.call_id = tc.call_id ORDER BY tc.id"""
        ).fetchall()
        out.flows, out.failed_flows = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(decision = 'error'), 0) FROM net_events"
        ).fetchone()
        out.failures = failures(conn)
        out.not_emulated = not_emulated(conn)
        out.interventions = interventions(conn)
        out.files = _files(conn)
    finally:
        conn.close()
    return out


# --- rendering ----------------------------------------------------------------------------------


def capture_problem(row: dict | None, meta: dict[str, str], no_row: str = "") -> str | None:
    """What the record lacks, from the session's main.db row (as shown; `no_row` says why there is
    none) and its capture counts."""
    _, _, problem = capture_health(meta)
    status = row.get("capture_status") if row is not None else None
    if status in ("failed", "unknown"):
        error = row.get("capture_error") if row is not None else None
        found = f"capture {'failed' if status == 'failed' else 'incomplete'}: {error or NOT_RECORDED_END}"
        return found if problem is None or problem in found else f"{found}; {problem}"
    if row is None:
        return f"capture incomplete: {no_row}" + (f"; {problem}" if problem else "")
    if problem is not None and (status == "degraded" or "nothing was lost" not in problem):
        return f"capture degraded: {problem}"
    return None


def _money(value: float) -> str:
    return f"${value:.4f}"


def _short(text: str | None, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _headline(s: SessionSummary) -> Text:
    total = s.total
    parts = [counted(len(s.calls), "model call"), counted(s.flows, "HTTP flow")]
    if s.tools:
        parts.append(counted(len(s.tools), "tool call"))
    if s.files:
        parts.append(counted(len(s.files), "file") + " changed")
    line = Text(", ".join(parts))
    unpriced = sum(1 for c in s.calls if not c.priced and (c.usage.input_tokens or c.usage.output_tokens))
    if s.calls and unpriced and not total.cost:  # no known price at all: never `$0.0000`
        line.append(", ")
        line.append("cost unpriced", style="bold yellow")
        line.append(
            f" (no known price for {'its model' if unpriced == 1 else 'their models'})", style="yellow"
        )
    elif s.calls:
        line.append(", ")
        line.append(f"cost {_money(total.cost)}", style="bold")
        if unpriced:
            line.append(f" ({counted(unpriced, 'call')} unpriced)", style="yellow")
    line.append(" · ")
    line.append(counted(len(s.failures), "error"), style="bold red" if s.failures else "")
    if s.not_emulated:
        line.append(f" · {counted(len(s.not_emulated), 'request')} not emulated", style="dim")
    if s.interventions:
        line.append(" · ")
        line.append(stepped_in(s.interventions), style="bold yellow")
    return line


def stepped_in(items: list[Intervention]) -> str:
    """`capsem denied 1, warned 2, refused 1 placeholder`."""
    words = {"denied": "denied {}", "warned": "warned {}", "asked": "asked {}", "approved": "approved {}",
             "refused": "refused {} placeholder"}  # fmt: skip
    parts = [
        words[k].format(n) + ("s" if k == "refused" and n > 1 else "")
        for k, n in intervention_counts(items).items()
    ]
    return "capsem " + ", ".join(parts)


def _tokens_line(total: Usage) -> Text:
    line = Text("tokens: ", style="dim")
    line.append(f"input {total.uncached_input:,} · cache write {total.cache_write_tokens:,} · "
                f"cache read {total.cache_read_tokens:,} · output {total.output_tokens:,}")  # fmt: skip
    if total.reasoning_tokens:
        line.append(f" (reasoning {total.reasoning_tokens:,})")
    return line


ESTIMATED_NOTE = "~ = estimated with a tokenizer: the provider reported no token counts for that call"


def _call_table(calls: list[Call], width: int) -> RenderableType:
    """One row per model call; the provider column only when there are several, reasoning only
    when some call reasoned."""
    several = len({c.provider for c in calls}) > 1
    reasoned = any(c.usage.reasoning_tokens for c in calls)

    def stop(c: Call) -> str | Text:
        failed = c.status is None or c.status >= 400 or c.stop.endswith("_error")
        return Text(c.stop, style="red") if failed else c.stop

    def mark(c: Call) -> str:
        return "~" if c.estimated else ""

    def cost(c: Call) -> str:
        if c.priced:
            return _money(c.usage.cost)
        return "unpriced" if c.usage.input_tokens or c.usage.output_tokens else "-"

    spec = [
        (Column("#", priority=10), lambda c: str(c.id)),
        (Column("provider", "left", 4), lambda c: c.provider) if several else None,
        (Column("model", "left", 9), lambda c: c.model),
        (Column("via", "left", 0), lambda c: "sse" if c.stream else "json"),
        (Column("input", priority=8), lambda c: f"{c.usage.uncached_input:,}{mark(c)}"),
        (Column("cache\nwrite", priority=7), lambda c: f"{c.usage.cache_write_tokens:,}"),
        (Column("cache\nread", priority=7), lambda c: f"{c.usage.cache_read_tokens:,}"),
        (Column("out", priority=8), lambda c: f"{c.usage.output_tokens:,}{mark(c)}"),
        (Column("reasoning", priority=2), lambda c: f"{c.usage.reasoning_tokens:,}") if reasoned else None,
        (Column("cost", priority=9), cost),
        (Column("stop", "left", 6), stop),
        (Column("ttft", priority=3), lambda c: f"{c.ttft_ms}ms" if c.ttft_ms is not None else "-"),
        (Column("trace", "left", 0), lambda c: c.trace),
    ]
    used = [x for x in spec if x is not None]
    title = "Model calls" + ("" if several else f" ({calls[0].provider})")
    return fit_table(
        [col for col, _ in used], [[get(c) for _, get in used] for c in calls], width, title=title
    )


def render_session(summary: SessionSummary, width: int = 80) -> Group:
    """The summary laid out for a terminal `width` cells wide."""
    s = summary
    total = s.total
    parts: list[RenderableType] = [Text(s.label, style="bold")] if s.label else []
    parts.append(_headline(s))
    if s.capture:
        parts.append(
            Text(f"{s.capture} ({capsem_command()} inspect-session {s.session_id})", style="bold red")
        )
    if s.calls:
        parts.append(_tokens_line(total))
        if split := split_line(total):
            parts.append(Text("cost by token type: ", style="dim") + Text(split))
        parts += [Text(""), _call_table(s.calls, width)]
        if any(c.estimated for c in s.calls):
            parts.append(Text(ESTIMATED_NOTE, style="dim"))
    priced = [c for c in s.calls if c.usage.cost > 0]
    if len(priced) > 1:
        top = sorted(priced, key=lambda c: -c.usage.cost)[:MAX_TOP]
        cols = [Column("#", priority=10), Column("cost", priority=10), Column("why", "left", 10, wrap=True)]
        rows = [[str(c.id), _money(c.usage.cost), why(c.usage)] for c in top]
        parts += [Text(""), fit_table(cols, rows, width, title="Most expensive calls")]
    if s.tools:
        parts += [Text(""), _tool_table(s.tools, width)]
    if s.failures:
        parts += _failures(s, width)
    if s.not_emulated:
        parts += _not_emulated(s)
    if s.interventions:
        parts += _interventions(s, width)
    if s.files or s.answer is not None:
        parts.append(Text(""))
    if s.files:
        line = Text(f"Files changed ({len(s.files)}): ", style="bold")
        line.append(", ".join(f"{action} {path}" for action, path in s.files[:MAX_FILES]))
        if len(s.files) > MAX_FILES:
            line.append(f", … and {len(s.files) - MAX_FILES} more")
        parts.append(line)
    if s.answer is not None:
        call, text = s.answer
        head = Text(f"Final answer (#{call.id} {call.model}):", style="bold")
        parts.append(Group(head, Padding(Text(_short(text, ANSWER_CHARS)), (0, 0, 0, 2))))
    return Group(*parts)


def _tool_table(tools: list[sqlite3.Row], width: int) -> RenderableType:
    """Each tool call with its arguments and its result (an error in red, a missing result in yellow);
    a call a tool rule denied (or asked about, unanswered) shows that verdict, never a result."""
    cols = [Column("call", "left", 9), Column("tool", "left", 9), Column("arguments", "left", 5, wrap=True),
            Column("result", "left", 6, wrap=True)]  # fmt: skip
    rows = []
    for t in tools:
        verdict = said(t["decision"], t["decision_rule"])
        if not_run(t["decision"]):
            result: str | Text = Text(
                verdict or t["decision"], style="red" if t["decision"] == "denied" else "yellow"
            )
        elif t["content_preview"] is None:
            result = Text("(no result recorded)", style="yellow")
        else:
            text = ("ERROR " if t["is_error"] else "") + _short(t["content_preview"], 120)
            result = Text(text, style="red" if t["is_error"] else "")
        if verdict and not not_run(t["decision"]):
            result = Text.assemble((f"[{verdict}] ", "yellow"), result)
        rows.append([f"#{t['model_call_id']}", t["tool_name"], _short(t["arguments"], 120), result])
    return fit_table(cols, rows, width, title="Tool calls and results")


def _failures(s: SessionSummary, width: int) -> list[RenderableType]:
    """The first `MAX_ERRORS` errors in a table, and how many more there are."""
    parts: list[RenderableType] = []
    shown = s.failures[:MAX_ERRORS]
    cols = [Column("what", "left", 10, wrap=True), Column("error", "left", 10, wrap=True)]
    rows = [[f.where, Text(f.message, style="red")] for f in shown]
    parts += [Text(""), fit_table(cols, rows, width, title=f"Errors ({len(s.failures)})")]
    if len(s.failures) > len(shown):
        parts.append(
            Text(
                f"… and {len(s.failures) - len(shown)} more: {capsem_command()} inspect-session {s.session_id}"
            )
        )
    return parts


def _not_emulated(s: SessionSummary) -> list[RenderableType]:
    """The requests the emulator does not play, in one dim line: where they went, not errors."""
    shown = ", ".join(f.where for f in s.not_emulated[:MAX_TOP])
    more = f" and {len(s.not_emulated) - MAX_TOP} more" if len(s.not_emulated) > MAX_TOP else ""
    text = f"Not emulated (not errors; nothing left the machine): {shown}{more}"
    return [Text(""), Text(text, style="dim")]


def _interventions(s: SessionSummary, width: int) -> list[RenderableType]:
    """The first `MAX_ERRORS` places capsem stepped in (denied, warned, asked, refused), and how many more."""
    parts: list[RenderableType] = []
    shown_i = s.interventions[:MAX_ERRORS]
    cols = [
        Column("capsem", "left", 10),
        Column("what", "left", 8, wrap=True),
        Column("why", "left", 9, wrap=True),
    ]
    rows = [[Text(i.kind, style="red" if i.kind in ("denied", "refused") else "yellow"), i.where, i.why]
            for i in shown_i]  # fmt: skip
    parts += [
        Text(""),
        fit_table(cols, rows, width, title=f"Where capsem stepped in ({len(s.interventions)})"),
    ]
    if len(s.interventions) > len(shown_i):
        parts.append(
            Text(f"… and {len(s.interventions) - len(shown_i)} more: {capsem_command()} view {s.session_id}")
        )
    return parts


def footer_lines(s: SessionSummary) -> list[str]:
    """Where the database is and what to run next: text meant to be copied, so it is printed with
    soft wrapping (the terminal folds a long line; no newline is ever put inside a path or command)."""
    capsem = capsem_command()
    return [
        "",
        f"database  {s.db_path}",
        f"next      {capsem} view {s.session_id}",
        f"          {capsem} inspect-session {s.session_id}",
        f'          {capsem} query-session "SELECT * FROM model_calls" {s.session_id}',
    ]


def rule_title(s: SessionSummary) -> str:
    """`capsem session ID (stopped, exit 3, 2m05s)`."""
    facts = [x for x in (s.status, None if s.exit_code is None else f"exit {s.exit_code}",
                         s.duration if s.status != "running" else None) if x]  # fmt: skip
    return f"capsem session {s.session_id}" + (f" ({', '.join(facts)})" if facts else "")


def print_session(session_id: str, console: Console | None = None) -> None:
    """Print a session's summary under a rule naming it."""
    console = console or Console()
    summary = session_summary(session_id)
    console.print(Rule(rule_title(summary), align="left"))
    console.print(render_session(summary, console.width))
    for n, line in enumerate(footer_lines(summary)):
        console.print(line, style="dim" if n > 1 else None, soft_wrap=True, highlight=False)
