"""Which recorded call answers a request under `capsem replay`: the matching rules, pure.

1. Endpoint. A request can only be answered by a recorded call of the same kind (a model call
   over HTTP, a Responses turn over a WebSocket, an MCP call), method, host and path (the query
   string is ignored).
2. Content. The request bodies, read as JSON, must be equal after what changes on every run by
   design is put aside, inside every JSON string (and in a body that is not JSON):
   - secrets: the recording holds bodies scrubbed (`[redacted hash:…]`), so a request is scrubbed
     the same way before it is compared (the replay server learns the credentials of its headers
     as the recorder does); a redaction marker counts as an id (below), since a session id may be
     learned as a credential in one run and not yet in the other;
   - Claude Code's per-request billing line (`x-anthropic-billing-header: cc_version=…; cch=…;`);
   - dates and times (`2026-11-25`, `2026-11-25T21:43:34.485Z`, `21:43:34`, `11/25/2026`,
     `Wednesday, November 25, 2026`, Unix times in seconds or ms from 2017 to 2033, as text or
     as JSON numbers);
   - the workspace directory as a whole path, also as Claude Code names its project folder
     (`/tmp/ws` -> `-tmp-ws`) and as Gemini CLI names its own (`~/.gemini/tmp/ws`): the
     recording's and the replay's are both read as `<workspace>`. Only those: another path that
     merely ends in the same name (`/home/dev/ws`) is text. A recording with no workspace (made
     with bare mitmdump) puts none aside, and neither does its replay, so both sides read alike;
   - ids: UUIDs (also inside a longer id: `at_01a214b5-…`), prefixed ids with a digit in them
     (`toolu_01…`, `call_…`, `fc_…`, `resp_…`,
     `msg_…`, `session_…`) and hex strings of 24 digits or more. An id may differ from the one
     recorded, but consistently: a recorded id answered once as a new id is that new id for the
     rest of the replay (one to one), so tool-call and session ids an agent mints are mapped,
     and a request that mixes them up is a difference.
   Objects compare whatever the order of their keys (ids are paired in the order of the keys), and
   a string holding a JSON object or array is compared as that JSON (Codex sends metadata that way,
   its keys in any order). Nothing else is tolerated: text, tools, models, parameters and the order of items count.
3. Order. Among the recorded calls not yet used that are equal to the request, the earliest
   answers it, and each recorded call answers once: two identical requests in a row get their
   own recorded answers in order, and calls of parallel conversations interleave freely.
4. A miss. A request no unused recorded call equals is never answered with another call's answer.
   It is compared with the unused recorded call on its endpoint most like it (the most equal
   top-level fields and leading array items; the earliest of equals) to name the first differing
   item: its JSON path and both values, or the id that was mapped otherwise before, or that the
   recording has no more calls there.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

import msgspec

_BILLING = re.compile(r"x-anthropic-billing-header:[^\n]*")
_DATE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\b\d{1,2}/\d{1,2}/\d{4}\b"
    r"|\b(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day,? (?:January|February|March|April|May|June|July|August"
    r"|September|October|November|December) \d{1,2},? \d{4}\b"
    r"|\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"
    r"|\b1[5-9]\d{8}(?:\d{3})?(?:\.\d+)?\b"
)
_EPOCH = (1_500_000_000, 2_000_000_000)
"""Unix times in seconds (2017-2033), or in ms when a thousand times that, read as dates."""
_ID = re.compile(
    r"\[redacted hash:[0-9a-f]+\]"
    r"|(?<![0-9a-fA-F])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9a-fA-F])"
    r"|\b(?:toolu|srvtoolu|call|fc|resp|msg|rs|req|item|chatcmpl|ws|sess|session|user|run|conv)"
    r"_(?=[A-Za-z_-]*\d)[A-Za-z0-9_-]{8,}"
    r"|(?<![0-9a-zA-Z])[0-9a-fA-F]{24,}(?![0-9a-zA-Z])"
)
ID, DATE, BILLING, WORKSPACE = "<id>", "<date>", "<billing>", "<workspace>"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a request goes: `kind` is `http`, `ws` (a Responses turn on a WebSocket) or `mcp`."""

    kind: str
    method: str
    host: str
    path: str

    def __str__(self) -> str:
        return f"{self.method} {self.host}{self.path}" + (" (WebSocket)" if self.kind == "ws" else "")


@dataclass(frozen=True, slots=True)
class Shape:
    """A request body with what changes on every run put aside: `key` digests it, `ids` are the
    ids found in it in order (the mapping is checked on them), `value` is the normalized JSON."""

    key: bytes
    ids: tuple[str, ...]
    value: Any


@lru_cache(maxsize=200_000)  # an agent resends its history: most strings were seen last turn
def _string(text: str, workspace: str | None, billing: bool = True) -> tuple[str, tuple[str, ...]]:
    if workspace:
        base, forms = _workspace_forms(workspace)
        if base in text:
            text = forms.sub(WORKSPACE, text)
    if billing and "x-anthropic-billing-header" in text:
        text = _BILLING.sub(BILLING, text)
    text = _DATE.sub(DATE, text)
    ids = tuple(_ID.findall(text))
    return (_ID.sub(ID, text) if ids else text), ids


def run_invariant(text: str, workspace: str | None = None, *, billing: bool = True) -> str:
    """`text` with what changes on every run by design put aside (rule 2 above, but secrets and id
    mapping): the workspace, Claude Code's billing line (unless `billing` is False), dates and
    times, ids. `capsem diff` compares texts so."""
    return _string(text, workspace, billing)[0]


@lru_cache(maxsize=16)
def _workspace_forms(workspace: str) -> tuple[str, re.Pattern[str]]:
    """The workspace's last name (in every form), and a pattern finding the workspace as a whole
    path, as Claude Code names its project folder (`/tmp/ws` -> `-tmp-ws`), or as Gemini CLI names
    its folder for it (`~/.gemini/tmp/ws`: the last name, there only)."""
    base = workspace.rstrip("/").rsplit("/", 1)[-1]
    slug = re.sub(r"[^A-Za-z0-9]", "-", workspace)
    forms = rf"(?<![\w.-]){re.escape(workspace)}|{re.escape(slug)}|(?<=/\.gemini/tmp/){re.escape(base)}"
    return base, re.compile(rf"(?:{forms})(?![\w.-])")


def _walk(value: Any, workspace: str | None, ids: list[str]) -> Any:
    if isinstance(value, str):
        if len(value) > 1 and value[0] in "{[" and value[-1] in "}]":  # JSON inside a string
            try:
                inner = msgspec.json.decode(value)
            except msgspec.DecodeError:
                pass
            else:
                return {"<json>": _walk(inner, workspace, ids)}
        text, found = _string(value, workspace)
        ids.extend(found)
        return text
    if isinstance(value, dict):  # in the order of the keys: a client may send them in any order
        walked = []
        for k, v in value.items():
            key_ids: list[str] = []
            key = _walk(k, workspace, key_ids)
            walked.append((key if isinstance(key, str) else k, key_ids, v))
        walked.sort(key=lambda entry: entry[0])
        out = {}
        for key, key_ids, v in walked:
            ids.extend(key_ids)
            out[key] = _walk(v, workspace, ids)
        return out
    if isinstance(value, list):
        return [_walk(v, workspace, ids) for v in value]
    if type(value) in (int, float) and (
        _EPOCH[0] <= value < _EPOCH[1] or _EPOCH[0] * 1000 <= value < _EPOCH[1] * 1000
    ):
        return DATE
    return value


class Scrub(Protocol):
    """Scrubs one JSON value's bytes as the recorder scrubbed what it stored; `generation` changes
    when it learns a credential (what it scrubbed before may scrub otherwise now)."""

    generation: int

    def __call__(self, data: bytes) -> bytes: ...


_ITEMS_KEPT = 200_000
"""Shaped items remembered before the memory starts over."""


class Shaper:
    """Shapes request bodies item by item: the value of each top-level field, and each element of
    a top-level array (a message, a tool, a system block), is scrubbed and normalized once and
    remembered by its bytes. An agent resends its whole history every turn, so a request costs
    about what is new in it, not its size."""

    def __init__(self, workspace: str | None = None, scrub: Scrub | None = None) -> None:
        self.workspace, self.scrub = workspace, scrub
        self._items: dict[bytes, tuple[Any, tuple[str, ...], bytes]] = {}
        self._generation = scrub.generation if scrub is not None else 0

    def shape(self, body: bytes) -> Shape:
        """`body` normalized by the rules of the module's docstring (a body that is not JSON is one string)."""
        if self.scrub is not None and (
            self.scrub.generation != self._generation or len(self._items) > _ITEMS_KEPT
        ):
            self._items.clear()
            self._generation = self.scrub.generation
        try:
            top = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
        except (msgspec.DecodeError, msgspec.ValidationError):
            return self._whole(body)
        digest = hashlib.sha256(b"{")
        ids: list[str] = []
        value: dict[str, Any] = {}
        for name in sorted(top):
            raw = bytes(top[name])
            digest.update(len(name).to_bytes(4, "big") + name.encode())
            elements = None
            if raw[:1] == b"[":
                try:
                    elements = msgspec.json.decode(raw, type=list[msgspec.Raw])
                except (msgspec.DecodeError, msgspec.ValidationError):
                    elements = None
            if elements is None:
                normal, found, item = self._item(raw)
                value[name] = normal
                ids.extend(found)
                digest.update(b"=" + item)
                continue
            value[name] = []
            digest.update(b"[" + len(elements).to_bytes(4, "big"))
            for element in elements:
                normal, found, item = self._item(bytes(element))
                value[name].append(normal)
                ids.extend(found)
                digest.update(item)
        return Shape(digest.digest(), tuple(ids), value)

    def _item(self, raw: bytes) -> tuple[Any, tuple[str, ...], bytes]:
        found = self._items.get(raw)
        if found is None:
            data = self.scrub(raw) if self.scrub is not None else raw
            try:
                value = msgspec.json.decode(data)
            except msgspec.DecodeError:
                value = data.decode("utf-8", "replace")
            ids: list[str] = []
            normal = _walk(value, self.workspace, ids)
            found = (normal, tuple(ids), hashlib.sha256(msgspec.json.encode(normal, order="sorted")).digest())
            self._items[raw] = found
        return found

    def _whole(self, body: bytes) -> Shape:
        data = self.scrub(body) if self.scrub is not None and body else body
        try:
            value = msgspec.json.decode(data) if data else None
        except msgspec.DecodeError:
            value = data.decode("utf-8", "replace")
        ids: list[str] = []
        normal = _walk(value, self.workspace, ids)
        return Shape(
            hashlib.sha256(b"=" + msgspec.json.encode(normal, order="sorted")).digest(), tuple(ids), normal
        )


def shape(body: bytes, workspace: str | None = None) -> Shape:
    """`body` shaped on its own (see `Shaper`)."""
    return Shaper(workspace).shape(body)


@dataclass(slots=True)
class Recorded:
    """One recorded call that can answer: its number in the recording (model calls count from 1 in
    the order they were recorded; MCP calls are numbered after them) and its request's shape."""

    number: int
    endpoint: Endpoint
    shape: Shape
    used: bool = False


@dataclass(frozen=True, slots=True)
class Hit:
    call: Recorded


@dataclass(frozen=True, slots=True)
class Miss:
    endpoint: Endpoint
    difference: str
    """The first differing item, in words."""
    expected: Recorded | None
    """The recorded call the request was compared with (the next unused one on its endpoint)."""


@dataclass
class Matcher:
    """The recorded calls and which of them have answered; `match` applies the rules (not thread-safe)."""

    calls: list[Recorded]
    shaper: Shaper = field(default_factory=Shaper)
    """Shapes the replay's requests: with the replay's workspace directory (the recording's is
    applied to `calls` when they are shaped) and the replay's scrubber."""
    ids: dict[str, str] = field(default_factory=dict)
    """Recorded id -> the id the replay uses for it."""
    _by_key: dict[tuple[Endpoint, bytes], deque[Recorded]] = field(default_factory=dict)
    _reverse: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for call in self.calls:
            self._by_key.setdefault((call.endpoint, call.shape.key), deque()).append(call)

    def match(self, endpoint: Endpoint, body: bytes) -> Hit | Miss:
        """The recorded call that answers a request to `endpoint` with `body`, or why none does."""
        new = self.shaper.shape(body)
        candidates = self._by_key.get((endpoint, new.key))
        conflict = None
        while candidates and candidates[0].used:
            candidates.popleft()
        for call in candidates or ():
            if call.used:
                continue
            conflict = self._conflict(call.shape.ids, new.ids)
            if conflict is None:
                self._use(call, new)
                return Hit(call)
        unused = [c for c in self.calls if not c.used and c.endpoint == endpoint]
        expected = max(unused, key=lambda c: (_likeness(c.shape.value, new.value), -c.number), default=None)
        if conflict is not None:
            return Miss(endpoint, conflict, expected)
        if expected is None:
            total = sum(1 for c in self.calls if c.endpoint == endpoint)
            said = f"the recording has no more calls to {endpoint} (it has {total})"
            return Miss(endpoint, said, None)
        return Miss(
            endpoint, first_difference(expected.shape.value, new.value) or "the request differs", expected
        )

    def _conflict(self, recorded: tuple[str, ...], new: tuple[str, ...]) -> str | None:
        for old, now in zip(recorded, new, strict=True):
            mapped = self.ids.get(old)
            if mapped is not None and mapped != now:
                return f"id {_cut(old)} of the recording was {_cut(mapped)} earlier in this replay, now {_cut(now)}"
            back = self._reverse.get(now)
            if mapped is None and back is not None and back != old:
                return f"id {_cut(now)} stands for {_cut(back)} of the recording earlier in this replay, now for {_cut(old)}"
        return None

    def _use(self, call: Recorded, new: Shape) -> None:
        call.used = True
        for old, now in zip(call.shape.ids, new.ids, strict=True):
            self.ids[old] = now
            self._reverse[now] = old


def _likeness(recorded: Any, new: Any) -> int:
    """How much of two normalized bodies is the same: their equal top-level fields, and the equal
    leading items of their arrays (which recorded call a miss is compared with)."""
    if not (isinstance(recorded, dict) and isinstance(new, dict)):
        return int(recorded == new)
    score = 0
    for name, value in recorded.items():
        other = new.get(name)
        if value == other:
            score += 1 + (len(value) if isinstance(value, list) else 0)
        elif isinstance(value, list) and isinstance(other, list):
            score += next((i for i, (a, b) in enumerate(zip(value, other, strict=False)) if a != b), 0)
    return score


def first_difference(recorded: Any, new: Any, path: str = "") -> str | None:
    """The first place two normalized JSON values differ, in words (None when they are equal)."""
    if type(recorded) is not type(new):
        return f"{path or 'the body'}: recorded {_show(recorded)}, now {_show(new)}"
    if isinstance(recorded, dict):
        for name in recorded:
            if name not in new:
                return f"{_join(path, name)}: recorded {_show(recorded[name])}, now absent"
            found = first_difference(recorded[name], new[name], _join(path, name))
            if found:
                return found
        extra = [name for name in new if name not in recorded]
        return f"{_join(path, extra[0])}: not recorded, now {_show(new[extra[0]])}" if extra else None
    if isinstance(recorded, list):
        for i, (a, b) in enumerate(zip(recorded, new, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(recorded) != len(new):
            i = min(len(recorded), len(new))
            more = f"now {_show(new[i])}" if len(new) > i else "now absent"
            was = f"recorded {_show(recorded[i])}" if len(recorded) > i else "not recorded"
            return f"{path}[{i}]: {was}, {more} ({len(recorded)} items recorded, {len(new)} now)"
        return None
    if recorded != new:
        if isinstance(recorded, str) and isinstance(new, str):
            at = next((i for i, (a, b) in enumerate(zip(recorded, new, strict=False)) if a != b),
                      min(len(recorded), len(new)))  # fmt: skip
            start = max(0, at - 20)
            return (f"{path or 'the body'}: recorded {_show(recorded[start:])}, now {_show(new[start:])}"
                    + (f" (from character {at})" if at else ""))  # fmt: skip
        return f"{path or 'the body'}: recorded {_show(recorded)}, now {_show(new)}"
    return None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _show(value: Any, width: int = 60) -> str:
    return _cut(msgspec.json.encode(value).decode(), width)


def _cut(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
