"""Conversations: which earlier model call a request continues, and what recorder state follows it.

The previous call of a conversation is the recent call whose history is mostly in this
request's (every call of a conversation resends its history), else the one sharing the longest
prefix of items, or, for a Responses request that names `previous_response_id`, the call that
answered with that id. A request starts a turn when it brings a new user message and no new
tool result; a subagent's first request is matched to the tool call (`Task`, `Agent`) that
spawned it. The items themselves are `addons/items.py`'s.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import msgspec

from addons.items import Item

_ENCODE = msgspec.json.Encoder(order="sorted")
_RECENT = 16


class _Previous:
    __slots__ = ("call_id", "hashes", "parent", "talk", "turn_id")

    def __init__(
        self, call_id: int, hashes: list[str], turn_id: str, parent: int | None, talk: list[str]
    ) -> None:
        self.call_id, self.hashes, self.turn_id, self.parent, self.talk = (
            call_id,
            hashes,
            turn_id,
            parent,
            talk,
        )


_TALK = frozenset({"message", "tool_call", "tool_result"})
"""The kinds of item that make a conversation's history (not its system prompt or tools)."""


def talk_of(items: list[Item]) -> list[str]:
    """The hashes of the history items (messages, tool calls and results), in order."""
    return [i.hash for i in items if i.kind in _TALK]


SUBAGENT_TOOLS = ("Task", "Agent")
"""Tools that start a subagent (Claude Code): its first user message is the tool's `prompt`."""


@dataclass(slots=True)
class Spawn:
    """A subagent tool call waiting for its subagent's first request."""

    tool_call_id: int
    prompt: str
    turn_id: str


def new_turn(items: list[Item], new: list[bool]) -> bool:
    """A request starts a turn when it brings a new user message and no new tool result: a tool
    loop goes on while results come back, whatever the agent adds beside them (Claude Code puts
    `<system-reminder>` text next to its tool results)."""
    fresh = [entry for entry, is_new in zip(items, new, strict=True) if is_new]
    if any(entry.kind == "tool_result" for entry in fresh):
        return False
    return any(entry.kind == "message" and entry.role in ("user", None) for entry in fresh)


def first_user_text(items: list[Item]) -> str:
    """The text of the first user message (where a subagent's task is written)."""
    entry = next((i for i in items if i.kind == "message" and i.role in ("user", None)), None)
    return entry.content if entry is not None else ""


class Conversations:
    """Which earlier call a request continues, to tell the items new in it (recorder state)."""

    def __init__(self) -> None:
        self._recent: deque[_Previous] = deque(maxlen=_RECENT)
        self._by_response: dict[str, _Previous] = {}
        self.stored: set[str] = set()
        """Hashes of the item contents already stored in this session."""
        self.tokens: dict[str, int] = {}
        """Tokenizer count of each item content seen (items repeat every turn: counted once)."""
        self.rates: dict[tuple[str, str | None], tuple[float, float, float] | None] = {}
        """Input token rates per (provider, model)."""
        self.spawns: deque[Spawn] = deque(maxlen=64)
        """Subagent tool calls whose subagent has not made its first request yet."""
        self.facts: dict[int, Any] = {}
        """What each recent call's cache break is decided on (`capsem.cache_breaks.CallFacts`), by call id."""

    def previous(self, items: list[Item], previous_response_id: str | None = None) -> _Previous | None:
        """The earlier call this request continues: the one named by `previous_response_id`, else
        the latest whose history is mostly in this request's history (the agent resends it, with
        edits: Claude Code changes its first system block every call, moves cache markers, adds
        reminders and trims old thinking), else the one sharing the longest prefix of items."""
        if previous_response_id and previous_response_id in self._by_response:
            return self._by_response[previous_response_id]
        mine = set(talk_of(items))
        best, most = None, 0
        for candidate in self._recent:  # oldest first: a tie goes to the latest
            shared = sum(h in mine for h in candidate.talk)
            if shared and shared * 2 >= len(candidate.talk) and shared >= most:
                best, most = candidate, shared
        if best is not None:
            return best
        hashes = [i.hash for i in items]
        shared_prefix = 0
        for candidate in self._recent:
            n = 0
            for a, b in zip(candidate.hashes, hashes, strict=False):
                if a != b:
                    break
                n += 1
            if n > shared_prefix:
                best, shared_prefix = candidate, n
        return best

    def spawned_by(self, items: list[Item]) -> Spawn | None:
        """The subagent tool call whose prompt opens this new conversation, if any (taken once)."""
        text = first_user_text(items)
        for spawn in reversed(self.spawns):
            escaped = _ENCODE.encode(spawn.prompt).decode("utf-8", "replace")[1:-1]  # as it sits in item JSON
            if spawn.prompt and (spawn.prompt in text or escaped in text):
                self.spawns.remove(spawn)
                return spawn
        return None

    def remember(self, call_id: int, items: list[Item], message_id: str | None, turn_id: str,
                 parent: int | None = None, answer: list[Item] = ()) -> None:  # fmt: skip
        """Remember a call: its items, and its answer as history the next request will resend."""
        entry = _Previous(
            call_id, [i.hash for i in items], turn_id, parent, talk_of(items) + talk_of(list(answer))
        )
        self._recent.append(entry)
        if message_id:
            self._by_response[message_id] = entry
            if len(self._by_response) > 4 * _RECENT:
                self._by_response.pop(next(iter(self._by_response)))
