"""`capsem diff` for a terminal: the changed calls one block each, the unchanged ones a line per
stretch, then the totals; ids and timings dimmed. Also the `--json` form (`as_json`)."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from addons.budgets import usd
from assembler.diff.compare import CallDiff, Delta, PieceChange, SessionDiff, UseChange
from assembler.diff.load import Call

LINES_PER_TEXT = 3
"""Lines of an item's text shown before `… (N more lines)` (the whole text: `capsem show-call`)."""
_LABELS = {"input_tokens": "input tokens", "output_tokens": "output tokens", "cache_read": "cache read tokens",
           "cache_write": "cache write tokens", "stop_reason": "stop reason", "tool_calls": "tool calls",
           "unpriced": "unpriced calls"}  # fmt: skip


def label(what: str) -> str:
    return _LABELS.get(what, what.replace("_", " "))


def value(what: str, v: Any) -> str:
    """A value as shown: money as budgets show it (`$0.0123`), a cost of None `unpriced` (its model
    has no known price: never `$0`), counts with thousands separators."""
    if what == "cost":
        return "unpriced" if v is None else usd(v)
    if v is None:
        return "—"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def signed(d: Delta) -> str:
    """The difference B - A of a number with its sign: `+3`, `-$0.0001` (empty when a side has no
    number: an unpriced cost)."""
    if d.a is None or d.b is None:
        return ""
    diff = d.b - d.a  # type: ignore[operator]
    return ("+" if diff >= 0 else "-") + value(d.what, abs(diff))


def change(d: Delta) -> str:
    """`87 → 90 (+3)`: numbers with their difference."""
    out = f"{value(d.what, d.a)} → {value(d.what, d.b)}"
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (d.a, d.b))
    return f"{out} ({signed(d)})" if numeric else out


def _ids(call: Call | None) -> str:
    return "–" if call is None else str(call.id)


def _what(d: CallDiff) -> str:
    call = d.b or d.a
    assert call is not None
    model = (
        call.model if d.a is None or d.b is None or d.a.model == d.b.model else f"{d.a.model} → {d.b.model}"
    )
    turn = f"turn {call.turn} · " if call.turn else ""
    return f"{turn}{call.provider} {model}"


MAX_LINE = 300
"""Characters of one line of an item shown (the rest: `capsem show-call`)."""


def _at(indent: int, text: str, style: str = "") -> Padding:
    """`text` indented, its folded lines under its first (never back at column 0)."""
    return Padding(Text(text, style=style), (0, 0, 0, indent), expand=False)


def _excerpt(text: str, style: str, mark: str) -> list[Padding]:
    lines = text.strip().splitlines() or [""]
    out = [_at(6, f"{mark} " + (line if len(line) <= MAX_LINE else line[:MAX_LINE] + "…"), style)
           for line in lines[:LINES_PER_TEXT]]  # fmt: skip
    if len(lines) > LINES_PER_TEXT:
        out.append(_at(8, f"… ({len(lines) - LINES_PER_TEXT} more lines)", "dim"))
    return out


def _pieces(title: str, changes: tuple[PieceChange, ...]) -> list[Padding]:
    out = [_at(2, f"{title}:", "bold")]
    for c in changes:
        mark, style = ("+", "green") if c.op == "added" else ("-", "red")
        who = f"{c.piece.role} {c.piece.kind}" if c.piece.role else c.piece.kind
        where = "only in B" if c.op == "added" else "only in A"
        out.append(_at(4, f"{mark} {who.replace('_', ' ')} ({where})", style))
        out += _excerpt(c.piece.text, style, mark)
    return out


def _uses(changes: tuple[UseChange, ...], title: str = "tool calls the model made:") -> list[Padding]:
    out = [_at(2, title, "bold")]
    for c in changes:
        for side, mark, style in (("a", "-", "red"), ("b", "+", "green")):
            use = getattr(c, side)
            if use is None:
                continue
            result = "no result" if use.result is None else ("✗ " if use.is_error else "→ ") + use.result
            first = result.strip().splitlines()[0] if result.strip() else result
            out.append(_at(4, f"{mark} {use.name}({use.arguments[:MAX_LINE]}) {first[:MAX_LINE]}", style))
    return out


def _diff_lines(lines: tuple[str, ...]) -> list[Padding]:
    style = {"+": "green", "-": "red", "@": "cyan"}
    return [_at(6, line, style.get(line[:1], "")) for line in lines]


def _only(d: CallDiff) -> list[Padding]:
    """What a call only one session made sent and did."""
    call = d.a or d.b
    assert call is not None
    out = _pieces("new items", d.items) if d.items else []
    out += _uses(d.tool_uses) if d.tool_uses else []
    facts = f"{call.input_tokens:,} in, {call.output_tokens:,} out, {value('cost', call.cost)}"
    return [*out, _at(2, f"tokens {facts}", "red" if d.only == "a" else "green")]


def _same_as(what: str, seen: CallDiff) -> Padding:
    return _at(2, f"{what}: changed as in call {_ids(seen.a)} ↔ {_ids(seen.b)}", "dim")


def call_block(d: CallDiff, index: dict[int, CallDiff]) -> list[Text | Padding]:
    """One changed pair (or a call only one session made)."""
    head = Text(f"call {_ids(d.a)} ↔ {_ids(d.b)}", style="bold")
    head.append(f" · {_what(d)}")
    if d.only:
        head.append(f" · only in {d.only.upper()}", style="yellow")
        return [head, *_only(d)]
    out: list[Text | Padding] = [head]
    if d.system and d.system_as_in is not None:
        out.append(_same_as("system prompt", index[d.system_as_in]))
    elif d.system:
        out += [_at(2, "system prompt:", "bold"), *_diff_lines(d.system)]
    if d.tools and d.tools_as_in is not None:
        out.append(_same_as("tools", index[d.tools_as_in]))
    elif d.tools:
        out.append(_at(2, "tools:", "bold"))
        for t in d.tools:
            mark, style = {"added": ("+", "green"), "removed": ("-", "red")}.get(t.change, ("~", "yellow"))
            what = f" ({', '.join(t.fields)} changed)" if t.fields else f" ({t.change})"
            out += [_at(4, f"{mark} {t.name}{what}", style), *_diff_lines(t.diff)]
    if d.items:
        out += _pieces("new items", d.items)
    if d.answer:
        out += _pieces("answer", d.answer)
    if d.tool_uses:
        out += _uses(d.tool_uses)
    if d.fields:
        out.append(_at(2, " · ".join(f"{label(f.what)} {change(f)}" for f in d.fields)))
    return out


def _ignored(d: CallDiff) -> str:
    parts = []
    for f in d.ignored:
        if f.what == "duration_ms":
            parts.append(f"call time {f.a:,} ms → {f.b:,} ms")
        elif f.what == "id":
            parts.append("call id")
        elif f.what == "tool call ids" or f.what.startswith("dates, ids or paths"):
            parts.append(f.what)
    return ", ".join(parts) or "timestamps"


def kinds_changed(diff: SessionDiff) -> list[tuple[str, int]]:
    """What changed and in how many calls: `[("system prompt", 4), ("tools", 4)]`."""
    counts = {
        "calls only in A": sum(d.only == "a" for d in diff.calls),
        "calls only in B": sum(d.only == "b" for d in diff.calls),
    }
    paired = [d for d in diff.calls if not d.only]
    counts |= {
        "system prompt": sum(bool(d.system) for d in paired),
        "tools": sum(bool(d.tools) for d in paired),
        "new items": sum(bool(d.items) for d in paired),
        "answer": sum(bool(d.answer) for d in paired),
        "tool calls": sum(bool(d.tool_uses) for d in paired),
    }
    for d in diff.calls:
        for f in d.fields:
            counts[label(f.what)] = counts.get(label(f.what), 0) + 1
    return [(k, n) for k, n in counts.items() if n]


def render(diff: SessionDiff, console: Console) -> None:
    """The whole diff on `console` (see the module doc)."""
    changed = diff.changed
    console.print(Text.assemble(("A ", "bold"), diff.a, ("  →  B ", "bold"), diff.b))
    pairs = len([c for c in diff.calls if not c.only])
    if diff.same:
        console.print(Text(f"no change but ids and timings ({pairs} calls lined up)", style="green"))
    else:
        same_calls = len(diff.calls) - len(changed)
        rest = f", {same_calls} the same but ids and timings" if same_calls else ""
        console.print(f"{len(changed)} of {len(diff.calls)} calls changed{rest}")
        what = [f"{k} ({n} {'call' if n == 1 else 'calls'})" if not k.startswith("calls") else f"{k}: {n}"
                for k, n in kinds_changed(diff)]  # fmt: skip
        for line in _greedy(["changed:", *what], console.width):
            console.print(Text(line, style="yellow"))
    for line in denied_lines(diff):
        console.print(Text(line, style="dim"))
    index = dict(enumerate(diff.calls))
    same: list[CallDiff] = []
    for d in diff.calls:
        if not d.changed:
            same.append(d)
            continue
        _print_same(console, same)
        same = []
        console.print()
        console.print(Group(*call_block(d, index)))
        if d.ignored:
            console.print(_at(2, f"ids and timings differ: {_ignored(d)}", "dim"))
    _print_same(console, same)
    console.print()
    console.print(totals_table(diff))


def denied_lines(diff: SessionDiff) -> list[str]:
    """The calls where the agent got capsem's denial text instead of a tool call, on each side: such
    a call is compared as the agent received it (a replay is answered so), not as the model sent it."""
    out = []
    for d in diff.calls:
        a, b = (d.a.denied if d.a else ()), (d.b.denied if d.b else ())
        if not (a or b):
            continue
        sides = (f"{', '.join(a)} (A and B)" if a == b else
                 f"A: {', '.join(a) or 'none'}; B: {', '.join(b) or 'none'}")  # fmt: skip
        out.append(f"  call {_ids(d.a)} ↔ {_ids(d.b)}: {sides}")
    return ["tool calls denied (compared as the agent received them):", *out] if out else []


def _greedy(parts: list[str], width: int) -> list[str]:
    """`parts` joined by `, ` into lines at most `width` wide, never splitting a part."""
    lines = [parts[0]]
    for i, part in enumerate(parts[1:]):
        sep = " " if i == 0 else ", "
        if len(lines[-1]) + len(sep) + len(part) + 1 <= width:
            lines[-1] += sep + part
        else:
            lines[-1] += "," if i else ""
            lines.append("  " + part)
    return lines


def _print_same(console: Console, same: list[CallDiff]) -> None:
    if not same:
        return
    first, last = same[0], same[-1]
    calls = (f"call {_ids(first.a)} ↔ {_ids(first.b)}" if len(same) == 1 else
             f"calls {_ids(first.a)}–{_ids(last.a)} ↔ {_ids(first.b)}–{_ids(last.b)}")  # fmt: skip
    console.print(Text(f"{calls}: the same but ids and timings", style="dim"))


def totals_table(diff: SessionDiff) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, title_justify="left")
    table.add_column("totals")
    table.add_column("A", justify="right")
    table.add_column("B", justify="right")
    table.add_column("change", justify="right")
    for d in diff.totals:
        delta = "" if d.a == d.b else signed(d)
        table.add_row(label(d.what), value(d.what, d.a), value(d.what, d.b), delta)
    for d in diff.timing:
        table.add_row(Text("call time", style="dim"), Text(f"{d.a:,} ms", style="dim"),
                      Text(f"{d.b:,} ms", style="dim"), Text("(timing)", style="dim"))  # fmt: skip
    return table


def as_json(diff: SessionDiff) -> dict[str, Any]:
    """The diff for scripts: each pair with what changed (the calls by id, not their whole text)."""
    calls = []
    for d in diff.calls:
        entry = asdict(replace(d, a=None, b=None))  # the calls by id below, not their whole text
        for side in ("a", "b"):
            call = getattr(d, side)
            entry[side] = None if call is None else {"id": call.id, "turn": call.turn, "provider": call.provider,
                                                     "model": call.model, "delivered": call.delivered,
                                                     "denied": list(call.denied)}  # fmt: skip
        entry["changed"] = d.changed
        calls.append(entry)
    return {"a": diff.a, "b": diff.b, "same": diff.same, "calls": calls,
            "totals": {d.what: {"a": d.a, "b": d.b} for d in diff.totals},
            "timing": {d.what: {"a": d.a, "b": d.b} for d in diff.timing}}  # fmt: skip
