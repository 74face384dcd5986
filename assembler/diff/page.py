"""What `capsem view` needs for comparing: the `/diff/A/B` page's context and, for a session page,
the sessions it can be compared with (its original when it is a replay, the one before it in its
project, then the latest others)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from sqlite3 import Connection
from typing import Any

from assembler.diff import text
from assembler.diff.compare import CallDiff, compare
from assembler.diff.load import load_session
from assembler.sessiondb import MainDbMissing, db_file, open_main

MAX_CHOICES = 30
"""Sessions offered in the "compare with…" list."""


@dataclass(frozen=True)
class Choice:
    id: str
    label: str


@dataclass(frozen=True)
class CompareWith:
    session: str
    original: str | None
    """The session this one replays (`sessions.replay_of`), when it is a replay."""
    before: str | None
    """The latest earlier session of its project (of any project when it has none)."""
    choices: tuple[Choice, ...]


@dataclass(frozen=True)
class Block:
    """What the page shows in a row: one changed pair (`index` into the diff's calls) or a stretch
    of unchanged pairs (`first` to `last`, `count` of them)."""

    index: int
    pair: CallDiff
    last: CallDiff | None = None
    count: int = 1


def blocks(calls: tuple[CallDiff, ...]) -> list[Block]:
    """The pairs, each changed one alone and each stretch of unchanged ones as one block."""
    out: list[Block] = []
    for i, pair in enumerate(calls):
        previous = out[-1] if out else None
        if not pair.changed and previous is not None and not previous.pair.changed:
            out[-1] = Block(previous.index, previous.pair, pair, previous.count + 1)
        else:
            out.append(Block(i, pair))
    return out


def diff_context(
    open_session: Callable[[str], AbstractContextManager[Connection]], a: str, b: str
) -> dict[str, Any]:
    """The template context of the `/diff/A/B` page (`open_session(id)`: a read-only connection)."""
    found = compare(*(load_session(open_session, session_id) for session_id in (a, b)))
    return {"d": found, "blocks": blocks(found.calls), "kinds": text.kinds_changed(found),
            "denied": [line.strip() for line in text.denied_lines(found)], "label": text.label,
            "value": text.value, "signed": text.signed, "title": f"Compare {a} → {b}"}  # fmt: skip


def _label(row: dict[str, Any], why: str = "") -> str:
    facts = [row["id"], row.get("name") or "", row.get("project") or "",
             f"{row.get('total_model_calls') or 0} calls", f"${row.get('total_estimated_cost') or 0:.4f}"]  # fmt: skip
    return " · ".join(f for f in facts if f) + (f" ({why})" if why else "")


def compare_with(session_id: str, main: dict[str, Any] | None) -> CompareWith | None:
    """The sessions offered beside `session_id`'s page, those with a database on disk, or None
    when there is none (or no main.db)."""
    try:
        with open_main() as conn:
            rows = [dict(r) for r in conn.execute(
                "SELECT * FROM sessions WHERE id != ? ORDER BY created_at DESC, id DESC LIMIT ?",
                (session_id, MAX_CHOICES * 3))]  # fmt: skip
    except MainDbMissing:
        return None
    rows = [r for r in rows if db_file(r["id"]) is not None]
    original = (main or {}).get("replay_of")
    if original is not None and db_file(original) is None:
        original = None
    created = (main or {}).get("created_at") or ""
    project = (main or {}).get("project")
    before = next((r for r in rows if r["created_at"] <= created and (project is None or r.get("project") == project)),
                  None)  # fmt: skip
    ordered: list[Choice] = []
    for row in rows:
        why = "the original" if row["id"] == original else "the one before" if before is row else ""
        ordered.append(Choice(row["id"], _label(row, why)))
    first = list(dict.fromkeys([c for c in ordered if c.id == original] +
                               [c for c in ordered if before and c.id == before["id"]]))  # fmt: skip
    rest = [c for c in ordered if c not in first]
    choices = tuple((first + rest)[:MAX_CHOICES])
    return CompareWith(session_id, original, before and before["id"], choices) if choices else None


def base_of(session_id: str) -> str | None:
    """What `session_id` is compared with when no other session is named: its original when it is a
    replay, else the session before it in its project."""
    from assembler.sessiondb import main_row

    found = compare_with(session_id, main_row(session_id))
    return None if found is None else found.original or found.before
