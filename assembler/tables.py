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
from rich.markup import escape
from rich.table import Table
from rich.text import Text

_WRAP_MIN = 16
_GAP = 2
"""Cells between two columns (collapsed padding and the separator; no edges)."""


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
                         footer=escape(c.footer), min_width=_WRAP_MIN if c.wrap else None)  # fmt: skip
    for r in rows:
        table.add_row(*(r[i] if isinstance(r[i], Text) else escape(r[i]) for i in keep))
    return table


def _cells(cell: Cell | str) -> int:
    """Width of the widest line of a cell."""
    text = cell.plain if isinstance(cell, Text) else cell
    return max((cell_len(line) for line in text.split("\n")), default=0)


def _min_width(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], keep: list[int]) -> int:
    """The fewest cells the table needs: every column whole, wrapping ones `_WRAP_MIN` wide (their
    long words fold), `_GAP` between columns."""
    widths = []
    for i in keep:
        c = columns[i]
        natural = max([_cells(c.name), _cells(c.footer), *(_cells(r[i]) for r in rows)])
        widths.append(min(natural, max(_WRAP_MIN, _cells(c.name))) if c.wrap else natural)
    return sum(widths) + _GAP * (len(keep) - 1)


def fit_columns(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int) -> list[int]:
    """Indexes of the columns to show so that the table fits `width` cells."""
    keep = list(range(len(columns)))
    order = sorted(range(len(columns)), key=lambda i: (columns[i].priority, -i))
    for i in order:
        if len(keep) == 1 or _min_width(columns, rows, keep) <= width:
            break
        keep.remove(i)
    return keep


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
