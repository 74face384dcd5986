"""Two runs lined up call by call, and what changed: pure functions over `load.Run`.

Alignment: the calls of each session in order are matched by a sequence alignment (difflib) on
a signature that names what a call is for and not what it says: provider, endpoint, the user
message that started its turn, and the kinds and roles of its new conversation items. Within a
stretch that does not line up, calls of the same provider and endpoint are paired in order; the
rest are calls only one session made. Ids (call ids, tool call ids, turn ids) and timings
(timestamps, durations) are never changes: they are kept apart (`CallDiff.ignored`). Texts are
compared as `capsem replay` matches requests (`assembler/replay/match.py: run_invariant`): dates,
times, ids, Claude Code's billing line and each session's own workspace path put aside, so a
session and its replay differ in ids and timings only.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from assembler.diff.load import Call, Piece, Run, ToolDef, ToolUse, mask_billing
from assembler.replay.match import run_invariant

Norm = Callable[[str], str]
"""A text as compared (what changes on every run put aside)."""


def _same_text(text: str) -> str:
    return text


def norm_of(run: Run, workspace: bool = True) -> Norm:
    """How `run`'s texts are compared: its workspace (unless `workspace` is False), dates, ids and
    the checksum of Claude Code's billing line put aside (its `cc_version` counts: another Claude
    Code is a change)."""
    where = run.workspace if workspace else None
    return lambda text: run_invariant(mask_billing(text), where, billing=False)


COST_EPSILON = 1e-9


@dataclass(frozen=True)
class Delta:
    """A value that differs: `what`, its value in A and in B."""

    what: str
    a: object
    b: object


@dataclass(frozen=True)
class ToolChange:
    name: str
    change: str
    """added | removed | changed"""
    fields: tuple[str, ...] = ()
    """For a changed tool: `description`, `schema`."""
    diff: tuple[str, ...] = ()
    """For a changed tool: a unified diff of its description and schema; for an added or removed
    one, its description."""


@dataclass(frozen=True)
class PieceChange:
    op: str
    """added (only in B) | removed (only in A)"""
    piece: Piece


@dataclass(frozen=True)
class UseChange:
    op: str
    """added | removed | changed"""
    a: ToolUse | None
    b: ToolUse | None


@dataclass(frozen=True)
class CallDiff:
    a: Call | None
    b: Call | None
    system: tuple[str, ...] = ()
    """A unified diff of the system prompt (empty: the same)."""
    system_as_in: int | None = None
    """The index of an earlier pair whose system prompt changed the same way (shown once there)."""
    tools: tuple[ToolChange, ...] = ()
    tools_as_in: int | None = None
    items: tuple[PieceChange, ...] = ()
    answer: tuple[PieceChange, ...] = ()
    tool_uses: tuple[UseChange, ...] = ()
    fields: tuple[Delta, ...] = ()
    """Model, endpoint, status, error, stop reason, tokens, cost."""
    ignored: tuple[Delta, ...] = ()
    """Ids and timings that differ (never a change)."""

    @property
    def only(self) -> str | None:
        """`a` or `b` for a call only one session made."""
        return "a" if self.b is None else "b" if self.a is None else None

    @property
    def changed(self) -> bool:
        return bool(self.only or self.system or self.tools or self.items or self.answer or self.tool_uses
                    or self.fields)  # fmt: skip


@dataclass(frozen=True)
class SessionDiff:
    a: str
    b: str
    calls: tuple[CallDiff, ...]
    totals: tuple[Delta, ...]
    """Calls, tokens, cost, tool calls, errors of each session (every one, changed or not; the count
    of unpriced calls only when a session has one)."""
    timing: tuple[Delta, ...] = field(default=())
    """The sessions' total call time (never a change)."""

    @property
    def changed(self) -> tuple[CallDiff, ...]:
        return tuple(c for c in self.calls if c.changed)

    @property
    def same(self) -> bool:
        """No change but ids and timings."""
        return not self.changed and all(d.a == d.b for d in self.totals)


def signature(call: Call, norm: Norm = _same_text) -> tuple:
    """What a call is for: provider, endpoint, the user message that started its turn and the kinds
    and roles of its new conversation items."""
    return (call.provider, call.endpoint, norm(call.ask), tuple((p.kind, p.role) for p in call.new_items))


def align(a: tuple[Call, ...], b: tuple[Call, ...], na: Norm = _same_text,
          nb: Norm = _same_text) -> list[tuple[Call | None, Call | None]]:  # fmt: skip
    """The calls of two runs paired in order; a call only one run made is paired with None."""
    pairs: list[tuple[Call | None, Call | None]] = []
    matcher = difflib.SequenceMatcher(
        a=[signature(c, na) for c in a], b=[signature(c, nb) for c in b], autojunk=False
    )
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            pairs += zip(a[a0:a1], b[b0:b1], strict=True)
        else:
            pairs += _loose(a[a0:a1], b[b0:b1])
    return pairs


def _loose(a: tuple[Call, ...], b: tuple[Call, ...]) -> list[tuple[Call | None, Call | None]]:
    """A stretch that did not line up: same provider and endpoint paired in order, the rest alone."""
    pairs: list[tuple[Call | None, Call | None]] = []
    matcher = difflib.SequenceMatcher(a=[(c.provider, c.endpoint) for c in a],
                                      b=[(c.provider, c.endpoint) for c in b], autojunk=False)  # fmt: skip
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            pairs += zip(a[a0:a1], b[b0:b1], strict=True)
            continue
        pairs += [(c, None) for c in a[a0:a1]]
        pairs += [(None, c) for c in b[b0:b1]]
    return pairs


def unified(a: str | None, b: str | None, name: str = "") -> tuple[str, ...]:
    """A unified diff of two texts (no file header lines); empty when they are equal."""
    if (a or "") == (b or ""):
        return ()
    lines = difflib.unified_diff((a or "").splitlines(), (b or "").splitlines(), lineterm="", n=2)
    return tuple(line for line in lines if not line.startswith(("---", "+++")))


def tool_changes(a: tuple[ToolDef, ...], b: tuple[ToolDef, ...], na: Norm = _same_text,
                 nb: Norm = _same_text) -> tuple[ToolChange, ...]:  # fmt: skip
    """Tools added, removed or changed (by name; changed: description or schema differ)."""
    before, after = {t.name: t for t in a}, {t.name: t for t in b}
    out = [ToolChange(n, "removed", diff=_said("-", t)) for n, t in before.items() if n not in after]
    out += [ToolChange(n, "added", diff=_said("+", t)) for n, t in after.items() if n not in before]
    for name in (n for n in after if n in before):
        old, new = before[name], after[name]
        fields = tuple(f for f in ("description", "schema") if na(getattr(old, f)) != nb(getattr(new, f)))
        if fields:
            diff = unified(old.description, new.description) + unified(old.schema, new.schema)
            out.append(ToolChange(name, "changed", fields, diff))
    return tuple(out)


def _said(mark: str, tool: ToolDef) -> tuple[str, ...]:
    """An added or removed tool's description, a diff line each."""
    return tuple(mark + line for line in tool.description.splitlines())


def piece_changes(a: tuple[Piece, ...], b: tuple[Piece, ...], na: Norm = _same_text,
                  nb: Norm = _same_text) -> tuple[PieceChange, ...]:  # fmt: skip
    """Items only in A (removed) or only in B (added), in order."""
    out: list[PieceChange] = []
    matcher = difflib.SequenceMatcher(a=[(p.kind, p.role, na(p.text)) for p in a],
                                      b=[(p.kind, p.role, nb(p.text)) for p in b], autojunk=False)  # fmt: skip
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op != "equal":
            out += [PieceChange("removed", p) for p in a[a0:a1]] + [PieceChange("added", p) for p in b[b0:b1]]
    return tuple(out)


def _use_key(use: ToolUse, norm: Norm = _same_text) -> tuple:
    return (use.name, norm(use.arguments), None if use.result is None else norm(use.result), use.is_error)


def use_changes(a: tuple[ToolUse, ...], b: tuple[ToolUse, ...], na: Norm = _same_text,
                nb: Norm = _same_text) -> tuple[UseChange, ...]:  # fmt: skip
    """Tool calls made only in A or B, or made with other arguments or another result."""
    out: list[UseChange] = []
    matcher = difflib.SequenceMatcher(a=[_use_key(u, na) for u in a], b=[_use_key(u, nb) for u in b],
                                      autojunk=False)  # fmt: skip
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            continue
        olds, news = list(a[a0:a1]), list(b[b0:b1])
        while olds and news and olds[0].name == news[0].name:
            out.append(UseChange("changed", olds.pop(0), news.pop(0)))
        out += [UseChange("removed", u, None) for u in olds] + [UseChange("added", None, u) for u in news]
    return tuple(out)


_FIELDS = ("model", "endpoint", "status", "error", "stop_reason", "input_tokens", "output_tokens", "cache_read",
           "cache_write")  # fmt: skip


def compare_calls(a: Call, b: Call, na: Norm = _same_text, nb: Norm = _same_text) -> CallDiff:
    """What changed from call `a` to call `b` (texts compared as `na` and `nb` read them)."""
    fields = [Delta(f, getattr(a, f), getattr(b, f)) for f in _FIELDS if getattr(a, f) != getattr(b, f)]
    if (a.cost is None) != (b.cost is None) or (a.cost is not None and abs(a.cost - b.cost) > COST_EPSILON):  # type: ignore[operator]
        fields.append(Delta("cost", a.cost, b.cost))
    ignored = [Delta(f, getattr(a, f), getattr(b, f)) for f in ("id", "timestamp", "duration_ms")
               if getattr(a, f) != getattr(b, f)]  # fmt: skip
    ids = (tuple(u.call_id for u in a.tool_uses), tuple(u.call_id for u in b.tool_uses))
    if ids[0] != ids[1]:
        ignored.append(Delta("tool call ids", ", ".join(ids[0]), ", ".join(ids[1])))
    system = () if na(a.system or "") == nb(b.system or "") else unified(a.system, b.system)
    found = CallDiff(a, b, system=system, tools=tool_changes(a.tools, b.tools, na, nb),
                     items=piece_changes(a.new_items, b.new_items, na, nb),
                     answer=piece_changes(a.answer, b.answer, na, nb),
                     tool_uses=use_changes(a.tool_uses, b.tool_uses, na, nb), fields=tuple(fields))  # fmt: skip
    if na is not _same_text or nb is not _same_text:  # what differs only in dates, ids or paths
        exact = compare_calls(a, b)
        put_aside = [name for name in ("system", "tools", "items", "answer", "tool_uses")
                     if getattr(exact, name) and not getattr(found, name)]  # fmt: skip
        if put_aside:
            ignored.append(
                Delta("dates, ids or paths in " + ", ".join(_NAMES[n] for n in put_aside), None, None)
            )
    return replace(found, ignored=tuple(ignored))


_NAMES = {"system": "the system prompt", "tools": "tools", "items": "new items", "answer": "the answer",
          "tool_uses": "tool calls"}  # fmt: skip


def _once(diffs: list[CallDiff]) -> list[CallDiff]:
    """A system prompt or tool change that repeats on later calls is pointed to, not repeated."""
    out: list[CallDiff] = []
    seen_system: dict[tuple[str, ...], int] = {}
    seen_tools: dict[tuple[ToolChange, ...], int] = {}
    for i, d in enumerate(diffs):
        changes = {}
        if d.system:
            changes["system_as_in"] = seen_system.setdefault(d.system, i)
        if d.tools:
            changes["tools_as_in"] = seen_tools.setdefault(d.tools, i)
        changes = {k: v for k, v in changes.items() if v != i}
        out.append(CallDiff(**{**d.__dict__, **changes}) if changes else d)
    return out


def totals(run: Run) -> dict[str, float | int | None]:
    """What the totals table shows. `cost`: the priced calls' cost, None when no call was priced
    and some were unpriced (as the run summary says "cost unpriced"); `unpriced`: calls with tokens
    whose model has no known price; `errors`: as `inspect-session` counts them."""
    calls = run.calls
    priced = [c.cost for c in calls if c.cost is not None]
    unpriced = len(calls) - len(priced)
    return {
        "calls": len(calls),
        "input_tokens": sum(c.input_tokens for c in calls),
        "output_tokens": sum(c.output_tokens for c in calls),
        "cache_read": sum(c.cache_read for c in calls),
        "cache_write": sum(c.cache_write for c in calls),
        "cost": round(sum(priced), 9) if priced or not unpriced else None,
        "unpriced": unpriced,
        "tool_calls": sum(len(c.tool_uses) for c in calls),
        "errors": run.errors,
    }


def alone(a: Call | None, b: Call | None) -> CallDiff:
    """A call only one run made: its new items and tool calls as removed (only in A) or added."""
    call, op = (a, "removed") if b is None else (b, "added")
    assert call is not None
    uses = tuple(
        UseChange(op, u if op == "removed" else None, u if op == "added" else None) for u in call.tool_uses
    )
    return CallDiff(a, b, items=tuple(PieceChange(op, p) for p in call.new_items), tool_uses=uses)


def compare(a: Run, b: Run) -> SessionDiff:
    """Run `a` against run `b`, call by call, with the totals of each."""
    both = bool(a.workspace and b.workspace)  # as a replay matches: a workspace on both sides or none
    na, nb = norm_of(a, both), norm_of(b, both)
    diffs = [
        compare_calls(x, y, na, nb) if x is not None and y is not None else alone(x, y)
        for x, y in align(a.calls, b.calls, na, nb)
    ]
    ta, tb = totals(a), totals(b)
    timing = (
        Delta("call time ms", sum(c.duration_ms for c in a.calls), sum(c.duration_ms for c in b.calls)),
    )
    return SessionDiff(a.session_id, b.session_id, tuple(_once(diffs)),
                       tuple(Delta(k, ta[k], tb[k]) for k in ta if k != "unpriced" or ta[k] or tb[k]),
                       timing)  # fmt: skip
