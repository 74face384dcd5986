"""Terminal tables that fit the terminal: low-value columns are dropped, never cut in half.

Every command's table is a list of `Column`s and rows of strings. `fit_table` keeps the columns
whose natural width fits the console (dropping the lowest `priority` first) and lets only the
columns marked `wrap` (free text: errors, arguments, paths) wrap onto more lines. Numbers, ids
and names are never truncated or folded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

_WRAP_MIN = 16
_WORD_MAX = 40
"""A wrapping column is at least as wide as its longest word, up to this many cells (a longer word,
a hash or a long path, folds): words, host names and short paths are never cut in two."""
_GAP = 2
"""Cells between two columns (collapsed padding and the separator; no edges)."""
_DETAIL = 2
"""Columns of this priority or lower (small counts) are dropped before free text wraps."""


@dataclass(frozen=True)
class Column:
    name: str
    justify: Literal["left", "right"] = "right"
    priority: int = 9
    """Columns are dropped lowest priority first (then the rightmost first) until the table fits."""
    wrap: bool = False
    """Free text that may wrap onto several lines (at least `_WRAP_MIN` cells wide)."""
    footer: str = ""


Cell = str | Text


def _table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], keep: list[int], title: str | None,
           footer: bool) -> Table:  # fmt: skip
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True, title=title,
                  title_justify="left", show_footer=footer)  # fmt: skip
    for i in keep:
        c = columns[i]
        table.add_column(escape(c.name), justify=c.justify, no_wrap=not c.wrap, overflow="fold",
                         footer=escape(c.footer), min_width=_wrap_width(c, rows, i) if c.wrap else None)  # fmt: skip
    for r in rows:
        table.add_row(*(_cell(r[i], columns[i].wrap) for i in keep))
    return table


def _cell(cell: Cell, wrap: bool) -> Cell:
    """A cell as rich prints it: markup escaped; in a wrapping column, a host or path longer than
    `_WORD_MAX` shortened in its middle at a `/` (`github.com/…/info/refs`) rather than folded
    mid-word."""
    if isinstance(cell, Text):
        return cell
    if wrap and any(len(w) > _WORD_MAX and "/" in w for w in cell.split()):
        cell = " ".join(short_path(w) for w in cell.split(" "))
    return escape(cell)


def short_path(word: str, limit: int = _WORD_MAX) -> str:
    """`word` as is when it fits `limit` or is no path; else its first segment (the host), `…` and
    as many of its last segments as fit (at least the last one, itself shortened if need be)."""
    if len(word) <= limit or "/" not in word:
        return word
    head, _, rest = word.partition("/")
    tail: list[str] = []
    for segment in reversed(rest.split("/")):
        if tail and len(head) + 2 + len("/".join([segment, *tail])) + 1 > limit:
            break
        tail.insert(0, segment)
    kept = "/".join(tail)
    if len(head) + 3 + len(kept) > limit:  # even the host and the last segment are too long
        return word[: limit // 2 - 1] + "…" + word[-(limit - limit // 2) :]
    return f"{head}/…/{kept}"


def _cells(cell: Cell | str) -> int:
    """Width of the widest line of a cell."""
    text = cell.plain if isinstance(cell, Text) else cell
    return max((cell_len(line) for line in text.split("\n")), default=0)


def _longest_word(cell: Cell | str) -> int:
    text = cell.plain if isinstance(cell, Text) else cell
    return max((cell_len(word) for word in text.split()), default=0)


def _wrap_width(column: Column, rows: Sequence[Sequence[Cell]], i: int) -> int:
    """The narrowest a wrapping column may be: its header, `_WRAP_MIN`, and its longest word (up to
    `_WORD_MAX`), never more than its widest cell."""
    natural = max([_cells(column.name), _cells(column.footer), *(_cells(r[i]) for r in rows)])
    word = min(_WORD_MAX, max((_longest_word(r[i]) for r in rows), default=0))
    return min(natural, max(_WRAP_MIN, _cells(column.name), word))


def _min_width(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], keep: list[int]) -> int:
    """The fewest cells the table needs: every column whole, wrapping ones as `_wrap_width` says
    (longer words fold), `_GAP` between columns."""
    widths = []
    for i in keep:
        c = columns[i]
        natural = max([_cells(c.name), _cells(c.footer), *(_cells(r[i]) for r in rows)])
        widths.append(_wrap_width(c, rows, i) if c.wrap else natural)
    return sum(widths) + _GAP * (len(keep) - 1)


def fit_columns(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int) -> list[int]:
    """Indexes of the columns to show so that the table fits `width` cells."""
    keep = list(range(len(columns)))
    order = sorted(range(len(columns)), key=lambda i: (columns[i].priority, -i))
    for i in order:
        if len(keep) == 1 or _min_width(columns, rows, keep) <= width:
            break
        keep.remove(i)
    # a short command or path on one line is worth more than a count beside it (a long one wraps
    # anyway: then the counts stay)
    detail = [i for i in order if i in keep and columns[i].priority <= _DETAIL]
    for n in range(1, len(detail) + 1):
        if _natural_width(columns, rows, keep) <= width or not any(columns[k].wrap for k in keep):
            break
        fewer = [i for i in keep if i not in detail[:n]]
        if _natural_width(columns, rows, fewer) <= width:
            return fewer
    return keep


def _natural_width(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], keep: list[int]) -> int:
    """The cells the table takes with no cell wrapped."""
    widths = [max([_cells(columns[i].name), _cells(columns[i].footer), *(_cells(r[i]) for r in rows)])
              for i in keep]  # fmt: skip
    return sum(widths) + _GAP * (len(keep) - 1)


def fit_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    width: int,
    *,
    title: str | None = None,
    footer: bool = False,
) -> Table:
    """A rich table of `rows` with the columns that fit `width` (cells are plain text or Text)."""
    return _table(columns, rows, fit_columns(columns, rows, width), title, footer)


def value_text(value: object) -> str:
    """A query result value as text: NULL, numbers as numbers (`0.00001785`, never `1.785e-05`)."""
    if value is None:
        return "NULL"
    if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        text = repr(value)
        if "e" in text or "E" in text:
            from decimal import Decimal

            text = format(Decimal(text), "f")
        return text
    return str(value)


_CELL_CAP = 40
"""A result column wider than this (and than its header) wraps at spaces (a longer word folds)."""


def print_rows(console: Console, columns: Sequence[str], values: Sequence[Sequence[object]]) -> None:
    """Query results: a table when every column fits beside the others with its header whole (each
    column as wide as its header and its widest value up to `_CELL_CAP`; numbers right-aligned);
    else one `column: value` block per row, as psql's expanded display."""
    rows = [[value_text(v) for v in row] for row in values]
    numeric = [
        all(isinstance(r[i], int | float) for r in values if r[i] is not None) for i in range(len(columns))
    ]
    widths = [max(cell_len(c), min(_CELL_CAP, max((cell_len(r[i]) for r in rows), default=0)))
              for i, c in enumerate(columns)]  # fmt: skip
    if sum(widths) + _GAP * (len(columns) - 1) <= console.width:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
        for col, width, num in zip(columns, widths, numeric, strict=True):
            table.add_column(escape(col), overflow="fold", width=width, justify="right" if num else "left")
        for row in rows:
            table.add_row(*(escape(v) for v in row))
        console.print(table)
        return
    width = max(cell_len(c) for c in columns)
    for n, row in enumerate(rows, 1):
        console.print(f"[bold]-- row {n}[/bold]")
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, style="dim")
        grid.add_column(overflow="fold")
        for col, value in zip(columns, row, strict=True):
            grid.add_row(escape(col.ljust(width)), escape(value))
        console.print(grid)
