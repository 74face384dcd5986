"""`capsem show-call ID` for a person: what the call page shows, as text that fits the terminal.

The call is read through the same page model as `capsem view`'s call page
(`assembler.view.queries.call_view`), so both say the same: the call's model, status, usage and
cost with where its input tokens went; the system prompt and every tool definition folded to a
line each (size, and whether it is new in this call or the same as before); the conversation with
roles, the items new in this call marked `+`, each tool call beside its result; then the answer
assembled (thinking, text, tool calls). `--json` shows the stored bodies as indented JSON and
`--raw` the exact bytes.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

from assembler.cli_support import capsem_command
from assembler.view.queries import CallView, Item, break_sentence

LINES_PER_ITEM = 4
"""Lines of an item's text shown before `… (N more lines)`: the whole text is in --json and the view."""


def _money(cost: float, unpriced: bool) -> str:
    if unpriced:
        return "unpriced"
    return "<$0.0001" if 0 < cost < 0.0001 else f"${cost:.4f}"


def _size(text: str) -> str:
    n = len(text.encode())
    return f"{n:,} B" if n < 10_000 else f"{n / 1024:,.0f} KB"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def _block(text: str, width: int, indent: str, lines: int = LINES_PER_ITEM) -> list[str]:
    """`text` wrapped to `width` under `indent`, at most `lines` lines (the rest counted)."""
    wrapped: list[str] = []
    for paragraph in text.strip().splitlines() or [""]:
        wrapped += textwrap.wrap(paragraph, max(20, width - len(indent)), break_long_words=True,
                                 break_on_hyphens=False) or [""]  # fmt: skip
    shown = [indent + line for line in wrapped[:lines]]
    if len(wrapped) > lines:
        shown.append(f"{indent}… ({len(wrapped) - lines} more lines)")
    return shown


def _header(view: CallView) -> list[str]:
    call, node = view.call, view.node
    facts = [f"{node.provider} {node.model or '?'}", f"status {node.status_code or '–'}"]
    if call.get("stream"):
        facts.append("streamed")
    facts.append(f"{node.duration_ms / 1000:.1f} s")
    if node.ttft_ms is not None:
        facts.append(f"first token {node.ttft_ms} ms")
    lines = [f"model call {node.id} · " + " · ".join(facts)]
    cache = [f"{node.cache_read:,} cache read" if node.cache_read else "",
             f"{node.cache_write:,} cache write" if node.cache_write else ""]  # fmt: skip
    cached = f" ({', '.join(c for c in cache if c)})" if any(cache) else ""
    stop = f" · stop: {node.stop_reason}" if node.stop_reason else ""
    cost = _money(node.cost, node.unpriced)
    lines.append(f"tokens: {node.input_tokens:,} in{cached}, {node.output_tokens:,} out · {cost}{stop}")
    if node.error:
        lines.append(f"error: {node.error}")
    if view.subagent_of is not None:
        lines.append(f"a subagent's call, started by tool call {view.subagent_of}")
    if view.cache_break:
        lines.append(break_sentence(view.cache_break))
    return lines


def _breakdown(view: CallView) -> list[str]:
    parts = [p for p in view.breakdown if p.get("tokens")]
    if not parts:
        return []
    total = sum(p["tokens"] for p in parts) or 1
    out = ["", "input tokens by source (estimated, scaled to the reported total):"]
    for p in parts:
        cost = "" if p.get("cost_usd") is None else f"  ${p['cost_usd']:.4f}"
        cached = f"  {p['cache_read_tokens']:,} cached" if p.get("cache_read_tokens") else ""
        out.append(
            f"  {p['part'].replace('_', ' '):22}{p['tokens']:>10,} {p['tokens'] / total:>4.0%}{cost}{cached}"
        )
    return out


def _folded(items: Iterable[Item], width: int) -> list[str]:
    """The system prompt and tool definitions, a line each."""
    out = []
    for item in items:
        mark = "+" if item.new else " "
        state = "new in this call" if item.new else "as before"
        if item.kind == "system":
            first = item.text.strip().splitlines()[0] if item.text.strip() else ""
            label = f"{mark} system  {_size(item.text)}, {state}: "
        else:
            first = ""
            label = f"{mark} tool    {item.tool_name or '?'}  {_size(item.text)}, {state}"
        out.append(_cut(label + first, width))
    return out


def _role(item: Item) -> str:
    if item.kind == "tool_call":
        return "tool call"
    if item.kind == "tool_result":
        return "tool result"
    return item.role or item.kind


def _conversation(items: list[Item], width: int) -> list[str]:
    out = []
    for item in items:
        mark = "+" if item.new else " "
        head = f"{mark} {_role(item)}"
        if item.kind in ("tool_call", "tool_result"):
            head += f" {item.tool_name}" if item.tool_name else ""
            head += f" ({item.call_id or '?'})"
            if item.link is not None:
                head += f" · {'answered in' if item.kind == 'tool_call' else 'asked in'} call {item.link}"
        out.append(_cut(head, width))
        out += _block(item.text, width, "    ")
    return out


def _answer(view: CallView, width: int) -> list[str]:
    out = []
    verdicts = {t.call_id: t for t in view.tools}
    for item in view.outputs:
        if item.kind == "tool_call":
            tool = verdicts.get(item.call_id or "")
            verdict = f" · {tool.verdict}" if tool is not None and tool.verdict else ""
            out.append(f"  tool call {item.tool_name or '?'} ({item.call_id or '?'}){verdict}")
            out += _block(item.text, width, "    ")
        else:
            label = "thinking" if item.kind == "thinking" else (item.role or item.kind)
            out.append(f"  {label}")
            out += _block(item.text, width, "    ", lines=LINES_PER_ITEM * 3)
    if not view.outputs and view.node.answer:
        out += _block(view.node.answer, width, "  ", lines=LINES_PER_ITEM * 3)
    if not view.outputs:  # no items recorded: the tool calls from their rows
        for tool in view.tools:
            verdict = f" · {tool.verdict}" if tool.verdict else ""
            out.append(f"  tool call {tool.name} ({tool.call_id}){verdict}")
            out += _block(tool.arguments, width, "    ")
    return out or ["  (no answer recorded)"]


def render_call(view: CallView, width: int = 80) -> str:
    """The call as text at most `width` columns wide (see the module doc)."""
    inputs = view.inputs
    folded = [i for i in inputs if i.kind in ("system", "tool_definition")]
    talk = [i for i in inputs if i.kind not in ("system", "tool_definition")]
    new = sum(i.new for i in inputs)
    lines = [*_header(view), *_breakdown(view)]
    if folded:
        lines += [
            "",
            f"system prompt and tools ({len(folded)}, + new in this call):",
            *_folded(folded, width),
        ]
    said = f"conversation ({len(talk)} items, {new} new in this call, marked +):"
    lines += ["", said, *_conversation(talk, width)]
    lines += ["", "answer:", *_answer(view, width)]
    lines += [
        "",
        f"more: {capsem_command()} show-call {view.node.id} {view.session_id} --json (the whole bodies)",
        f"      {capsem_command()} view {view.session_id}",
    ]
    return "\n".join(_fit(lines, width))


def _fit(lines: list[str], width: int) -> list[str]:
    """Lines longer than `width` folded at spaces, the rest indented (never cut mid-word)."""
    out = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        out += textwrap.wrap(
            line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        )
    return out
