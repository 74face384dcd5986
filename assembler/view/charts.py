"""Charts as inline SVG strings, drawn on the server (no script, no external asset)."""

from __future__ import annotations

import math
from html import escape

PART_COLORS = {
    "system": "#8b6fc9",
    "tool_definitions": "#d08a3c",
    "mcp_tool_definitions": "#c2a23a",
    "history": "#9aa4b1",
    "tool_results": "#3f9b8f",
    "new_input": "#3d7cc9",
}
PART_LABELS = {
    "system": "system",
    "tool_definitions": "tool definitions",
    "mcp_tool_definitions": "MCP tool definitions",
    "history": "history",
    "tool_results": "tool results",
    "new_input": "new input",
}


def money(value: float | None) -> str:
    """`$0.0123` below a dollar, `$12.34` above, `<$0.0001` for a cost that rounds to nothing; `—`
    when unknown."""
    if value is None:
        return "—"
    if 0 < value < 0.00005:
        return "<$0.0001"
    return f"${value:,.4f}" if abs(value) < 1 else f"${value:,.2f}"


def _nice(top: float) -> float:
    """A round axis maximum at or above `top` (1, 2, 2.5 or 5 times a power of ten)."""
    if top <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(top))
    for step in (1, 2, 2.5, 5, 10):
        if top <= step * magnitude * (1 + 1e-9):
            return step * magnitude
    return 10 * magnitude


def cost_by_day(days: list[tuple[str, float]], width: int = 720, height: int = 140) -> str:
    """Bars of cost per day, the axis in dollars."""
    if not days:
        return ""
    top = _nice(max(c for _, c in days))
    left, bottom = 70, 20
    plot_w, plot_h = width - left - 8, height - bottom - 8
    bar = plot_w / len(days)
    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="cost per day">']
    for frac in (0, 0.5, 1):
        y = 8 + plot_h * (1 - frac)
        out.append(f'<line class="grid" x1="{left}" x2="{width - 8}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(
            f'<text class="axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{money(top * frac)}</text>'
        )
    label_every = max(1, len(days) // 8)
    for i, (day, cost) in enumerate(days):
        h = plot_h * cost / top
        x = left + i * bar
        w = min(max(bar * 0.76, 1), 28)
        out.append(f'<rect class="bar" x="{x + (bar - w) / 2:.1f}" y="{8 + plot_h - h:.1f}" width="{w:.1f}" '
                   f'height="{h:.1f}"><title>{day}: {money(cost)}</title></rect>')  # fmt: skip
        if i % label_every == 0:
            out.append(
                f'<text class="axis" x="{x + bar / 2:.1f}" y="{height - 4}" text-anchor="middle">{day[5:]}</text>'
            )
    out.append("</svg>")
    return "".join(out)


def cumulative(
    points: list[tuple[float, float, int]], span_s: float, width: int = 720, height: int = 150
) -> str:
    """Cumulative cost (line, left axis) and tokens (dashed, right axis) over the session's time."""
    if not points:
        return ""
    top_cost = _nice(points[-1][1]) if points[-1][1] > 0 else 1.0
    top_tok = max(points[-1][2], 1)
    left, right, bottom = 70, 70, 20
    plot_w, plot_h = width - left - right, height - bottom - 8
    span = max(span_s, points[-1][0], 0.001)

    def xy(t: float, v: float, top: float) -> str:
        return f"{left + plot_w * t / span:.1f},{8 + plot_h * (1 - v / top):.1f}"

    cost_line = " ".join([xy(0, 0, top_cost)] + [xy(t, c, top_cost) for t, c, _ in points])
    tok_line = " ".join([xy(0, 0, top_tok)] + [xy(t, k, top_tok) for t, _, k in points])
    out = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="cumulative cost and tokens">'
    ]
    for frac in (0, 0.5, 1):
        y = 8 + plot_h * (1 - frac)
        out.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(
            f'<text class="axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{money(top_cost * frac)}</text>'
        )
        out.append(
            f'<text class="axis tok" x="{width - right + 6}" y="{y + 4:.1f}">{int(top_tok * frac):,}</text>'
        )
    out.append(f'<polyline class="line cost" points="{cost_line}"/>')
    out.append(f'<polyline class="line tokens" points="{tok_line}"/>')
    out.append(f'<text class="axis" x="{left}" y="{height - 4}">0s</text>')
    out.append(
        f'<text class="axis" x="{width - right}" y="{height - 4}" text-anchor="end">{span:.1f}s</text>'
    )
    out.append("</svg>")
    return "".join(out)


def stacked(parts: list[tuple[str, int]], width: float = 100.0) -> str:
    """One call's input tokens by source, as a thin stacked bar (hover: the part and its tokens)."""
    total = sum(t for _, t in parts)
    if total <= 0:
        return ""
    out = [f'<svg class="stack" viewBox="0 0 {width} 6" preserveAspectRatio="none" role="img" '
           f'aria-label="input tokens by source">']  # fmt: skip
    x = 0.0
    for part, tokens in parts:
        w = width * tokens / total
        label = escape(f"{PART_LABELS.get(part, part)}: {tokens:,} tokens ({100 * tokens / total:.0f}%)")
        out.append(f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="6" fill="{PART_COLORS.get(part, "#bbb")}">'
                   f"<title>{label}</title></rect>")  # fmt: skip
        x += w
    out.append("</svg>")
    return "".join(out)
